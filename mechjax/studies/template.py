"""The template study: copy this file to start a new one (docs/contributing.md, "Adding a study").

A two-layer network learns the labels of a linear teacher, ``y = [w*·x > 0]`` with Gaussian ``x``,
once per hidden width. The study shows the four things every study does:

1. **train**: each width with all its seeds in one vmapped program (:meth:`frame.Context.train`:
   checkpoints, resume and progress lines come with it);
2. **analyse**: the trained weights in a cached stage (:meth:`frame.Context.stage`: a rerun after
   an interruption reloads it);
3. **plot**: a figure with its caption;
4. **report**: the summary and the lines the command line prints.

    python -m experiments.template --widths=2,8,32 --steps=2000
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.models.mlp import TwoLayer
from mechjax.studies import frame
from mechjax.train import loop

NAME = "template"


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=2_000, num_seeds=4, log_every=100, checkpoint_every=1_000)
  )
  widths: tuple[int, ...] = config.setting(
    (2, 8, 32),
    "Hidden widths, one condition each.",
    check=config.all_of(config.non_empty, config.distinct, config.each(config.at_least(1))),
  )
  dim: int = config.setting(16, "Input dimension.", check=config.at_least(1))
  batch_size: int = config.setting(64, "Fresh samples per SGD step.", check=config.at_least(1))
  learning_rate: float = config.setting(0.1, "SGD step size.", check=config.positive)
  eval_samples: int = config.setting(1024, "Size of the fixed test set.", check=config.at_least(2))


def teacher(cfg: Config) -> jax.Array:
  """The unit teacher direction ``w*``: the stream ``"teacher"`` of ``--seed``, shared by every
  width and seed (:mod:`mechjax.rng`), so conditions differ only in what they vary."""
  w = jax.random.normal(rng.key(cfg.run.seed, "teacher"), (cfg.dim,))
  return w / jnp.linalg.norm(w)


def make_problem(cfg: Config, width: int) -> loop.Problem:
  """Logistic loss on a fresh batch per step; test accuracy on a fixed test set per seed."""
  model, w_star = TwoLayer(width), teacher(cfg)

  def sample(key, n):
    x = jax.random.normal(key, (n, cfg.dim))
    return x, (x @ w_star > 0).astype(jnp.float32)

  def loss(params, key):
    x, y = sample(key, cfg.batch_size)
    return jnp.mean(optax.sigmoid_binary_cross_entropy(model.apply(params, x), y)), {}

  def evaluate(params, key):
    x, y = sample(key, cfg.eval_samples)
    return {"test_acc": jnp.mean((model.apply(params, x) > 0) == (y == 1))}

  return loop.Problem(lambda key: model.init(key, jnp.zeros((1, cfg.dim))), loss, evaluate)


def alignment(params, w_star) -> np.ndarray:
  """Per seed, the cosine between ``w*`` and the network's direction ``Σ_h a_h W_h`` (readout times
  hidden weights; the gradient of the logit at 0 for ReLU units that are on)."""
  u = jnp.einsum(
    "sih,sh->si",
    params["params"]["hidden"]["kernel"],
    params["params"]["readout"]["kernel"][..., 0],
  )
  return np.asarray(u @ w_star / jnp.linalg.norm(u, axis=-1))


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains every width, measures each one's alignment with the teacher, and plots test accuracy."""
  ctx.plan(len(cfg.widths), "width")
  histories, summary = {}, {"widths": {}}
  for width in cfg.widths:
    result = ctx.train(f"width{width}", make_problem(cfg, width), optax.sgd(cfg.learning_rate))
    histories[width] = result.history
    cos = ctx.stage(
      f"alignment_width{width}", lambda: {"cosine": alignment(result.state["params"], teacher(cfg))}
    )
    final = np.asarray(result.history[-1]["test_acc"])
    summary["widths"][str(width)] = {
      "final_test_acc_mean": float(final.mean()),
      "final_test_acc_sd": float(final.std()),
      "teacher_cosine_mean": float(np.mean(cos["cosine"])),
    }
  return frame.Outputs(
    summary,
    figures=lambda folder: [plot(cfg, histories, folder)],
    captions={
      "accuracy.png": f"Test accuracy against training samples, one line per hidden width: the "
      f"mean over {cfg.run.num_seeds} seeds, shaded ±1 sd."
    },
  )


def plot(cfg: Config, histories: dict[int, list[dict]], folder: str) -> str:
  curves = [
    plotting.Curve(
      np.array([r["step"] for r in h]) * cfg.batch_size,
      np.array([r["test_acc"] for r in h], dtype=float),
      f"width {width}",
    )
    for width, h in histories.items()
  ]
  return plotting.curves_figure(
    [("a linear teacher", curves)], os.path.join(folder, "accuracy.png"), ylabel="test accuracy"
  )


def report(summary: dict) -> list[str]:
  """What the command line prints: each width's final accuracy and teacher alignment."""
  return [
    f"  width {w:>4s}: final test acc {s['final_test_acc_mean']:.3f} ± "
    f"{s['final_test_acc_sd']:.3f}, cosine with the teacher {s['teacher_cosine_mean']:.3f}"
    for w, s in summary["widths"].items()
  ]


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
