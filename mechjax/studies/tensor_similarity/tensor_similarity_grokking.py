"""Tensor similarity across grokking: does the weight-space measure track behaviour through a phase
change?

Modular addition ``(a + b) mod P`` (:mod:`mechjax.data.modular`) with one-hot inputs ``[e_a; e_b]
∈ ℝ^{2P}``, learned by ``Bilinear(2P → hidden, no bias, no projection) → Linear(hidden → P)``, the
setting of Cohen et al. (2026, arXiv:2605.15183, §grokking), itself after Nanda et al. (2023). AdamW
with strong weight decay on a 30% training split memorises first and generalises much later.

Checkpoints are saved on a power schedule ``t_k = round(steps · (k/K)^power)`` (denser early, where
the weights move fastest; :func:`mechjax.train.schedule.power_schedule`), plus the initialisation.
Every pair of checkpoints of a seed is compared by tensor similarity, logit cosine, weight cosine
and CKA of the hidden products on all ``P²`` inputs (:mod:`mechjax.similarity.checkpoints`).

The headline is the Pearson r between tensor similarity and logit cosine over all checkpoint pairs
(``i < j``); the paper reports 0.998. Phases are read off the logged accuracies: *memorisation* ends
at the first step with train accuracy ≥ 0.99, *generalisation* at the first with test accuracy ≥
0.99.
"""

from __future__ import annotations

import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax.data import modular
from mechjax.models import bilinear as bl
from mechjax.similarity import checkpoints
from mechjax.studies import frame
from mechjax.train import loop
from mechjax.train import metrics
from mechjax.train import schedule

RUN = "grokking"
LABELS = checkpoints.LABELS | {"logit_cosine": "logit cosine (all P² inputs)"}
MEASURES = checkpoints.MEASURES
THRESHOLD = 0.99


NAME = "tensor_similarity_grokking"


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=25_000, num_seeds=4, log_every=250, checkpoint_every=25_000)
  )
  p: int = config.setting(
    113, "The modulus P (inputs are one-hot pairs, 2P wide).", check=config.at_least(3)
  )
  hidden: int = config.setting(64, "Width of the bilinear layer.", check=config.at_least(1))
  train_fraction: float = config.setting(
    0.3,
    "Fraction of the P² pairs used for training (the rest is the test set).",
    check=config.within(0, 1),
  )
  learning_rate: float = config.setting(1e-3, "AdamW step size.", check=config.positive)
  weight_decay: float = config.setting(0.3, "AdamW weight decay.", check=config.non_negative)
  weight_decays: tuple[float, ...] = config.setting(
    (),
    "Several weight decays to train side by side in one vmapped program (each with the same "
    "--num_seeds seeds); empty: just --weight_decay.",
    check=config.all_of(config.each(config.non_negative), config.distinct),
  )
  batch_size: int = config.setting(
    512,
    "Training pairs per step (drawn with replacement from the split).",
    check=config.at_least(1),
  )
  num_checkpoints: int = config.setting(
    48, "Checkpoints on the power schedule (the initialisation is added).", check=config.at_least(2)
  )
  checkpoint_power: float = config.setting(
    2.0, "Checkpoint k of K is at steps * (k/K)^power (1 = evenly spaced).", check=config.positive
  )


def model_of(cfg: Config) -> nn.Module:
  return nn.Sequential([bl.Bilinear(cfg.hidden, project=False), bl.Linear(cfg.p)])


def make_problem(cfg: Config) -> loop.Problem:
  model = model_of(cfg)
  train_idx, test_idx = map(jnp.asarray, modular.split(cfg.p, cfg.train_fraction, cfg.run.seed))

  def loss(params, key):
    idx = train_idx[jax.random.randint(key, (cfg.batch_size,), 0, train_idx.shape[0])]
    x, y = modular.pairs(cfg.p, idx)
    ce, acc = metrics.cross_entropy_accuracy(model.apply(params, x), y)
    return ce, {"acc": acc}

  def evaluate(params, key):
    del key
    out = {}
    for name, idx in (("train", train_idx), ("test", test_idx)):
      x, y = modular.pairs(cfg.p, idx)
      logits = model.apply(params, x)
      out[f"{name}_loss"], out[f"{name}_acc"] = metrics.cross_entropy_accuracy(logits, y)
    return out

  return loop.Problem(lambda key: model.init(key, jnp.zeros((1, 2 * cfg.p))), loss, evaluate)


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
  """AdamW; with several weight decays, one injected per member (written into the state by
  ``loop.train(hyperparams=...)``)."""
  if cfg.weight_decays:
    return optax.inject_hyperparams(optax.adamw)(
      learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decays[0]
    )
  return optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)


def members(cfg: Config) -> list[dict]:
  """One entry per trained network: ``{"seed", "weight_decay"}``, weight decay major. With
  ``weight_decays`` every value trains the same ``num_seeds`` seeds (paired), all in one vmapped
  program."""
  wds = cfg.weight_decays or (cfg.weight_decay,)
  return [{"seed": s, "weight_decay": wd} for wd in wds for s in range(cfg.run.num_seeds)]


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains (resuming an interrupted run), compares every pair of checkpoints, and writes
  ``summary.json``, ``similarity.npz`` (the matrices and their steps) and figures."""
  who = members(cfg)
  seed_keys = loop.seed_keys(cfg.run.seed, cfg.run.num_seeds)
  keys = jnp.tile(seed_keys, (len(who) // cfg.run.num_seeds, 1))  # member: its seed's key
  problem, optimizer = make_problem(cfg), make_optimizer(cfg)
  hyperparams = {"weight_decay": [m["weight_decay"] for m in who]} if cfg.weight_decays else None
  saves = schedule.power_schedule(cfg.run.steps, cfg.num_checkpoints, cfg.checkpoint_power)
  fields = {"loss": "train_loss", "train acc": "train_acc", "test acc": "test_acc"}
  summarize = lambda r: metrics.progress_line(r, fields)
  result = ctx.train(
    RUN,
    problem,
    optimizer,
    keys=keys,
    summarize=summarize,
    keep_checkpoints=None,
    checkpoint_steps=saves,
    binary_chunks=True,
    hyperparams=hyperparams,
  )
  params_by_step = result.params_at(saves)
  params_by_step[0] = jax.vmap(lambda k: loop.init_state(problem, optimizer, k)["params"])(keys)
  steps = sorted(params_by_step)
  ctx.log(f"comparing {len(steps)} checkpoints pairwise ({len(who)} network(s))")
  history, final = result.history, result.history[-1]
  all_x, _ = modular.pairs(cfg.p, jnp.arange(cfg.p**2))
  seeds, sims = [], {"steps": np.array(steps)}  # sims: similarity.npz
  for s, member in enumerate(who):
    mats = checkpoints.matrices(model_of(cfg), checkpoints.of_seed(params_by_step, s, steps), all_x)
    sims.update({f"seed{s}/{k}": v for k, v in mats.items()})
    seeds.append(
      {
        **member,
        "memorised_step": metrics.first_step(history, "train_acc", THRESHOLD, s),
        "generalised_step": metrics.first_step(history, "test_acc", THRESHOLD, s),
        "test_acc_half_step": metrics.first_step(history, "test_acc", 0.5, s),
        "final_train_acc": final["train_acc"][s],
        "final_test_acc": final["test_acc"][s],
        "pearson_r_vs_logit_cosine": {
          m: checkpoints.upper_pearson(mats[m], mats["logit_cosine"])
          for m in MEASURES
          if m != "logit_cosine"
        },
        "similarity_init_to_final": {m: mats[m][0, -1] for m in MEASURES},
      }
    )
  r_tensor = lambda group: np.mean([s["pearson_r_vs_logit_cosine"]["tensor"] for s in group])
  summary = {
    "checkpoint_steps": steps,
    "seeds": seeds,
    "pearson_r_tensor_vs_logit_cosine": r_tensor(seeds),
  }
  if cfg.weight_decays:
    summary["by_weight_decay"] = {}
    for wd in cfg.weight_decays:
      group = [s for s in seeds if s["weight_decay"] == wd]
      summary["by_weight_decay"][str(wd)] = {
        "generalised_step": metrics.mean_or_none([s["generalised_step"] for s in group]),
        "final_test_acc": metrics.mean_or_none([s["final_test_acc"] for s in group]),
        "pearson_r_tensor_vs_logit_cosine": r_tensor(group),
      }
  return frame.Outputs(
    summary,
    figures=lambda folder: plot_all(cfg, history, sims, seeds, folder),
    files={"similarity.npz": sims},
    captions={
      "grokking_accuracy.png": "Train and test accuracy during training, seed 0 solid and the "
      "other seeds faint; dashed lines mark seed 0's memorised and generalised steps, ticks the "
      "checkpoints compared.",
      "grokking_similarity_matrices.png": "Each measure's similarity between every pair of seed "
      "0's checkpoints, in training order.",
      "grokking_tensor_vs_logit.png": "Left: tensor similarity against logit cosine for every "
      "pair of seed 0's checkpoints; the dotted line is equality. Right: each measure's "
      "similarity of every checkpoint to the final one, dashed lines the two phases.",
    },
  )


def report(summary: dict) -> list[str]:
  """Per network: accuracies, the two phases, and each measure's Pearson r with the logit cosine."""
  lines = []
  for s in summary["seeds"]:
    r = s["pearson_r_vs_logit_cosine"]
    lines.append(
      f"seed {s['seed']} (weight decay {s['weight_decay']:g}): train acc "
      f"{s['final_train_acc']:.3f}, test acc {s['final_test_acc']:.3f}; memorised at step "
      f"{s['memorised_step']}, generalised at step {s['generalised_step']}"
    )
    lines.append(
      f"  Pearson r with logit cosine over {len(summary['checkpoint_steps'])} checkpoints: tensor "
      f"similarity {r['tensor']:.3f}, weight cosine {r['weight_cosine']:.3f}, CKA {r['cka']:.3f}"
    )
  return lines


def plot_all(
  cfg: Config, history: list[dict], sims: dict, seeds: list[dict], figures: str
) -> list[str]:
  """Writes the three figures into the folder ``figures``; returns their paths."""
  steps = sims["steps"]
  plt, s0, path = plotting.plt, seeds[0], lambda name: os.path.join(figures, name)
  phases = [(s0["memorised_step"], "memorised"), (s0["generalised_step"], "generalised")]
  fig, ax = plt.subplots(figsize=(7, 4))
  for key, colour in (("train_acc", "C0"), ("test_acc", "C1")):
    c = plotting.history_curve(history, key, key.replace("_acc", " accuracy"))
    for s, y in enumerate(c.y_TxS.T):  # seed 0 solid and labelled, the others faint
      ax.plot(c.x_T, y, color=colour, alpha=0.4 if s else 0.9, label=None if s else c.label)
  plotting.mark_steps(ax, phases, text_y=0.55)
  ax.plot(steps, np.full(len(steps), -0.03), "|", color="0.4", label="checkpoints")
  title = (
    f"Modular addition, P = {cfg.p}: memorisation, then generalisation\n"
    "(seed 0 solid, other seeds faint; dashed lines: seed 0's phases)"
  )
  plotting.label_panel(ax, title, "accuracy", "step", grid="", legend=None)
  ax.legend(loc="lower right", bbox_to_anchor=(1.0, 0.08), fontsize=8)
  accuracy = plotting.save(fig, path("grokking_accuracy.png"))

  order = f"{len(steps)} checkpoints in order, step 0 → {steps[-1]}"
  panels = [(f"{LABELS[m]}\n{order}", sims[f"seed0/{m}"]) for m in MEASURES]
  matrices = plotting.matrices_figure(panels, path("grokking_similarity_matrices.png"), vmax=1.0)

  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  t, lc = sims["seed0/tensor"], sims["seed0/logit_cosine"]
  i, j = np.triu_indices(len(steps), k=1)
  axes[0].scatter(lc[i, j], t[i, j], s=4, alpha=0.5)
  axes[0].plot([lc.min(), 1], [lc.min(), 1], "k:", lw=0.8)
  title = f"all checkpoint pairs: Pearson r = {s0['pearson_r_vs_logit_cosine']['tensor']:.3f}"
  plotting.label_panel(axes[0], title, "tensor similarity", "logit cosine", grid="", legend=None)
  for m in MEASURES:
    axes[1].plot(steps, sims[f"seed0/{m}"][:, -1], label=LABELS[m])
  plotting.mark_steps(axes[1], phases)
  ylabel = "similarity to the final checkpoint"
  plotting.label_panel(axes[1], "", ylabel, "checkpoint step", grid="", legend=8)
  return [accuracy, matrices, plotting.save(fig, path("grokking_tensor_vs_logit.png"))]


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
