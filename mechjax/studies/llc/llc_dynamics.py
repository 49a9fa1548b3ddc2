"""The LLC over training: a deep linear network learns a low-rank teacher mode by mode, and the
local learning coefficient (Lau et al. 2023, arXiv:2308.12108) is estimated at every checkpoint.

The data are ``x ~ N(0, I)`` and ``y = x·M (+ noise)`` with a teacher ``M = V diag(s) Uᵀ`` of rank
``R = len(s)``, fixed by ``--seed``. The student is ``f(x) = x W_1 ⋯ W_L`` with layer widths
``(H_0, …, H_L)``, trained by SGD on minibatches of a fixed dataset of ``n`` samples from a small
initialisation. It learns the teacher's modes one at a time, strongest first (saddle-to-saddle
dynamics), so the loss falls in steps and the number of learned modes ``r`` rises ``0 → R``.

At every checkpoint the LLC is estimated with ``num_chains`` vmapped SGLD chains, for every seed,
``checkpoints_per_call`` checkpoints at a time in one compiled program per localization
(:func:`mechjax.slt.llc.estimate_llc_batch`). Two reference values are drawn with it:

* the converged network sits at a true parameter of a rank-``R`` deep linear network, whose learning
  coefficient is known in closed form (Aoyagi 2024;
  :func:`mechjax.slt.closed_forms.deep_linear_network`). The last checkpoint's estimate is compared
  with it, as in :mod:`theory.llc_closed_forms`.
* a plateau with ``r < R`` learned modes is *not* a minimum: it is a degenerate saddle whose escape
  directions are cubic (for three layers) in the unused hidden units. A chain started there drifts
  downhill at a rate set by ``nβ`` against the localization ``γ``, and its estimate is then negative
  or unstable. The closed-form ``λ(r)`` of a rank-``r`` network is drawn for these plateaus as the
  value a local minimum with that rank would have; whether an estimate approaches it depends on
  ``γ``, which is why the study runs more than one ``γ``.

Outputs in the workdir: ``metrics.jsonl`` (training), ``llc.jsonl`` (one line per checkpoint,
holding a row per seed and ``γ``; an interrupted run resumes after the last complete checkpoint),
``summary.json`` and ``figures/llc_dynamics.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.config import ConfigError
from mechjax.models import deep_linear as dln
from mechjax.slt import closed_forms as cf
from mechjax.slt import llc as llc_lib
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from mechjax.studies import frame
from mechjax.train import loop

NAME = "llc_dynamics"
RUN = "dln"
DIAGNOSTICS = ("fraction_below_init_loss", "mala_acceptance", "distance_mean", "rhat", "ess_bulk")
MIXING = (("rhat", np.nanmax), ("ess_bulk", np.nanmin))  # summary: worst over checkpoints × seeds
_WIDTHS_ERROR = "must be at least three positive integers (input, hidden..., output), e.g. 5,5,5,5"


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=4000, num_seeds=2, log_every=50, checkpoint_every=100)
  )
  widths: tuple[int, ...] = config.setting(
    (5, 5, 5, 5),
    "Layer widths H_0,...,H_L of the deep linear network (input first).",
    check=lambda w: None if len(w) >= 3 and min(w) >= 1 else _WIDTHS_ERROR,
  )
  singular_values: tuple[float, ...] = config.setting(
    (3.0, 2.0, 1.0),
    "The teacher's singular values; their number is its rank.",
    check=config.all_of(config.non_empty, config.each(config.positive)),
  )
  noise: float = config.setting(
    0.0,
    "Standard deviation of Gaussian label noise (0: the teacher is a true parameter).",
    check=config.non_negative,
  )
  n: int = config.setting(
    10_000,
    "Training samples; the LLC is estimated on the same set with nβ = n / ln n.",
    check=config.at_least(2),
  )
  init_scale: float = config.setting(
    0.01,
    "Standard deviation of the initial weights (small: modes are learned in stages).",
    check=config.positive,
  )
  batch_size: int = config.setting(64, "Training minibatch size.", check=config.at_least(1))
  learning_rate: float = config.setting(0.05, "SGD step size.", check=config.positive)
  sgld: SGLDSettings = config.group(
    SGLDSettings(
      step_size=1e-5,
      localization=100.0,
      batch_size=256,
      num_chains=4,
      num_draws=2000,
      num_burnin=200,
    ),
    help="The LLC estimates (the localization is set per estimate from --localization).",
    flags={
      "num_chains": "llc_chains",
      "num_draws": "llc_draws",
      "num_burnin": "llc_burnin",
      "step_size": "llc_step_size",
      "batch_size": "llc_batch_size",
      "nbeta": "nbeta",
    },
  )
  checkpoints_per_call: int = config.setting(
    10,
    "Checkpoints whose LLCs (every seed's) are sampled together in one program "
    "(estimate_llc_batch); llc.jsonl is appended after each such group.",
    check=config.at_least(1),
  )
  localizations: tuple[float, ...] = config.setting(
    (100.0, 1000.0),
    "Localization strengths γ; the LLC is estimated for each.",
    flag="localization",
    check=config.all_of(config.non_empty, config.each(config.non_negative), config.distinct),
  )

  def validate(self):
    if len(self.singular_values) > min(self.widths):
      raise ConfigError(
        ("singular_values", "widths"),
        "the teacher's rank (the number of singular_values) must not "
        f"exceed the narrowest of widths ({min(self.widths)})",
      )
    self.check_at_most(("batch_size", "sgld.batch_size"), "n")

  @property
  def rank(self) -> int:
    return len(self.singular_values)

  @property
  def nbeta_value(self) -> float:
    return default_nbeta(self.n) if self.sgld.nbeta is None else float(self.sgld.nbeta)


def make_data(cfg: Config) -> dict:
  """The fixed training set ``{"x": (n, H_0), "y": (n, H_L)}`` with ``y = x·M (+ noise)``
  (:func:`mechjax.models.deep_linear.teacher_data`: the data from the stream ``"data"``, the teacher
  ``M`` from the stream ``"teacher"``); the LLC is estimated on the same set."""
  keys = rng.key(cfg.run.seed, "data"), rng.key(cfg.run.seed, "teacher")
  return dln.teacher_data(*keys, cfg.n, cfg.widths, cfg.singular_values, cfg.noise)


def make_problem(cfg: Config, data: dict) -> loop.Problem:
  def loss(params, key):
    idx = jax.random.randint(key, (cfg.batch_size,), 0, cfg.n)
    return dln.half_mse(params, jax.tree.map(lambda a: a[idx], data)), {}

  def evaluate(params, key):
    del key
    modes = dln.learned_modes(dln.product(params), cfg.singular_values)
    return {"full_loss": dln.half_mse(params, data), "learned_modes": modes}

  init = lambda key: dln.init(key, cfg.widths, cfg.init_scale)
  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def closed_form_llcs(cfg: Config) -> list[float]:
  """``λ(r)`` of a deep linear network with these widths and true rank ``r``, for ``r = 0 … R``."""
  return [float(cf.deep_linear_network(cfg.widths, r)[0]) for r in range(cfg.rank + 1)]


def estimate_checkpoints(
  cfg: Config, ctx: frame.Context, data: dict, trained: loop.TrainResult
) -> list[dict]:
  """The LLC at every saved checkpoint, for every seed and localization: the incremental stage
  ``llc.jsonl`` (:meth:`~mechjax.studies.frame.Context.rows`, one line per checkpoint), so an
  interrupted analysis keeps its finished checkpoints.

  The checkpoints are taken ``checkpoints_per_call`` at a time: their points (checkpoints × seeds)
  are sampled in one program per localization (:func:`mechjax.slt.llc.estimate_llc_batch`; a short
  last group is padded with copies of its last checkpoint, so every group runs the same program).
  Every estimate uses the same key per seed, so neighbouring checkpoints share their random numbers
  and their difference is less noisy.
  """
  params_by_step = trained.params_at()
  steps = sorted(params_by_step)
  seeds = range(cfg.run.num_seeds)
  seed_keys = jnp.stack([rng.key(cfg.run.seed, "llc", seed) for seed in seeds])
  size = min(cfg.checkpoints_per_call, len(steps))

  def compute(group: list[int]) -> dict[int, list[dict]]:
    padded = group + [group[-1]] * (size - len(group))
    # Points are (checkpoint, seed), checkpoint-major; params_by_step[step] has the seed axis first.
    stack = jax.tree.map(lambda *a: jnp.concatenate(a), *[params_by_step[s] for s in padded])
    keys = jnp.concatenate([seed_keys] * len(padded))
    loss_at = jax.vmap(dln.half_mse, in_axes=(0, None))(stack, data)
    modes = jax.vmap(lambda p: dln.learned_modes(dln.product(p), cfg.singular_values))(stack)
    estimate = functools.partial(llc_lib.estimate_llc_batch, dln.half_mse, stack, data, key=keys)
    by_gamma = {g: estimate(settings=cfg.sgld, localization=g) for g in cfg.localizations}
    new = {step: [] for step in group}
    for b, (step, seed) in enumerate(itertools.product(group, seeds)):  # the points' order
      point = {"loss": loss_at[b], "learned_modes": modes[b]}
      for gamma, res in by_gamma.items():
        llc = {k: getattr(res, k)[b] for k in ("llc_mean", "llc_std", "llc_per_chain")}
        diagnostics = {k: res.diagnostics[k][b] for k in DIAGNOSTICS}
        where = {"step": step, "seed": seed, "localization": gamma}
        new[step].append({**where, **llc, **point, **diagnostics})
    seed0 = new[group[-1]][: len(cfg.localizations)]  # seed 0's rows come first
    text = ", ".join(f"γ={r['localization']:g}: {r['llc_mean']:.2f}" for r in seed0)
    ctx.log(
      f"[llc] checkpoints {group[0]}-{group[-1]} × {len(seeds)} seeds; at {group[-1]}: {text}"
    )
    return new

  by_step = ctx.rows("llc", steps, compute, chunk=size)
  return [r for step in steps for r in by_step[step]]  # by step, then seed, then γ


def summarize(cfg: Config, history: list[dict], rows: list[dict]) -> dict:
  lams = closed_form_llcs(cfg)
  last = max(r["step"] for r in rows)
  out = {
    "closed_form_llc_by_rank": lams,
    "nbeta": cfg.nbeta_value,
    "final_step": last,
    "first_step_all_modes_learned": next(
      (h["step"] for h in history if np.min(h["learned_modes"]) >= cfg.rank), None
    ),
    "final_loss": np.mean(history[-1]["full_loss"]),
    "localizations": {},
  }
  for gamma in cfg.localizations:
    g = [r for r in rows if r["localization"] == gamma]
    final = np.array([r["llc_mean"] for r in g if r["step"] == last])
    by_rank = {}
    for rank in range(cfg.rank + 1):
      vals = np.array([r["llc_mean"] for r in g if r["learned_modes"] == rank])
      if vals.size:
        by_rank[rank] = {
          "checkpoints_x_seeds": vals.size,
          "median_llc": np.median(vals),
          "negative_fraction": np.mean(vals < 0),
          "closed_form": lams[rank],
        }
    out["localizations"][f"{gamma:g}"] = {
      "final_llc_mean": final.mean(),
      "final_llc_sd_over_seeds": final.std(),
      "final_relative_error": final.mean() / lams[cfg.rank] - 1,
      "by_learned_modes": by_rank,
      "final_mala_acceptance": np.mean([r["mala_acceptance"] for r in g if r["step"] == last]),
      **{f"{k}_{m.__name__[3:]}": m([r.get(k, np.nan) for r in g]) for k, m in MIXING},
    }
  return out


def plot(cfg: Config, history: list[dict], rows: list[dict], path: str) -> str:
  """Loss (log scale) and learned modes over training; the LLC per checkpoint with the closed-form
  ``λ(r)``."""
  lams = closed_form_llcs(cfg)
  fig, (ax_loss, ax_llc) = plotting.plt.subplots(1, 2, figsize=(13, 4.2))
  steps = np.array([h["step"] for h in history])
  loss = np.array([h["full_loss"] for h in history], float)
  modes = np.array([h["learned_modes"] for h in history], float)
  loss_lines = ax_loss.semilogy(steps, loss, color="C0", lw=1.4, alpha=0.8)  # one line per seed
  ax_loss.set_ylim(bottom=max(1e-6, 0.3 * np.nanmin(loss)))
  ax_modes = ax_loss.twinx()
  modes_lines = ax_modes.step(steps, modes, where="post", color="C3", lw=1.0, alpha=0.7)
  ax_modes.set(ylabel="learned teacher modes r", ylim=(-0.2, cfg.rank + 0.5))
  ax_modes.set_yticks(range(cfg.rank + 1))
  title = f"deep linear network {'-'.join(map(str, cfg.widths))}, teacher rank {cfg.rank}"
  plotting.label_panel(ax_loss, title, "½·mean ‖y − f(x)‖²", "training step", legend=None)
  labels = ["full-data loss", "learned modes r"]
  ax_loss.legend([loss_lines[0], modes_lines[0]], labels, fontsize=8, loc="upper right")

  floor = -0.25 * lams[-1]
  for j, gamma in enumerate(cfg.localizations):
    for seed in range(cfg.run.num_seeds):
      g = [r for r in rows if r["localization"] == gamma and r["seed"] == seed]  # by step
      xs = np.array([r["step"] for r in g])
      mean, sd = np.array([r["llc_mean"] for r in g]), np.array([r["llc_std"] for r in g])
      style = dict(ls=["-", "--", ":", "-."][seed % 4], ms=3, lw=1.1, capsize=2, color=f"C{j}")
      low = f"γ = {gamma:g}: below {floor:.1f} (chains leave a saddle)" if seed == 0 else None
      label = f"γ = {gamma:g}, seed {seed}"
      plotting.errorbar_floored(ax_llc, xs, mean, sd, floor, label=label, floor_label=low, **style)
  for r, lam in enumerate(lams):
    ax_llc.axhline(lam, color="gray", ls=":", lw=1)
    ax_llc.text(steps[0], lam, f"λ(r={r}) = {lam:g}", va="bottom", fontsize=7, color="gray")
  ax_llc.axhline(0, color="black", lw=0.6, alpha=0.4)
  ax_llc.set_ylim(floor * 1.15, lams[-1] * 1.3)
  title = (
    f"SGLD: {cfg.sgld.num_chains} chains × {cfg.sgld.num_draws} draws, nβ = {cfg.nbeta_value:.0f}, "
    f"ε = {cfg.sgld.step_size:g}"
  )
  ylabel = "LLC estimate (bar: sd over chains)"
  plotting.label_panel(ax_llc, title, ylabel, "training step", legend=None)
  ax_llc.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  return plotting.save(fig, path)


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains and estimates the LLC at every checkpoint (each resuming); the summary and figure."""
  data = make_data(cfg)
  result = ctx.train(
    RUN,
    make_problem(cfg, data),
    optax.sgd(cfg.learning_rate),
    keep_checkpoints=None,
    summarize=lambda row: (
      f"loss {np.mean(row['full_loss']):.4f} | learned modes {row['learned_modes']}"
    ),
  )
  rows = estimate_checkpoints(cfg, ctx, data, result)
  summary = summarize(cfg, result.history, rows)
  return frame.Outputs(
    summary,
    figures=lambda f: [plot(cfg, result.history, rows, os.path.join(f, "llc_dynamics.png"))],
    captions={
      "llc_dynamics.png": "Left: the full-data loss (log scale) and the number of teacher modes "
      "learned, one line per seed. Right: the LLC estimate at each checkpoint, one line per seed "
      "and localization γ, bars ±1 sd over chains; dotted lines are the closed-form λ(r) of a "
      "network that has learned r modes, and triangles mark estimates below the axis."
    },
  )


def report(summary: dict) -> list[str]:
  """The closed-form λ(r) and, per localization, the final LLC and the medians by learned modes."""
  lams = summary["closed_form_llc_by_rank"]
  lines = [
    f"  closed-form λ(r) for r = 0..{len(lams) - 1} learned modes: "
    f"{', '.join(f'{x:g}' for x in lams)}"
  ]
  for gamma, g in summary["localizations"].items():
    lines.append(
      f"  γ = {gamma}: final LLC {g['final_llc_mean']:.2f} ± {g['final_llc_sd_over_seeds']:.2f} "
      f"(sd over seeds; chains: R̂ ≤ {g['rhat_max']:.3f}, bulk ESS ≥ {g['ess_bulk_min']:.0f}) "
      f"vs λ({len(lams) - 1}) = {lams[-1]:g} ({100 * g['final_relative_error']:+.1f}%); "
      + "; ".join(
        f"r={r}: median {v['median_llc']:.2f}, {100 * v['negative_fraction']:.0f}% negative"
        for r, v in g["by_learned_modes"].items()
      )
    )
  return lines


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
