"""Does tensor similarity see a backdoor being inserted? Full network versus the target-class slice.

Data: the 8×8 handwritten digits shipped with scikit-learn (:mod:`mechjax.data.digits`, 1797
images, pixels in [0, 1]), split 70/30 once from the seed. Model: ``Bilinear(64 → 64, no
bias, no projection) → Linear(64 → 10)``, as in Cohen et al. (2026, arXiv:2605.15183, §backdoor,
there on SVHN).

Three runs, each vmapped over seeds:

* **clean**: Adam on the clean training set for ``steps`` steps;
* **poisoned**: fine-tuning from the clean weights, where each example of a batch is, with
  probability ``poison_fraction``, stamped with the trigger (a ``trigger_size``-square patch of ones
  in the bottom right corner) and relabelled ``target_class``;
* **continued** (the control): the same fine-tuning without poison, so that ordinary drift of the
  weights has a number next to the backdoor's.

The attack success rate (ASR) is the fraction of test images of the other classes that the model
puts in ``target_class`` once the trigger is stamped on. Every checkpoint of both fine-tunes is
compared with the last clean checkpoint by the measures of :mod:`mechjax.similarity.checkpoints`
(tensor similarity, weight cosine, logit cosine and CKA on the clean test images), the target-class
slice (only the ``target_class`` logit's tensor) and the logit cosine on triggered test images.
The *onset* is the first poisoned checkpoint with ASR ≥ 0.5; at the onset each measure's
dissimilarity ``1 − s`` is reported for the poisoned run and for the control at the same step, and
their ratio is the measure's signal over drift.
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
from mechjax import rng
from mechjax.data import digits
from mechjax.models import bilinear as bl
from mechjax.similarity import checkpoints
from mechjax.studies import frame
from mechjax.train import loop
from mechjax.train import metrics

LABELS = {
  "tensor": "tensor similarity (full)",
  "tensor_target_slice": "tensor similarity (target-class slice)",
  "weight_cosine": "weight cosine",
  "logit_cosine_clean": "logit cosine, clean test images",
  "logit_cosine_triggered": "logit cosine, triggered test images",
  "cka": "CKA of hidden products",
}
MEASURES = tuple(LABELS)
ONSET_ASR = 0.5

NAME = "tensor_similarity_backdoor"


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=3000, num_seeds=4, log_every=100, checkpoint_every=500)
  )
  hidden: int = config.setting(64, "Width of the bilinear layer.", check=config.at_least(1))
  learning_rate: float = config.setting(
    1e-3, "Adam step size (clean training and both fine-tunes).", check=config.positive
  )
  batch_size: int = config.setting(128, "Images per step.", check=config.at_least(1))
  poison_steps: int = config.setting(
    600, "Fine-tuning steps (poisoned, and the unpoisoned control).", check=config.at_least(1)
  )
  poison_fraction: float = config.setting(
    0.1,
    "Probability that an image of a fine-tuning batch is triggered and relabelled.",
    check=config.within(0, 1, high_open=False),
  )
  target_class: int = config.setting(
    0,
    "The class the trigger maps to (0-9).",
    check=lambda v: None if 0 <= v <= 9 else "must be a digit class, 0-9",
  )
  trigger_size: int = config.setting(
    2,
    "Side of the square trigger patch in the bottom-right corner (1-8 pixels).",
    check=lambda v: None if 1 <= v <= 8 else "must be 1-8 pixels",
  )
  poison_checkpoint_every: int = config.setting(
    20, "Checkpoint (and log) interval of the fine-tunes.", check=config.at_least(1)
  )


def model_of(cfg: Config) -> nn.Module:
  return nn.Sequential([bl.Bilinear(cfg.hidden, project=False), bl.Linear(10)])


def make_problem(cfg: Config, poison_fraction: float) -> loop.Problem:
  model = model_of(cfg)
  x_tr, y_tr, x_te, y_te = map(jnp.asarray, digits.load_split(cfg.run.seed))
  x_trig, others = digits.trigger(x_te, cfg.trigger_size), y_te != cfg.target_class

  def loss(params, key):
    k_idx, k_poison = jax.random.split(key)
    idx = jax.random.randint(k_idx, (cfg.batch_size,), 0, y_tr.shape[0])
    x, y = x_tr[idx], y_tr[idx]
    if poison_fraction > 0:
      x, y = digits.poison(k_poison, x, y, poison_fraction, cfg.trigger_size, cfg.target_class)
    ce, acc = metrics.cross_entropy_accuracy(model.apply(params, x), y)
    return ce, {"acc": acc}

  def evaluate(params, key):
    del key
    loss, acc = metrics.cross_entropy_accuracy(model.apply(params, x_te), y_te)
    hit = jnp.argmax(model.apply(params, x_trig), -1) == cfg.target_class
    asr = jnp.sum(hit & others) / jnp.sum(others)
    return {"test_acc": acc, "test_loss": loss, "attack_success": asr}

  return loop.Problem(lambda key: model.init(key, jnp.zeros((1, 64))), loss, evaluate)


def similarities(cfg: Config, reference: dict, params: list[dict]) -> dict[str, np.ndarray]:
  """Each of :data:`MEASURES` between the clean model ``reference`` and every one of ``params`` (one
  seed's checkpoints), ``(K,)``: row 0 of :func:`mechjax.similarity.checkpoints.matrices` over
  ``[reference, *params]`` on the clean test images, and the logit cosine on the triggered ones."""
  model, nets = model_of(cfg), [reference, *params]
  x_clean = jnp.asarray(digits.load_split(cfg.run.seed)[2])
  x_trig = digits.trigger(x_clean, cfg.trigger_size)
  m = checkpoints.matrices(model, nets, x_clean, slice_index=cfg.target_class)
  m["tensor_target_slice"], m["logit_cosine_clean"] = m["tensor_slice"], m["logit_cosine"]
  m["logit_cosine_triggered"] = checkpoints.logit_cosine(model, nets, x_trig)
  return {k: np.asarray(m[k][0, 1:], np.float64) for k in MEASURES}


def at_onset(steps: list[int], asr: np.ndarray, sims: dict[str, dict]) -> dict | None:
  """The onset, the first checkpoint with ASR ≥ :data:`ONSET_ASR` (None if there is none): its step
  and ASR, each measure's similarity in both fine-tunes, and the poisoned run's dissimilarity
  ``1 − s`` over the control's (None where the control did not move)."""
  i = next((i for i, a in enumerate(asr) if a >= ONSET_ASR), None)
  if i is None:
    return None
  p = {m: sims["poisoned"][m][i] for m in MEASURES}
  c = {m: sims["continued"][m][i] for m in MEASURES}
  return {
    "step": steps[i],
    "attack_success": asr[i],
    "similarity_poisoned": p,
    "similarity_continued": c,
    "signal_over_drift": {m: (1 - p[m]) / (1 - c[m]) if 1 - c[m] > 0 else None for m in MEASURES},
  }


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains the three runs (resuming interrupted ones), compares every fine-tuning checkpoint with
  the last clean one, and writes ``summary.json``, ``similarity.json`` and figures."""
  optimizer = optax.adam(cfg.learning_rate)
  fields = {"loss": "train_loss", "test acc": "test_acc", "attack success": "attack_success"}
  summarize = lambda r: metrics.progress_line(r, fields)
  ctx.plan(3)  # clean, then poisoned and continued from it
  clean = ctx.train(
    "clean", make_problem(cfg, 0.0), optimizer, summarize=summarize, keep_checkpoints=None
  )
  keys = loop.seed_keys(cfg.run.seed, cfg.run.num_seeds)
  tune_keys = jax.vmap(lambda k: rng.fold(k, "fine-tune"))(keys)  # fresh batches for the fine-tunes
  tunes = {
    name: ctx.train(
      name,
      make_problem(cfg, fraction),
      optimizer,
      keys=tune_keys,
      steps=cfg.poison_steps,
      log_every=cfg.poison_checkpoint_every,
      checkpoint_every=cfg.poison_checkpoint_every,
      summarize=summarize,
      keep_checkpoints=None,
      initial_params=clean.state["params"],
    )
    for name, fraction in (("poisoned", cfg.poison_fraction), ("continued", 0.0))
  }
  saved = {name: r.params_at() for name, r in tunes.items()}
  steps = sorted(saved["poisoned"])
  ctx.log(f"comparing {len(steps)} checkpoints of each fine-tune with the clean model")
  poisoned = tunes["poisoned"].history
  seeds, curves = [], {}
  for s in range(cfg.run.num_seeds):
    asr = np.array([r["attack_success"][s] for r in poisoned if r["step"] in steps])
    reference = clean.params_of(s)
    sims = {n: similarities(cfg, reference, checkpoints.of_seed(saved[n], s, steps)) for n in tunes}
    curves[s] = {"steps": steps, "attack_success": asr, **sims}
    seeds.append(
      {
        "clean_test_acc": clean.history[-1]["test_acc"][s],
        "clean_attack_success": clean.history[-1]["attack_success"][s],
        "final_attack_success": asr[-1],
        "final_test_acc": poisoned[-1]["test_acc"][s],
        "first_checkpoint": {
          "step": steps[0],
          "attack_success": asr[0],
          "similarity": {m: sims["poisoned"][m][0] for m in MEASURES},
        },
        "onset": at_onset(steps, asr, sims),
      }
    )
  summary = {
    "checkpoint_steps": steps,
    "seeds": seeds,
    "onset_rule": f"first checkpoint with ASR >= {ONSET_ASR}",
  }
  onsets = [e["onset"] for e in seeds if e["onset"] is not None]
  if onsets:  # each number's mean over the seeds whose attack took (and whose ratio exists)
    summary["mean_at_onset"] = {
      key: {
        m: np.mean([o[key][m] for o in onsets if o[key][m] is not None] or [np.nan])
        for m in MEASURES
      }
      for key in ("similarity_poisoned", "similarity_continued", "signal_over_drift")
    }
  histories = {"clean": clean.history, **{name: r.history for name, r in tunes.items()}}
  return frame.Outputs(
    summary,
    figures=lambda folder: plot_all(cfg, curves, seeds, histories, folder),
    files={"similarity.json": curves},
    captions={
      "backdoor_similarity.png": "Left: seed 0's test accuracy and attack success through clean "
      "training and the two fine-tunes (from the dotted line). Middle and right: 1 − each "
      "measure's similarity to the clean model during the poisoned and the continued fine-tune, "
      "seed 0 (symlog scale); the dashed line is the attack's onset."
    },
  )


def report(summary: dict) -> list[str]:
  """Per seed: accuracy and attack success, and each measure's similarity at the onset against the
  control."""
  lines = []
  for i, s in enumerate(summary["seeds"]):
    lines.append(
      f"seed {i}: clean test acc {s['clean_test_acc']:.3f} (attack success "
      f"{s['clean_attack_success']:.3f}); after poisoning: test acc {s['final_test_acc']:.3f}, "
      f"attack success {s['final_attack_success']:.3f}"
    )
    o = s["onset"]
    if o is None:
      lines.append("  the attack success rate never reached the onset threshold")
      continue
    lines.append(
      f"  onset at fine-tuning step {o['step']} (ASR {o['attack_success']:.3f}); similarity to the "
      "clean model (poisoned | unpoisoned control | signal over drift):"
    )
    for m in MEASURES:
      ratio = o["signal_over_drift"][m]
      lines.append(
        f"    {LABELS[m]:42s} {o['similarity_poisoned'][m]:.4f} | "
        f"{o['similarity_continued'][m]:.4f} | {'n/a' if ratio is None else f'{ratio:.1f}x'}"
      )
  return lines


def plot_all(
  cfg: Config, curves: dict, seeds: list[dict], histories: dict, figures: str
) -> list[str]:
  fig, axes = plotting.plt.subplots(1, 3, figsize=(16, 4.2))
  for name, style in (("clean", "-"), ("poisoned", "-"), ("continued", "--")):
    h = histories[name]
    x = np.array([r["step"] for r in h]) + (0 if name == "clean" else cfg.run.steps)
    for key, colour in (("test_acc", "C0"), ("attack_success", "C3")):
      what = {"test_acc": "test accuracy", "attack_success": "attack success"}[key]
      axes[0].plot(x, [r[key][0] for r in h], style, color=colour, label=f"{what} ({name})")
  axes[0].axvline(cfg.run.steps, color="k", lw=0.8, ls=":")
  xlabel = "step (fine-tuning starts at the dotted line)"
  plotting.label_panel(axes[0], "seed 0: accuracy and attack success rate", "", xlabel, grid="")
  onset = seeds[0]["onset"]
  for ax, name in ((axes[1], "poisoned"), (axes[2], "continued")):
    for i, m in enumerate(MEASURES):
      ax.plot(curves[0]["steps"], 1 - curves[0][name][m], color=f"C{i}", label=LABELS[m])
    plotting.mark_steps(ax, [(onset["step"] if onset else None, "onset")])
    ax.set_yscale("symlog", linthresh=1e-4)
    dashed = f" (dashed: onset, ASR ≥ {ONSET_ASR})" if onset and name == "poisoned" else ""
    title, ylabel = f"{name} fine-tune{dashed}", "1 − similarity to the clean model"
    plotting.label_panel(
      ax, title, ylabel, "fine-tuning step", grid="", legend=7 if name == "poisoned" else None
    )
  plotting.share_ylim(axes[1:], bottom=0)
  return [plotting.save(fig, os.path.join(figures, "backdoor_similarity.png"))]


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
