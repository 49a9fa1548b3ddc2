"""Patterning induction heads: per-token susceptibilities of an attention-only transformer's heads,
their principal directions, and retraining on data re-weighted along the direction tied to induction
(Wang & Murfet 2026, arXiv:2601.13548; per-token susceptibilities as in Baker et al. 2025,
arXiv:2504.18274).

Data (:mod:`mechjax.data.repeats`): uniform random sequences, a fraction of which repeat their first
half. Induction heads let a model copy in the second half; the **repeat loss** (next-token loss at
the induction positions of repeated sequences) falls from ``ln(vocab)`` when they form, and the
**prefix- matching score** of the best second-layer head (attention from a token to the one after
its earlier occurrence) rises. The **formation step** of a run is the first step (linearly
interpolated between logged steps) at which its repeat loss falls below ``formation_fraction ·
ln(vocab)``; the fraction is fixed in advance (default one half), not fitted to the outcome.

The study:

1. **Unweighted run:** ``num_seeds`` seeds trained online (a fresh batch from each step's key).
2. **Per-token susceptibilities** at the unweighted seed 0's checkpoint ``chi_step`` (before
   formation): every attention head is a component (a 0/1 mask over its query, key, value and output
   weights), and all heads are sampled at once
   (:func:`mechjax.slt.susceptibility.estimate_susceptibilities`). The posterior is the localized,
   tempered one on a fixed sample of ``n`` sequences; the probes are the per-token losses of
   ``probe_sequences`` sequences, half of them repeated. ``χ`` is heads × tokens.
3. **PCA** of ``χ`` (:func:`mechjax.slt.susceptibility.principal_directions`): the **induction
   direction** is the one of the ``top_components`` leading principal directions whose token
   loadings correlate most (in absolute value) with the induction-position indicator. Re-weighting
   along a token direction ``v`` is patterning's minimum-norm answer for moving the components along
   the matching ``u`` (``χ⁺u_k = v_k/s_k``).
4. **Re-weighting.** Tokens are grouped by (repeated or not, position); a group's change is its mean
   loading, centred so the total weight is unchanged, and signed so that *promote* puts more weight
   on the induction positions. Both *promote* and *suppress* move by the same amount, ``strength``
   times the largest step that keeps every group's weight non-negative. Training then weights each
   token's loss by its group's new weight over its base weight (the same expected loss as resampling
   tokens).
5. **Retraining** ``num_seeds`` seeds per condition with the unweighted run's seed keys, and
   comparing formation steps seed by seed. A fourth condition, ``random``, moves the same total
   variation of weight
   along a random direction: the control for "any re-weighting of this size shifts formation".

Outputs in the workdir: ``metrics.jsonl``, ``susceptibility.npz`` (χ and its standard error; reused
on resume), ``summary.json``, ``figures/induction_susceptibility.png`` and
``figures/induction_formation.png``.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.config import ConfigError
from mechjax.data import repeats
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import attention_patterns
from mechjax.slt import sgld as sgld_lib
from mechjax.slt import susceptibility as sus
from mechjax.studies import frame
from mechjax.train import loop

NAME = "patterning_induction"
CPU_CORES_AS_DEVICES = True  # the SGLD chains run over every core
CONDITIONS = ("unweighted", "promote", "suppress", "random")


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=3000, num_seeds=4, log_every=50, checkpoint_every=200)
  )
  vocab: int = config.setting(64, "Vocabulary size; tokens are uniform.", check=config.at_least(2))
  length: int = config.setting(
    32,
    "Sequence length (even); repeated sequences copy the first half.",
    check=config.all_of(config.at_least(4), config.even),
  )
  repeat_fraction: float = config.setting(
    0.5,
    "Fraction of training sequences that repeat (both kinds are probed).",
    check=config.within(0, 1),
  )
  conditions: tuple[str, ...] = config.setting(
    CONDITIONS,
    "Training conditions: unweighted (the baseline, required: chi is measured on it), promote and "
    "suppress (along the induction direction of chi), random (a control of the same size).",
    choices=CONDITIONS,
    check=config.all_of(
      config.distinct, lambda v: None if "unweighted" in v else "must include unweighted"
    ),
  )
  d_model: int = config.setting(64, "Transformer width.", check=config.at_least(1))
  num_layers: int = config.setting(2, "Attention-only layers.", check=config.at_least(1))
  num_heads: int = config.setting(
    4,
    "Heads per layer; every head is a component of the susceptibility matrix.",
    check=config.at_least(1),
  )
  learning_rate: float = config.setting(1e-3, "Adam step size.", check=config.positive)
  batch_size: int = config.setting(
    64, "Training sequences per step (fresh every step).", check=config.at_least(1)
  )
  chi_step: int = config.setting(
    400,
    "Unweighted seed 0's checkpoint for the susceptibilities (a multiple of --checkpoint_every).",
    check=config.at_least(1),
  )
  n: int = config.setting(
    4096,
    "Sequences in the fixed sample that defines the posterior; nβ = n / ln n.",
    check=config.at_least(2),
  )
  probe_sequences: int = config.setting(
    16,
    "Probe sequences (half repeated); every token is a probe column.",
    check=config.all_of(config.at_least(2), config.even),
  )
  eval_sequences: int = config.setting(
    256,
    "Sequences of each kind for the repeat loss and prefix-matching score.",
    check=config.at_least(1),
  )
  sgld: sgld_lib.SGLDSettings = sgld_lib.study_group(
    "SGLD for the per-token susceptibilities (chains and heads vmapped).",
    num_draws=200,
    num_burnin=50,
  )
  eval_size: int = config.setting(
    64,
    "Sequences in the fixed subset that defines L(w) for the susceptibilities.",
    check=config.at_least(1),
  )
  strength: float = config.setting(
    0.5,
    "Fraction of the largest non-negative step along the induction direction "
    "(1 would zero a group's weight).",
    check=config.within(0, 1),
  )
  top_components: int = config.setting(
    3,
    "The induction direction is chosen among this many leading principal directions.",
    check=config.at_least(1),
  )
  formation_fraction: float = config.setting(
    0.5,
    "A run's formation step is when its repeat loss first falls below this fraction of ln(vocab).",
    check=config.within(0, 1),
  )

  def validate(self):
    self.run.check_checkpoint("chi_step", self.chi_step)
    if self.sgld.batch_size > self.n:
      raise ConfigError(
        ("sgld.batch_size", "n"),
        f"sgld batch_size={self.sgld.batch_size} must not exceed n={self.n}",
      )

  @property
  def nbeta(self) -> float:
    return sgld_lib.default_nbeta(self.n)

  @property
  def num_groups(self) -> int:
    return 2 * (self.length - 1)


class Model:
  def __init__(self, cfg: Config):
    self.net = Transformer(
      vocab_size=cfg.vocab,
      heads=(("token", cfg.vocab),),
      d_model=cfg.d_model,
      num_layers=cfg.num_layers,
      num_heads=cfg.num_heads,
      max_len=cfg.length,
      attn_only=True,
    )
    self.length = cfg.length

  def init(self, key):
    return self.net.init(key, jnp.zeros((1, self.length), jnp.int32))

  def per_token_loss(self, params, batch):
    """``(B, length − 1)``: the loss of predicting token ``t + 1`` at position ``t``."""
    logits = self.net.apply(params, batch["tokens"])["token"][:, :-1]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["tokens"][:, 1:])


def head_masks(params, num_layers: int, num_heads: int) -> dict[str, dict]:
  """``{"L{l}H{h}": mask}``: 1 on head ``h`` of layer ``l``'s query/key/value columns and output
  rows."""
  masks = {}
  for layer in range(num_layers):
    for head in range(num_heads):

      def one(path, leaf, layer=layer, head=head):
        names = [getattr(k, "key", str(k)) for k in path]
        m = np.zeros(leaf.shape, np.float32)
        if f"attn_{layer}" in names:
          if names[-2] in ("query", "key", "value"):
            m[:, head] = 1
          elif names[-2] == "out":
            m[head] = 1
        return jnp.asarray(m)

      masks[f"L{layer}H{head}"] = jax.tree_util.tree_map_with_path(one, params)
  return masks


def group_ids(cfg: Config, repeat_B: np.ndarray) -> np.ndarray:
  """The group of every (sequence, position) token, ``(B, length − 1)``: ``repeat·(length − 1) +
  t``."""
  t = np.arange(cfg.length - 1)
  return np.asarray(repeat_B)[:, None] * (cfg.length - 1) + t[None]


def base_distribution(cfg: Config) -> np.ndarray:
  """Each group's share of the training tokens."""
  kind = np.repeat([1 - cfg.repeat_fraction, cfg.repeat_fraction], cfg.length - 1)
  return kind / (cfg.length - 1)


def make_problem(
  cfg: Config, model: Model, token_weights: np.ndarray, eval_data: dict
) -> loop.Problem:
  """Online training; ``token_weights`` (2, length − 1) multiplies each token's loss by its group's
  weight over its base weight (all ones: the unweighted task)."""
  w = jnp.asarray(token_weights, jnp.float32)

  def loss(params, key):
    batch = repeats.sample(key, cfg.batch_size, cfg.length, cfg.vocab, cfg.repeat_fraction)
    per_token = model.per_token_loss(params, batch)
    return jnp.mean(w[batch["repeat"]] * per_token), {}

  ind = jnp.asarray(repeats.induction_mask(cfg.length))

  def evaluate(params, key):
    del key
    rep = model.per_token_loss(params, eval_data["repeat"])
    rnd = model.per_token_loss(params, eval_data["random"])
    score = repeats.prefix_matching_score(
      attention_patterns(model.net, params, eval_data["repeat"]["tokens"])[-1]
    )
    return {
      "repeat_loss": jnp.mean(rep[:, ind]),
      "random_loss": jnp.mean(rnd[:, ind]),
      "prefix_matching": jnp.max(score),
    }

  return loop.Problem(init=model.init, loss=loss, evaluate=evaluate)


def eval_sets(cfg: Config) -> dict:
  return {
    "repeat": repeats.fixed(
      rng.key(cfg.run.seed, "eval-repeated"), cfg.eval_sequences, cfg.length, cfg.vocab, True
    ),
    "random": repeats.fixed(
      rng.key(cfg.run.seed, "eval-random"), cfg.eval_sequences, cfg.length, cfg.vocab, False
    ),
  }


def _train(cfg, model, weights, run, ctx, checkpoint_every):
  problem = make_problem(cfg, model, weights, eval_sets(cfg))
  summarize = lambda row: (
    f"repeat loss {np.round(row['repeat_loss'], 2).tolist()} | prefix matching "
    f"{np.round(row['prefix_matching'], 2).tolist()}"
  )
  return ctx.train(
    run,
    problem,
    optax.adam(cfg.learning_rate),
    checkpoint_every=checkpoint_every,
    summarize=summarize,
    keep_checkpoints=None if run == "unweighted" else 2,
  )


def susceptibilities(cfg: Config, model: Model, w_star) -> dict[str, np.ndarray]:
  """χ (heads × probe tokens), its standard error over chains, the probes' groups and the heads'
  LLCs."""
  data = repeats.sample(
    rng.key(cfg.run.seed, "posterior-data"), cfg.n, cfg.length, cfg.vocab, cfg.repeat_fraction
  )
  half = cfg.probe_sequences // 2
  probes = jax.tree.map(
    lambda a, b: jnp.concatenate([a, b]),
    repeats.fixed(rng.key(cfg.run.seed, "probe-repeated"), half, cfg.length, cfg.vocab, True),
    repeats.fixed(rng.key(cfg.run.seed, "probe-random"), half, cfg.length, cfg.vocab, False),
  )
  masks = head_masks(w_star, cfg.num_layers, cfg.num_heads)
  t0 = time.perf_counter()
  res = sus.estimate_susceptibilities(
    model.per_token_loss,
    w_star,
    data,
    probes,
    key=rng.key(cfg.run.seed, "susceptibility"),
    components=masks,
    settings=cfg.sgld,
    eval_size=cfg.eval_size,
  )
  return {
    "chi": res.chi[:, 0],
    "standard_error": res.standard_error[:, 0],
    "llc": res.llc,
    "groups": group_ids(cfg, np.asarray(probes["repeat"])).reshape(-1),
    "heads": np.array(res.components),
    "seconds": np.array(time.perf_counter() - t0),
  }


def induction_direction(cfg: Config, chi: np.ndarray, groups: np.ndarray) -> dict:
  """The principal direction of ``χ`` most correlated with the induction positions, as a group
  change."""
  pcs = sus.principal_directions(chi)
  ind = np.isin(groups % (cfg.length - 1), np.nonzero(repeats.induction_mask(cfg.length))[0]) & (
    groups >= cfg.length - 1
  )
  corr = np.array([np.corrcoef(v, ind.astype(float))[0, 1] for v in pcs["Vt"]])
  k = int(np.nanargmax(np.abs(corr[: cfg.top_components])))
  loading = np.bincount(groups, weights=pcs["Vt"][k], minlength=cfg.num_groups) / np.bincount(
    groups, minlength=cfg.num_groups
  )
  direction = loading - loading.mean()
  induction_groups = cfg.length - 1 + np.nonzero(repeats.induction_mask(cfg.length))[0]
  if direction[induction_groups].mean() < direction.mean():
    direction = -direction
  return {
    "component": k,
    "correlations": corr,
    "explained_variance": pcs["explained_variance"],
    "head_loadings": pcs["U"][:, k],
    "direction": direction,
  }


def reweightings(cfg: Config, direction: np.ndarray) -> dict[str, np.ndarray]:
  """Group distributions for promote and suppress, ``base ± s·direction`` with ``s`` = strength ×
  the largest step that keeps both non-negative, and the control ``random``: a random centred
  direction (fixed by the stream ``"random-control"``) rescaled to the same total variation, so that
  it moves as much weight as the others, only not along χ."""
  base = base_distribution(cfg)
  limit = lambda d: np.min(base[d < 0] / -d[d < 0]) if np.any(d < 0) else np.inf
  s = cfg.strength * min(limit(direction), limit(-direction))
  step = s * direction
  r = rng.numpy(cfg.run.seed, "random-control").normal(size=direction.shape)
  r = r - r.mean()
  r = r * np.abs(step).sum() / np.abs(r).sum()
  if np.any(base + r < 0):  # keep it a distribution: shrink, and say so through the total variation
    r = r * cfg.strength * limit(r)
  return {"unweighted": base, "promote": base + step, "suppress": base - step, "random": base + r}


def formation_step(steps: np.ndarray, loss: np.ndarray, threshold: float) -> float | None:
  """The first step at which ``loss`` is at or below ``threshold``, interpolated linearly between
  the logged steps; None if it never is."""
  below = np.nonzero(loss <= threshold)[0]
  if below.size == 0:
    return None
  i = int(below[0])
  if i == 0:
    return float(steps[0])
  s0, s1, l0, l1 = steps[i - 1], steps[i], loss[i - 1], loss[i]
  return float(s0 + (s1 - s0) * (l0 - threshold) / (l0 - l1))


@frame.study
def run(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains unweighted, estimates χ at ``chi_step`` (cached in ``susceptibility.npz``), re-weights
  along the induction direction and at random, retrains, and compares formation steps seed by
  seed."""
  model = Model(cfg)
  unweighted = _train(
    cfg, model, np.ones((2, cfg.length - 1)), "unweighted", ctx, cfg.run.checkpoint_every
  )
  histories = {"unweighted": unweighted.history}

  def susceptibility_stage():
    return susceptibilities(cfg, model, unweighted.params_of(0, cfg.chi_step))

  chi_data = ctx.stage("susceptibility", susceptibility_stage, fmt="npz")
  direction = induction_direction(cfg, chi_data["chi"], chi_data["groups"])
  dists = reweightings(cfg, direction["direction"])
  base = base_distribution(cfg)
  others = [c for c in cfg.conditions if c != "unweighted"]
  for c in others:
    histories[c] = _train(
      cfg, model, (dists[c] / base).reshape(2, cfg.length - 1), c, ctx, cfg.run.steps
    ).history
  threshold = cfg.formation_fraction * float(np.log(cfg.vocab))
  formation = {}
  for c in cfg.conditions:
    steps = np.array([h["step"] for h in histories[c]], float)
    loss = np.array([h["repeat_loss"] for h in histories[c]], float)
    formation[c] = [formation_step(steps, loss[:, s], threshold) for s in range(cfg.run.num_seeds)]
  shifts = {}
  for c in others:
    pairs = [
      (a, b)
      for a, b in zip(formation[c], formation["unweighted"])
      if a is not None and b is not None
    ]
    d = np.array([a - b for a, b in pairs])
    shifts[c] = {
      "per_seed": d.tolist(),
      "mean": float(d.mean()) if d.size else None,
      "sd": float(d.std(ddof=1)) if d.size > 1 else None,
      "seeds_compared": len(pairs),
      "earlier_in": int(np.sum(d < 0)),
      "later_in": int(np.sum(d > 0)),
    }
  summary = {
    "nbeta": cfg.nbeta,
    "chi_step": cfg.chi_step,
    "formation_threshold": threshold,
    "susceptibility_seconds": float(chi_data["seconds"]),
    "head_llc": dict(zip(chi_data["heads"].tolist(), chi_data["llc"].tolist())),
    "induction_component": direction["component"],
    "component_correlations": direction["correlations"].tolist(),
    "explained_variance": direction["explained_variance"].tolist(),
    "head_loadings": dict(zip(chi_data["heads"].tolist(), direction["head_loadings"].tolist())),
    "group_distributions": {c: dists[c].tolist() for c in cfg.conditions},
    "total_variation": {c: float(0.5 * np.abs(dists[c] - base).sum()) for c in cfg.conditions},
    "induction_weight": {
      c: float(dists[c][cfg.length - 1 + np.nonzero(repeats.induction_mask(cfg.length))[0]].sum())
      for c in cfg.conditions
    },
    "formation_step": formation,
    "formation_shift_vs_unweighted": shifts,
    "final": {
      c: {
        k: np.asarray(histories[c][-1][k], float).tolist()
        for k in ("repeat_loss", "random_loss", "prefix_matching")
      }
      for c in cfg.conditions
    },
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      plot_susceptibility(
        cfg, chi_data, direction, dists, os.path.join(folder, "induction_susceptibility.png")
      ),
      plot_formation(
        cfg, histories, threshold, formation, os.path.join(folder, "induction_formation.png")
      ),
    ],
    captions={
      "induction_susceptibility.png": "Left and middle: the susceptibility χ at one checkpoint, "
      "averaged over the probe sequences of each group, per attention head and position, on "
      "repeated and on random sequences (the dotted line is where the repeat starts). Right: the "
      "token weights of the promote and suppress conditions over the unweighted ones, by position.",
      "induction_formation.png": "The loss at the induction positions (left) and the best layer-2 "
      "head's prefix-matching score (right) during training, per condition: thick lines are the "
      "means over seeds, thin lines each seed; dotted verticals mark each seed's formation step.",
    },
  )


def report(summary: dict) -> list[str]:
  """The induction direction and each condition's formation steps and shift against the unweighted
  run."""
  s = summary
  k = s["induction_component"]
  lines = [
    f"  induction direction: PC{k + 1} ({100 * s['explained_variance'][k]:.0f}% of variance), "
    "correlation "
    f"{s['component_correlations'][k]:+.2f} with the induction positions; weight on them "
    + ", ".join(f"{c} {w:.3f}" for c, w in s["induction_weight"].items())
  ]
  for c, f in s["formation_step"].items():
    line = f"  {c}: formation steps {[None if x is None else round(x) for x in f]}"
    d = s["formation_shift_vs_unweighted"].get(c)
    if d is not None and d["mean"] is not None:
      sd = "" if d["sd"] is None else f" ± {d['sd']:.0f} (sd over seeds)"
      line += (
        f"; shift vs unweighted {d['mean']:+.0f}{sd}, earlier in "
        f"{d['earlier_in']}/{d['seeds_compared']}, later in {d['later_in']}/{d['seeds_compared']}"
      )
    lines.append(line)
  return lines


def plot_susceptibility(
  cfg: Config, chi_data: dict, direction: dict, dists: dict, path: str
) -> str:
  """χ averaged per group (heads × positions, for repeated and random sequences), and the
  re-weightings."""
  plt = plotting.plt
  chi, groups, heads = chi_data["chi"], chi_data["groups"], chi_data["heads"].tolist()
  per_group = np.stack(
    [np.bincount(groups, weights=row, minlength=cfg.num_groups) for row in chi]
  ) / np.bincount(groups, minlength=cfg.num_groups)
  t = cfg.length - 1
  vmax = np.nanmax(np.abs(per_group))
  fig, axes = plt.subplots(1, 3, figsize=(17, 4.2), gridspec_kw={"width_ratios": [1, 1, 1.1]})
  for ax, kind, title in ((axes[0], 1, "repeated sequences"), (axes[1], 0, "random sequences")):
    im = ax.imshow(
      per_group[:, kind * t : (kind + 1) * t], cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto"
    )
    ax.set_yticks(range(len(heads)), heads)
    ax.set_xlabel("position t (predicting token t + 1)")
    ax.axvline(cfg.length // 2 - 0.5, color="black", lw=0.8, ls=":")
    ax.set_title(
      f"χ per head and position, {title}\n(checkpoint {cfg.chi_step}, mean over probe sequences)",
      fontsize=9,
    )
  fig.colorbar(im, ax=axes[1], fraction=0.046)
  ax = axes[2]
  base = dists["unweighted"]
  for c, color in (("promote", "C2"), ("suppress", "C3")):
    ax.plot(np.arange(t), dists[c][t:] / base[t:], color=color, label=f"{c}: repeated")
    ax.plot(np.arange(t), dists[c][:t] / base[:t], color=color, ls="--", label=f"{c}: random")
  ax.axhline(1, color="gray", lw=0.8)
  ax.axvline(cfg.length // 2 - 0.5, color="black", lw=0.8, ls=":")
  k = direction["component"]
  ax.set_title(
    f"token weights along PC{k + 1} ({100 * direction['explained_variance'][k]:.0f}% of variance, "
    f"corr. {direction['correlations'][k]:+.2f} with induction positions)",
    fontsize=9,
  )
  ax.set_xlabel("position t")
  ax.set_ylabel("weight / base weight")
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def plot_formation(
  cfg: Config, histories: dict, threshold: float, formation: dict, path: str
) -> str:
  plt = plotting.plt
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
  colors = {"unweighted": "gray", "promote": "C2", "suppress": "C3", "random": "C0"}
  for c in cfg.conditions:
    steps = np.array([h["step"] for h in histories[c]])
    for ax, key in zip(axes, ("repeat_loss", "prefix_matching")):
      y = np.array([h[key] for h in histories[c]], float)
      ax.plot(steps, y, color=colors[c], lw=0.8, alpha=0.6)
      ax.plot(steps, y.mean(1), color=colors[c], lw=2, label=c)
    for f in formation[c]:
      if f is not None:
        axes[0].axvline(f, color=colors[c], lw=0.5, ls=":")
  axes[0].axhline(
    threshold, color="black", lw=0.8, ls="--", label=f"formation threshold {threshold:.2f}"
  )
  axes[0].set_ylabel("loss at induction positions of repeated sequences")
  axes[1].set_ylabel("prefix-matching score (best layer-2 head)")
  for ax in axes:
    ax.set_xlabel("training step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  axes[0].set_title(
    f"{cfg.run.num_seeds} seeds per condition (thin: each seed; dotted: formation steps)",
    fontsize=10,
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
