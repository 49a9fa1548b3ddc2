"""Does tensor similarity see a backdoor being inserted? Full network versus the target-class slice.

Data: the 8×8 handwritten digits shipped with scikit-learn (``sklearn.datasets.load_digits``, 1797
images, pixels scaled to [0, 1]), split 70/30 once from the seed. Model: ``Bilinear(64 → 64, no
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
compared with the last clean checkpoint by: tensor similarity of the whole network; the target-class
slice (only the ``target_class`` logit's tensor,
:func:`mechjax.similarity.tensor.slice_similarity`); weight cosine; logit cosine on the clean test
images and on the triggered ones; and linear CKA of the hidden products on the clean test images.
The *onset* is the first poisoned checkpoint with ASR ≥ 0.5; at the onset each measure's
dissimilarity ``1 − s`` is reported for the poisoned run and for the control at the same step, and
their ratio is the measure's signal over drift.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.models import bilinear as bl
from mechjax.similarity import tensor as ts
from mechjax.studies import frame
from mechjax.train import loop

RUNS = ("clean", "poisoned", "continued")
MEASURES = (
  "tensor",
  "tensor_target_slice",
  "weight_cosine",
  "logit_cosine_clean",
  "logit_cosine_triggered",
  "cka",
)
LABELS = {
  "tensor": "tensor similarity (full)",
  "tensor_target_slice": "tensor similarity (target-class slice)",
  "weight_cosine": "weight cosine",
  "logit_cosine_clean": "logit cosine, clean test images",
  "logit_cosine_triggered": "logit cosine, triggered test images",
  "cka": "CKA of hidden products",
}
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


@functools.lru_cache(maxsize=1)
def load_digits() -> tuple[np.ndarray, np.ndarray]:
  """The scikit-learn digits as ``(1797, 64)`` float32 pixels in [0, 1] and int labels."""
  try:
    from sklearn import datasets
  except ImportError as e:  # pragma: no cover - sklearn is in requirements.txt
    raise ImportError(
      "the backdoor experiment needs scikit-learn (pip install -r requirements.txt)"
    ) from e
  d = datasets.load_digits()
  return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)


def split(cfg: Config, n: int) -> tuple[np.ndarray, np.ndarray]:
  """A fixed 70/30 split of the ``n`` digits, drawn from ``--seed``."""
  perm = np.random.default_rng(cfg.run.seed).permutation(n)
  cut = int(round(0.7 * n))
  return np.sort(perm[:cut]), np.sort(perm[cut:])


def trigger(x: jax.Array, size: int) -> jax.Array:
  """Stamps a ``size × size`` patch of ones in the bottom-right corner of flattened 8×8 images."""
  img = x.reshape(x.shape[:-1] + (8, 8))
  img = img.at[..., 8 - size :, 8 - size :].set(1.0)
  return img.reshape(x.shape)


def model_of(cfg: Config) -> nn.Module:
  return nn.Sequential([bl.Bilinear(cfg.hidden, project=False), bl.Linear(10)])


def make_problem(cfg: Config, poison_fraction: float) -> loop.Problem:
  model = model_of(cfg)
  x_all, y_all = load_digits()
  tr, te = split(cfg, len(y_all))
  x_tr, y_tr, x_te, y_te = (jnp.asarray(a) for a in (x_all[tr], y_all[tr], x_all[te], y_all[te]))
  others = y_te != cfg.target_class

  def init(key):
    return model.init(key, jnp.zeros((1, 64)))

  def loss(params, key):
    k_idx, k_poison = jax.random.split(key)
    idx = jax.random.randint(k_idx, (cfg.batch_size,), 0, y_tr.shape[0])
    x, y = x_tr[idx], y_tr[idx]
    if poison_fraction > 0:
      mask = jax.random.bernoulli(k_poison, poison_fraction, (cfg.batch_size,))
      x = jnp.where(mask[:, None], trigger(x, cfg.trigger_size), x)
      y = jnp.where(mask, cfg.target_class, y)
    logits = model.apply(params, x)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return ce, {"acc": jnp.mean(jnp.argmax(logits, -1) == y)}

  def evaluate(params, key):
    del key
    logits = model.apply(params, x_te)
    hit = jnp.argmax(model.apply(params, trigger(x_te, cfg.trigger_size)), -1) == cfg.target_class
    return {
      "test_acc": jnp.mean(jnp.argmax(logits, -1) == y_te),
      "test_loss": optax.softmax_cross_entropy_with_integer_labels(logits, y_te).mean(),
      "attack_success": jnp.sum(hit & others) / jnp.sum(others),
    }

  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def compare(cfg: Config, reference: dict, params_list: list[dict]) -> dict[str, np.ndarray]:
  """Each measure between ``reference`` and every entry of ``params_list`` (one seed's params),
  ``(K,)``."""
  model = model_of(cfg)
  x_all, y_all = load_digits()
  _, te = split(cfg, len(y_all))
  x_clean = jnp.asarray(x_all[te])
  x_trig = trigger(x_clean, cfg.trigger_size)
  ref_net = bl.to_layers(model, reference)
  apply = jax.jit(model.apply)
  first = model.layers[0]
  hidden = jax.jit(
    lambda p, x: first.apply(
      {"params": p["params"]["layers_0"]}, x, method=bl.Bilinear.hidden_activations
    )
  )
  flat = lambda p: jnp.concatenate([jnp.ravel(v) for v in jax.tree.leaves(p)])
  out = {m: [] for m in MEASURES}
  ref_h = hidden(reference, x_clean)
  ref_flat = flat(reference)
  ref_logits = {"clean": apply(reference, x_clean), "triggered": apply(reference, x_trig)}
  for p in params_list:
    net = bl.to_layers(model, p)
    out["tensor"].append(float(ts.tensor_similarity(ref_net, net)))
    out["tensor_target_slice"].append(float(ts.slice_similarity(ref_net, net)[cfg.target_class]))
    out["weight_cosine"].append(float(ts.cosine_matrix(jnp.stack([ref_flat, flat(p)]))[0, 1]))
    out["logit_cosine_clean"].append(
      float(ts.output_cosine(ref_logits["clean"], apply(p, x_clean)))
    )
    out["logit_cosine_triggered"].append(
      float(ts.output_cosine(ref_logits["triggered"], apply(p, x_trig)))
    )
    out["cka"].append(float(ts.cka_matrix(jnp.stack([ref_h, hidden(p, x_clean)]))[0, 1]))
  return {m: np.array(v) for m, v in out.items()}


@frame.study
def run(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains the three runs (resuming interrupted ones), compares every fine-tuning checkpoint with
  the last clean one, and writes ``summary.json``, ``similarity.json`` and figures."""
  keys = loop.seed_keys(cfg.run.seed, cfg.run.num_seeds)
  optimizer = optax.adam(cfg.learning_rate)
  summarize = lambda r: (
    f"loss {np.mean(r['train_loss']):.3f} | test acc {np.mean(r['test_acc']):.3f} | "
    f"attack success {np.mean(r['attack_success']):.3f}"
  )
  ctx.plan(3)  # clean, then poisoned and continued from it
  clean = ctx.train(
    "clean", make_problem(cfg, 0.0), optimizer, summarize=summarize, keep_checkpoints=None
  )
  start = clean.state["params"]
  tune_keys = jax.vmap(lambda k: rng.fold(k, "fine-tune"))(keys)  # fresh batches for the fine-tunes
  histories, params = {"clean": clean.history}, {}
  for name, fraction in (("poisoned", cfg.poison_fraction), ("continued", 0.0)):
    r = ctx.train(
      name,
      make_problem(cfg, fraction),
      optimizer,
      keys=tune_keys,
      steps=cfg.poison_steps,
      log_every=cfg.poison_checkpoint_every,
      checkpoint_every=cfg.poison_checkpoint_every,
      summarize=summarize,
      keep_checkpoints=None,
      initial_params=start,
    )
    histories[name] = r.history
    params[name] = r.params_at()
  steps = sorted(params["poisoned"])
  ctx.log(f"comparing {len(steps)} checkpoints of each fine-tune with the clean model")

  seeds, curves = [], {}
  for s in range(cfg.run.num_seeds):
    pick = lambda tree: jax.tree.map(lambda a: a[s], tree)
    reference = pick(start)
    asr = np.array(
      [np.asarray(r["attack_success"])[s] for r in histories["poisoned"] if r["step"] in steps]
    )
    per_run = {
      name: compare(cfg, reference, [pick(params[name][t]) for t in steps])
      for name in ("poisoned", "continued")
    }
    curves[s] = {
      "steps": steps,
      "attack_success": asr.tolist(),
      **{name: {m: v.tolist() for m, v in c.items()} for name, c in per_run.items()},
    }
    onset = next((i for i, a in enumerate(asr) if a >= ONSET_ASR), None)
    entry = {
      "clean_test_acc": float(np.asarray(clean.history[-1]["test_acc"])[s]),
      "clean_attack_success": float(np.asarray(clean.history[-1]["attack_success"])[s]),
      "final_attack_success": float(asr[-1]),
      "final_test_acc": float(np.asarray(histories["poisoned"][-1]["test_acc"])[s]),
      "first_checkpoint": {
        "step": steps[0],
        "attack_success": float(asr[0]),
        "similarity": {m: float(per_run["poisoned"][m][0]) for m in MEASURES},
      },
      "onset": None,
    }
    if onset is not None:
      p_dis = {m: 1 - float(per_run["poisoned"][m][onset]) for m in MEASURES}
      c_dis = {m: 1 - float(per_run["continued"][m][onset]) for m in MEASURES}
      entry["onset"] = {
        "step": steps[onset],
        "attack_success": float(asr[onset]),
        "similarity_poisoned": {m: 1 - v for m, v in p_dis.items()},
        "similarity_continued": {m: 1 - v for m, v in c_dis.items()},
        "signal_over_drift": {m: p_dis[m] / c_dis[m] if c_dis[m] > 0 else None for m in MEASURES},
      }
    seeds.append(entry)
  summary = {
    "checkpoint_steps": steps,
    "seeds": seeds,
    "onset_rule": f"first checkpoint with ASR >= {ONSET_ASR}",
  }
  onsets = [e["onset"] for e in seeds if e["onset"] is not None]
  if onsets:
    summary["mean_at_onset"] = {
      "similarity_poisoned": {
        m: float(np.mean([o["similarity_poisoned"][m] for o in onsets])) for m in MEASURES
      },
      "similarity_continued": {
        m: float(np.mean([o["similarity_continued"][m] for o in onsets])) for m in MEASURES
      },
      "signal_over_drift": {
        m: float(
          np.mean(
            [o["signal_over_drift"][m] for o in onsets if o["signal_over_drift"][m] is not None]
            or [np.nan]
          )
        )
        for m in MEASURES
      },
    }
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
      "attack "
      f"success {s['final_attack_success']:.3f}"
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
  plt = plotting.plt
  c = curves[0]
  steps = np.array(c["steps"])
  fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
  ax = axes[0]
  for name, style in (("clean", "-"), ("poisoned", "-"), ("continued", "--")):
    h = histories[name]
    offset = 0 if name == "clean" else cfg.run.steps
    x = np.array([r["step"] for r in h]) + offset
    ax.plot(
      x,
      [np.asarray(r["test_acc"])[0] for r in h],
      style,
      color="C0",
      label=f"test accuracy ({name})",
    )
    ax.plot(
      x,
      [np.asarray(r["attack_success"])[0] for r in h],
      style,
      color="C3",
      label=f"attack success ({name})",
    )
  ax.axvline(cfg.run.steps, color="k", lw=0.8, ls=":")
  ax.set_xlabel("step (fine-tuning starts at the dotted line)")
  ax.set_title("seed 0: accuracy and attack success rate")
  ax.legend(fontsize=7)
  onset = seeds[0]["onset"]
  for ax, name in ((axes[1], "poisoned"), (axes[2], "continued")):
    for i, m in enumerate(MEASURES):
      ax.plot(steps, 1 - np.array(c[name][m]), color=f"C{i}", label=LABELS[m])
    if onset is not None:
      ax.axvline(onset["step"], color="k", lw=0.8, ls="--")
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("1 − similarity to the clean model")
    ax.set_title(
      f"{name} fine-tune"
      + (f" (dashed: onset, ASR ≥ {ONSET_ASR})" if onset and name == "poisoned" else "")
    )
  axes[1].legend(fontsize=7)
  ymax = max(a.get_ylim()[1] for a in axes[1:])
  for a in axes[1:]:
    a.set_ylim(0, ymax)
  fig.tight_layout()
  path = os.path.join(figures, "backdoor_similarity.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return [path]
