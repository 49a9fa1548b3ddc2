"""Patterning induction heads: per-token susceptibilities of an attention-only transformer's heads,
their principal directions, and retraining on data re-weighted along the direction tied to induction
(Wang & Murfet 2026, arXiv:2601.13548; per-token susceptibilities as in Baker et al. 2025,
arXiv:2504.18274).

The data, its induction positions and its token groups (repeated or not × position):
:mod:`mechjax.data.repeats`. The **repeat loss** is the next-token loss at the induction positions
of repeated sequences; the **prefix-matching score** is the best last-layer head's. A run's
**formation step** is the first step (interpolated between logged steps) at which its repeat loss
falls below ``formation_fraction · ln(vocab)``, a fraction fixed in advance, not fitted.

1. ``num_seeds`` seeds train online, unweighted (a fresh batch from each step's key).
2. At unweighted seed 0's checkpoint ``chi_step``, every attention head is a component (a 0/1 mask
   over its weights) of :func:`mechjax.slt.susceptibility.estimate_susceptibilities`, on the
   localized, tempered posterior of ``n`` fixed sequences; the probes are the per-token losses of
   ``probe_sequences`` sequences, half of them repeated. ``χ`` is heads × tokens.
3. The **induction direction** is the one of ``χ``'s ``top_components`` leading principal
   directions whose token loadings correlate most with the induction positions: patterning's
   minimum-norm answer for moving the components along the matching ``u`` (``χ⁺u_k = v_k/s_k``).
   Its loadings, averaged per group, centred and signed to favour the induction positions, are the
   group change.
4. *promote* and *suppress* move the group distribution by ± ``strength`` times the largest step
   that keeps it non-negative; the control *random* moves the same total variation along a random
   direction. Each token's loss is weighted by its group's new weight over its base weight.
5. ``num_seeds`` seeds retrain per condition with the unweighted run's seed keys, and the formation
   steps are compared seed by seed.

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
from mechjax.data import repeats
from mechjax.models import transformer
from mechjax.slt import mixing
from mechjax.slt import patterning
from mechjax.slt import susceptibility as sus
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from mechjax.studies import frame
from mechjax.studies import sampler_flags
from mechjax.train import loop
from mechjax.train import metrics

NAME = "patterning_induction"
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
  sgld: SGLDSettings = sampler_flags.study_group(
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
    self.check_at_most(("sgld.batch_size",), "n")

  @property
  def nbeta(self) -> float:
    return default_nbeta(self.n)

  @property
  def num_groups(self) -> int:
    return 2 * (self.length - 1)


def model_of(cfg: Config) -> transformer.Transformer:
  return transformer.attention_only(
    cfg.vocab, cfg.length, cfg.d_model, cfg.num_layers, cfg.num_heads
  )


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
    "rhat": res.chi_rhat[:, 0],
    "ess": res.chi_ess[:, 0],
    "llc": res.llc,
    "groups": repeats.token_groups(np.repeat([1, 0], half), cfg.length).reshape(-1),
    "heads": np.array(res.components),
  }


def reweightings(cfg: Config, direction: np.ndarray) -> dict[str, np.ndarray]:
  """Group distributions for promote and suppress, ``base ± s·direction`` with ``s`` = strength ×
  the largest step that keeps both non-negative, and the control ``random``: a random centred
  change (the stream ``"random-control"``) of the same total variation."""
  base = repeats.group_shares(cfg.length, cfg.repeat_fraction)
  limit = min(patterning.step_limit(base, direction), patterning.step_limit(base, -direction))
  step = cfg.strength * limit * direction
  generator = rng.numpy(cfg.run.seed, "random-control")
  r = patterning.random_change(base, np.abs(step).sum(), generator, cfg.strength)
  return {"unweighted": base, "promote": base + step, "suppress": base - step, "random": base + r}


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
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
  ind_groups = repeats.induction_groups(cfg.length)
  direction = patterning.principal_group_change(
    chi["chi"], chi["groups"], ind_groups, cfg.num_groups, cfg.top_components
  )
  dists = reweightings(cfg, direction["direction"])
  base = dists["unweighted"]
  others = [c for c in cfg.conditions if c != "unweighted"]
  histories = {"unweighted": unweighted.history}
  for c in others:
    histories[c] = _train(cfg, net, dists[c] / base, c, ctx).history
  threshold = cfg.formation_fraction * np.log(cfg.vocab)
  formation = {
    c: metrics.crossing_steps(histories[c], "repeat_loss", threshold) for c in cfg.conditions
  }
  summary = {
    "nbeta": cfg.nbeta,
    "chi_step": cfg.chi_step,
    "formation_threshold": threshold,
    "head_llc": dict(zip(chi["heads"], chi["llc"])),
    "chi_mixing": mixing.worst(chi["rhat"], chi["ess"], cfg.sgld.num_chains),
    "induction_component": direction["component"],
    "component_correlations": direction["correlations"],
    "explained_variance": direction["explained_variance"],
    "head_loadings": dict(zip(chi["heads"], direction["component_loadings"])),
    "group_distributions": {c: dists[c] for c in cfg.conditions},
    "total_variation": {c: 0.5 * np.abs(dists[c] - base).sum() for c in cfg.conditions},
    "induction_weight": {c: dists[c][ind_groups].sum() for c in cfg.conditions},
    "formation_step": formation,
    "formation_shift_vs_unweighted": {
      c: metrics.paired_shift(formation[c], formation["unweighted"]) for c in others
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
  s, m = summary, summary["chi_mixing"]
  k = s["induction_component"]
  lines = [
    f"  induction direction: PC{k + 1} ({100 * s['explained_variance'][k]:.0f}% of variance), "
    f"correlation {s['component_correlations'][k]:+.2f} with the induction positions; weight on "
    "them " + ", ".join(f"{c} {w:.3f}" for c, w in s["induction_weight"].items()),
    f"  per-token χ: R̂ ≤ {m['rhat_max']:.3f}, {m['share_failing']:.0%} of entries fail",
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
  per_group = patterning.group_response(chi["chi"], chi["groups"], cfg.num_groups)
  t, k, vmax = cfg.length - 1, direction["component"], np.nanmax(np.abs(per_group))
  fig, axes = plotting.plt.subplots(1, 3, figsize=(17, 4.2), width_ratios=[1, 1, 1.1])
  for ax, kind, title in ((axes[0], 1, "repeated sequences"), (axes[1], 0, "random sequences")):
    im = ax.imshow(per_group[:, kind * t : (kind + 1) * t], "RdBu_r", vmin=-vmax, vmax=vmax)
    ax.set(aspect="auto", yticks=range(len(chi["heads"])), yticklabels=list(chi["heads"]))
    title = f"χ per head and position, {title}\n(checkpoint {cfg.chi_step}, mean over probes)"
    plotting.label_panel(ax, title, "", "position t (predicting token t + 1)", grid="", legend=None)
  fig.colorbar(im, ax=axes[1], fraction=0.046)
  base = dists["unweighted"]
  for c, color in (("promote", "C2"), ("suppress", "C3")):
    axes[2].plot(dists[c][t:] / base[t:], color=color, label=f"{c}: repeated")
    axes[2].plot(dists[c][:t] / base[:t], color=color, ls="--", label=f"{c}: random")
  axes[2].axhline(1, color="gray", lw=0.8)
  for ax in axes:
    ax.axvline(cfg.length // 2 - 0.5, color="black", lw=0.8, ls=":")
  title = (
    f"token weights along PC{k + 1} ({100 * direction['explained_variance'][k]:.0f}% of variance, "
    f"corr. {direction['correlations'][k]:+.2f} with induction positions)"
  )
  plotting.label_panel(axes[2], title, "weight / base weight", "position t")
  return plotting.save(fig, path)


def plot_formation(
  cfg: Config, histories: dict, threshold: float, formation: dict, path: str
) -> str:
  fig, axes = plotting.plt.subplots(1, 2, figsize=(12, 4.2))
  colors = {"unweighted": "gray", "promote": "C2", "suppress": "C3", "random": "C0"}
  for c in cfg.conditions:
    steps = [h["step"] for h in histories[c]]
    for ax, key in zip(axes, ("repeat_loss", "prefix_matching")):
      y = np.array([h[key] for h in histories[c]], float)
      ax.plot(steps, y, color=colors[c], lw=0.8, alpha=0.6)
      ax.plot(steps, y.mean(1), color=colors[c], lw=2, label=c)
    for f in [f for f in formation[c] if f is not None]:
      axes[0].axvline(f, color=colors[c], lw=0.5, ls=":")
  label = f"formation threshold {threshold:.2f}"
  axes[0].axhline(threshold, color="black", lw=0.8, ls="--", label=label)
  title = f"{cfg.run.num_seeds} seeds per condition (thin: each seed; dotted: formation steps)"
  ylabel = "loss at induction positions of repeated sequences"
  plotting.label_panel(axes[0], title, ylabel, "training step", legend=8)
  ylabel = "prefix-matching score (best layer-2 head)"
  plotting.label_panel(axes[1], "", ylabel, "training step", legend=8)
  return plotting.save(fig, path)


STUDY = frame.Study(
  NAME,
  Config,
  science,
  report,
  cpu_cores_as_devices=True,  # the SGLD chains run over every core
)
run = STUDY.run
