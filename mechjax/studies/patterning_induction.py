"""Patterning induction heads: per-token susceptibilities of an attention-only transformer's heads,
their principal directions, and retraining on data re-weighted along the direction tied to induction
(Wang & Murfet 2026, arXiv:2601.13548; per-token susceptibilities as in Baker et al. 2025,
arXiv:2504.18274).

Data (:mod:`mechjax.data.repeats`): uniform random sequences, a fraction of which repeat their first
half. Induction heads let a model copy in the second half; the **repeat loss** (next-token loss at
the induction positions of repeated sequences) falls from ``ln(vocab)`` when they form, and the
**prefix-matching score** of the best second-layer head (attention from a token to the one after
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
   variation of weight along a random direction: the control for "any re-weighting of this size
   shifts formation".

Outputs in the workdir: ``metrics.jsonl``, ``susceptibility.npz`` (χ, its standard error, the heads'
LLCs; reused on resume), ``summary.json`` and ``figures/induction_{susceptibility,formation}.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.config import ConfigError
from mechjax.data import repeats
from mechjax.models import transformer
from mechjax.slt import patterning
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

  @property
  def induction_groups(self) -> np.ndarray:
    """The groups of the induction positions of repeated sequences."""
    return self.length - 1 + np.nonzero(repeats.induction_mask(self.length))[0]


def model_of(cfg: Config) -> transformer.Transformer:
  """The attention-only transformer with one next-token readout."""
  return transformer.Transformer(
    vocab_size=cfg.vocab,
    heads=(("token", cfg.vocab),),
    d_model=cfg.d_model,
    num_layers=cfg.num_layers,
    num_heads=cfg.num_heads,
    max_len=cfg.length,
    attn_only=True,
  )


def group_ids(cfg: Config, repeat_B: np.ndarray) -> np.ndarray:
  """The group of every (sequence, position) token, ``(B, length − 1)``: ``repeat·(length − 1) +
  t``."""
  t = np.arange(cfg.length - 1)
  return np.asarray(repeat_B)[:, None] * (cfg.length - 1) + t[None]


def base_distribution(cfg: Config) -> np.ndarray:
  """Each group's share of the training tokens."""
  kind = np.repeat([1 - cfg.repeat_fraction, cfg.repeat_fraction], cfg.length - 1)
  return kind / (cfg.length - 1)


def fixed_tokens(cfg: Config, stream: str, num: int) -> dict[str, jax.Array]:
  """``num`` repeated and ``num`` random sequences, ``{"repeated": tokens, "random": tokens}``, from
  the streams ``"<stream>-repeated"`` and ``"<stream>-random"``."""
  return {
    kind: repeats.fixed(
      rng.key(cfg.run.seed, f"{stream}-{kind}"), num, cfg.length, cfg.vocab, kind == "repeated"
    )["tokens"]
    for kind in ("repeated", "random")
  }


def make_problem(cfg: Config, net: transformer.Transformer, token_weights) -> loop.Problem:
  """Online training; each token's loss is multiplied by ``token_weights[group]``, its group's
  weight over its base weight (all ones: the unweighted task)."""
  w = jnp.asarray(token_weights, jnp.float32).reshape(2, cfg.length - 1)
  ind = jnp.asarray(repeats.induction_mask(cfg.length))
  evals = fixed_tokens(cfg, "eval", cfg.eval_sequences)

  def loss(params, key):
    batch = repeats.sample(key, cfg.batch_size, cfg.length, cfg.vocab, cfg.repeat_fraction)
    per_token = transformer.next_token_losses(net, params, batch["tokens"])
    return jnp.mean(w[batch["repeat"]] * per_token), {}

  def evaluate(params, key):
    del key
    at_ind = {k: transformer.next_token_losses(net, params, t)[:, ind] for k, t in evals.items()}
    patterns = transformer.attention_patterns(net, params, evals["repeated"])
    return {
      "repeat_loss": jnp.mean(at_ind["repeated"]),
      "random_loss": jnp.mean(at_ind["random"]),
      "prefix_matching": jnp.max(repeats.prefix_matching_score(patterns[-1])),
    }

  init = lambda key: net.init(key, jnp.zeros((1, cfg.length), jnp.int32))
  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def _train(cfg: Config, net, token_weights, run: str, ctx: frame.Context) -> loop.TrainResult:
  """Condition ``run``'s seeds; the unweighted run keeps every checkpoint (χ is measured at one of
  them), the others their last."""
  baseline = run == "unweighted"
  return ctx.train(
    run,
    make_problem(cfg, net, token_weights),
    optax.adam(cfg.learning_rate),
    checkpoint_every=cfg.run.checkpoint_every if baseline else cfg.run.steps,
    keep_checkpoints=None if baseline else 2,
    summarize=lambda row: (
      f"repeat loss {np.round(row['repeat_loss'], 2).tolist()} | prefix matching "
      f"{np.round(row['prefix_matching'], 2).tolist()}"
    ),
  )


def susceptibilities(cfg: Config, net: transformer.Transformer, w_star) -> dict[str, np.ndarray]:
  """χ (heads × probe tokens), its standard error over chains, the heads' LLCs, and the probe
  tokens' groups (the repeated probe sequences come first)."""
  data = repeats.sample(
    rng.key(cfg.run.seed, "posterior-data"), cfg.n, cfg.length, cfg.vocab, cfg.repeat_fraction
  )
  half = cfg.probe_sequences // 2
  res = sus.estimate_susceptibilities(
    # Jitted: the losses at w* outside the sampler's program are then one program each.
    jax.jit(functools.partial(transformer.next_token_losses, net)),
    w_star,
    data["tokens"],
    jnp.concatenate(list(fixed_tokens(cfg, "probe", half).values())),
    key=rng.key(cfg.run.seed, "susceptibility"),
    components=transformer.head_masks(w_star, cfg.num_layers, cfg.num_heads),
    settings=cfg.sgld,
    eval_size=cfg.eval_size,
  )
  return {
    "chi": res.chi[:, 0],
    "standard_error": res.standard_error[:, 0],
    "llc": res.llc,
    "groups": group_ids(cfg, np.repeat([1, 0], half)).reshape(-1),
    "heads": np.array(res.components),
  }


def induction_direction(cfg: Config, chi: np.ndarray, groups: np.ndarray) -> dict:
  """The principal direction of ``χ`` most correlated with the induction positions, as a group
  change (its loadings averaged per group, centred, signed to favour the induction positions)."""
  pcs = sus.principal_directions(chi)
  induction = np.isin(groups, cfg.induction_groups).astype(float)
  corr = np.array([np.corrcoef(v, induction)[0, 1] for v in pcs["Vt"]])
  k = int(np.nanargmax(np.abs(corr[: cfg.top_components])))
  loading = patterning.group_response(pcs["Vt"][k], groups, cfg.num_groups)[0]
  direction = loading - loading.mean()
  if direction[cfg.induction_groups].mean() < direction.mean():
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


def formation_shift(steps: list, baseline: list) -> dict:
  """A condition's formation steps minus the unweighted run's, seed by seed (the seeds where both
  formed), and how many moved earlier or later."""
  d = np.array([a - b for a, b in zip(steps, baseline) if a is not None and b is not None])
  return {
    "per_seed": d,
    "mean": d.mean() if d.size else None,
    "sd": d.std(ddof=1) if d.size > 1 else None,
    "seeds_compared": d.size,
    "earlier_in": np.sum(d < 0),
    "later_in": np.sum(d > 0),
  }


@frame.study
def run(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains unweighted, estimates χ at ``chi_step`` (cached in ``susceptibility.npz``), re-weights
  along the induction direction and at random, retrains, and compares formation steps seed by
  seed."""
  net = model_of(cfg)
  unweighted = _train(cfg, net, np.ones(cfg.num_groups), "unweighted", ctx)
  chi = ctx.stage(
    "susceptibility",
    lambda: susceptibilities(cfg, net, unweighted.params_of(0, cfg.chi_step)),
    fmt="npz",
  )
  direction = induction_direction(cfg, chi["chi"], chi["groups"])
  dists = reweightings(cfg, direction["direction"])
  base = dists["unweighted"]
  others = [c for c in cfg.conditions if c != "unweighted"]
  histories = {"unweighted": unweighted.history}
  for c in others:
    histories[c] = _train(cfg, net, dists[c] / base, c, ctx).history
  threshold = cfg.formation_fraction * np.log(cfg.vocab)
  formation = {}
  for c in cfg.conditions:
    steps = np.array([h["step"] for h in histories[c]], float)
    loss = np.array([h["repeat_loss"] for h in histories[c]], float)
    formation[c] = [formation_step(steps, loss[:, s], threshold) for s in range(cfg.run.num_seeds)]
  summary = {
    "nbeta": cfg.nbeta,
    "chi_step": cfg.chi_step,
    "formation_threshold": threshold,
    "head_llc": dict(zip(chi["heads"], chi["llc"])),
    "induction_component": direction["component"],
    "component_correlations": direction["correlations"],
    "explained_variance": direction["explained_variance"],
    "head_loadings": dict(zip(chi["heads"], direction["head_loadings"])),
    "group_distributions": {c: dists[c] for c in cfg.conditions},
    "total_variation": {c: 0.5 * np.abs(dists[c] - base).sum() for c in cfg.conditions},
    "induction_weight": {c: dists[c][cfg.induction_groups].sum() for c in cfg.conditions},
    "formation_step": formation,
    "formation_shift_vs_unweighted": {
      c: formation_shift(formation[c], formation["unweighted"]) for c in others
    },
    "final": {
      c: {k: histories[c][-1][k] for k in ("repeat_loss", "random_loss", "prefix_matching")}
      for c in cfg.conditions
    },
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      plot_susceptibility(
        cfg, chi, direction, dists, os.path.join(folder, "induction_susceptibility.png")
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


def plot_susceptibility(cfg: Config, chi: dict, direction: dict, dists: dict, path: str) -> str:
  """χ averaged per group (heads × positions, for repeated and random sequences), and the
  re-weightings."""
  plt = plotting.plt
  per_group = patterning.group_response(chi["chi"], chi["groups"], cfg.num_groups)
  heads = list(chi["heads"])
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
  return plotting.save(fig, path)


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
  return plotting.save(fig, path)
