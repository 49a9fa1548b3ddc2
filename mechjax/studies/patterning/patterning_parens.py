"""Patterning on parenthesis balancing by the LLC: which of two algorithms a transformer learns, and
whether a data re-weighting computed from susceptibilities (Wang & Murfet 2026, arXiv:2601.13548)
changes it. The task, the counts rate and how a seed's algorithm is counted:
:mod:`mechjax.studies.patterning.patterning_parens_base`.

Among solutions of equal loss the tempered posterior favours the one with the lower local learning
coefficient, ``log p_A/p_B ≈ −(λ_A − λ_B)·log n`` (Watanabe's free energy), and this is the lever
that patterning pulls: re-weight the data so that the LLC of the wanted solution falls relative to
the other's. The stages, each resuming from what the workdir holds:

1. **Base-rate sweep**: ``num_seeds`` unweighted seeds at each share of negatives that carry the
   prefix cue (``base_rate_fractions``; with uniform negatives 81% do, and every seed learns prefix,
   a base rate that 8 seeds cannot see move). The study continues at ``neg_prefix_fraction``, by
   default the swept share whose counts share is nearest one half.
2. **Reference solutions** (:func:`solved_share`), one forced to each algorithm, at the first share
   of that ranking where both reach ``perfect_accuracy`` on the training set.
3. **The LLC analysis** (:mod:`mechjax.studies.patterning.patterning_parens_llc`): the re-weightings
   that move the target's LLC relative to the other's by ``llc_margin`` inside the linear regime,
   and the LLCs re-measured under them (predicted against measured Δλ), before any retraining.
4. **Retraining** under four conditions (unweighted, toward counts, toward prefix, and a random
   re-weighting of the same total variation) with paired seeds; Fisher's exact test on the
   selection counts, Wilcoxon's signed-rank test on the counts rates.

The earlier design, a probe loss targeted at one posterior, is
:mod:`mechjax.studies.patterning.patterning_parens_probe`. Outputs: ``metrics.jsonl``,
``patterning.json`` (the analysis), ``summary.json`` and ``figures/patterning_parens.png``.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from mechjax import config
from mechjax import plotting
from mechjax.config import ConfigError
from mechjax.data import parens
from mechjax.slt import mixing
from mechjax.slt import patterning
from mechjax.studies import frame
from mechjax.studies.frame import StudyStopped
from mechjax.studies.patterning import patterning_parens_base
from mechjax.studies.patterning import patterning_parens_llc

NAME = "patterning_parens"


@dataclasses.dataclass(frozen=True)
class Config(patterning_parens_base.ParensSettings):
  """The settings of :class:`~mechjax.studies.patterning.patterning_parens_base.ParensSettings`
  and these."""

  neg_prefix_fraction: float | None = config.setting(
    None,
    "Share of the negative (unequal-count) training strings that have a negative prefix, the "
    "cue the prefix algorithm reads; unset (-1): the share of --base_rate_fractions whose "
    "unweighted counts share is nearest 1/2.",
    check=config.within(0, 1, low_open=False, high_open=False),
    unset=-1.0,
  )
  base_rate_fractions: tuple[float, ...] = config.setting(
    (0.0, 0.05, 0.1, 0.2),
    "Shares of negatives with the prefix cue at which --num_seeds unweighted seeds are trained "
    "and counted (empty: no sweep, then --neg_prefix_fraction must be set).",
    check=config.all_of(
      config.each(config.within(0, 1, low_open=False, high_open=False)), config.distinct
    ),
  )
  reference_max_steps: int | None = config.setting(
    None,
    "A forced reference below --perfect_accuracy on the training set after --reference_steps "
    "trains on to this many steps before its share is passed over for the next; unset (0): 4 × "
    "the reference steps.",
    check=config.at_least(1),
    unset=0,
  )
  llc_margin: float = config.setting(
    20.0,
    "How far the re-weighting is to lower λ_target − λ_other, to first order.",
    check=config.positive,
  )

  total_variations: tuple[float, ...] = config.setting(
    (),
    "Re-examine the prediction instead of retraining: scale the re-weightings of the study's own "
    "SGLD settings to each of these total variations, and predict and re-measure both LLCs at "
    "--draws, --sgld_step_size and --localization (with --neg_prefix_fraction, no base-rate "
    "sweep); empty: the study as designed.",
    check=config.all_of(config.distinct, config.each(config.within(0, 1))),
  )

  def validate(self):
    if self.neg_prefix_fraction is None and not self.base_rate_fractions:
      raise ConfigError(
        ("neg_prefix_fraction", "base_rate_fractions"),
        "the study needs --base_rate_fractions to choose from, or --neg_prefix_fraction",
      )
    super().validate()


def base_rate_sweep(cfg: Config, model, ctx: frame.Context) -> tuple[list[dict], dict]:
  """``num_seeds`` unweighted seeds at every share of ``base_rate_fractions``; returns the sweep's
  rows and the runs' histories by fraction."""
  rows, histories = [], {}
  for f in cfg.base_rate_fractions:
    data = patterning_parens_base.make_data(cfg, f)
    result = patterning_parens_base.train_weighted(
      cfg, model, data, np.ones(cfg.n), f"base_rate_{f:g}", ctx
    )
    o = patterning_parens_base.seed_outcomes(cfg, result.history[-1])
    histories[f] = result.history
    row = {k: o[k] for k in ("selected", "counts_rate", "counts_rate_mean")}
    rows.append({"fraction": f, "counts_share": o["selected"]["counts"] / cfg.run.num_seeds, **row})
  return rows, histories


def ranked_fractions(cfg: Config, sweep: list[dict]) -> list[tuple[float, str, bool | None]]:
  """The shares the study may continue at, in the order it tries them: ``neg_prefix_fraction``
  alone if set, else every swept share by how near its counts share is to one half (ties in sweep
  order). Each as ``(share, how it was chosen, base rate in 25–75%)``, the last None for a given
  share that was not swept."""

  def in_range(row):
    return None if row is None else bool(0.25 <= row["counts_share"] <= 0.75)

  if cfg.neg_prefix_fraction is not None:
    row = next((r for r in sweep if r["fraction"] == cfg.neg_prefix_fraction), None)
    return [(cfg.neg_prefix_fraction, "given", in_range(row))]
  order = sorted(sweep, key=lambda r: abs(r["counts_share"] - 0.5))  # stable: sweep order on ties
  return [(r["fraction"], "sweep", in_range(r)) for r in order]


def solved_share(cfg: Config, model, sweep: list[dict], ctx: frame.Context):
  """The first share of :func:`ranked_fractions` whose forced references both train: one short of
  ``perfect_accuracy`` on the training set trains on to ``reference_max_steps``, and one still short
  passes the share over. Returns ``(share, chosen_by, in_range, data, refs, passed_over)``, the
  last listing the shares tried before it and why; stops the study with a one-line reason
  (:class:`~mechjax.studies.frame.StudyStopped`) only when no share qualifies."""
  first = cfg.reference_steps or cfg.run.steps
  max_steps = cfg.reference_max_steps or 4 * first
  passed_over = []
  for rank, (fraction, chosen_by, in_range) in enumerate(ranked_fractions(cfg, sweep)):
    data = patterning_parens_base.make_data(cfg, fraction)
    prefix = "" if rank == 0 else f"share_{fraction:g}_"
    try:
      refs = patterning_parens_base.reference_solutions(
        cfg, model, data, ctx, prefix=prefix, max_steps=max_steps
      )
    except patterning_parens_base.NotASolution as e:
      passed_over.append({"fraction": fraction, **e.details})
      ctx.log(f"passing over neg_prefix_fraction={fraction:g}: {e}")
      continue
    if passed_over:
      chosen_by += f", rank {rank + 1} (the references of the shares before it do not train)"
    return fraction, chosen_by, in_range, data, refs, passed_over
  raise StudyStopped(
    f"no share's forced references reach training accuracy perfect_accuracy="
    f"{cfg.perfect_accuracy:g} ({'; '.join(map(passed_over_text, passed_over))}), so no "
    "reference LLC means anything; raise --reference_max_steps, or try other "
    "--base_rate_fractions or another --seed"
  )


def passed_over_text(p: dict) -> str:
  """One share that :func:`solved_share` passed over, and why."""
  return (
    f"{p['fraction']:g}: the forced {p['algorithm']} reference reached training accuracy "
    f"{p['train_accuracy']:.3f} after {p['steps']} steps"
  )


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Runs every stage (each resumes from what the workdir holds) and writes summary.json and the
  figure."""
  model = patterning_parens_base.Model(cfg)
  if cfg.total_variations and cfg.neg_prefix_fraction is not None:
    sweep, sweep_histories = [], {}
  else:
    sweep, sweep_histories = base_rate_sweep(cfg, model, ctx)
  fraction, chosen_by, in_range, data, refs, passed_over = solved_share(cfg, model, sweep, ctx)
  if cfg.total_variations:
    return reexamination(cfg, model, data, refs, fraction, ctx)
  ctx.log(
    f"continuing at neg_prefix_fraction={fraction:g} ({chosen_by}; base rate in 25-75%: {in_range})"
  )
  if fraction not in sweep_histories:  # a given share that was not swept
    sweep_histories[fraction] = patterning_parens_base.train_weighted(
      cfg, model, data, np.ones(cfg.n), "unweighted", ctx
    ).history
  ids, names = parens.groups(data["train"]["tokens"])
  pat = ctx.stage(
    "patterning", lambda: patterning_parens_llc.analysis(cfg, model, data, refs, ids, names)
  )
  histories = {"unweighted": sweep_histories[fraction]}
  for name in patterning_parens_llc.REWEIGHTINGS:
    weights = patterning.sample_weights(pat["reweightings"][name]["group_distribution"], ids)
    histories[name] = patterning_parens_base.train_weighted(
      cfg, model, data, weights, name, ctx
    ).history
  outcomes = {c: patterning_parens_base.seed_outcomes(cfg, h[-1]) for c, h in histories.items()}
  summary = {
    "design": "llc",
    "nbeta": cfg.nbeta,
    "perfect_accuracy": cfg.perfect_accuracy,
    "base_rate_sweep": sweep,
    "neg_prefix_fraction": fraction,
    "neg_prefix_fraction_chosen_by": chosen_by,
    "base_rate_in_25_75": in_range,
    "shares_passed_over": passed_over,
    "reference_solutions": reference_summary(pat, refs),
    "chi_mixing": {a: chi_mixing(pat["responses"][a], cfg.sgld.num_chains) for a in refs},
    "llc_response_parts": {
      a: {
        f"{part}_norm": np.linalg.norm(pat["responses"][a][f"dllc_{part}"])
        for part in ("implicit", "explicit", "total")
      }
      for a in parens.ALGORITHMS
    },
    "llc_margin": cfg.llc_margin,
    "reweightings": {
      k: {"total_variation": r["total_variation"], "predicted": r["predicted"]}
      for k, r in pat["reweightings"].items()
    },
    "predicted_vs_measured": pat["comparison"],
    "conditions": outcomes,
    "fisher_p_vs_unweighted": {
      c: {
        a: patterning_parens_llc.fisher_p(outcomes[c], outcomes["unweighted"], a)
        for a in parens.ALGORITHMS
      }
      for c in patterning_parens_llc.REWEIGHTINGS
    },
    "wilcoxon_p_vs_unweighted": patterning_parens_base.wilcoxon_vs_unweighted(outcomes),
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      plot(sweep, pat, outcomes, os.path.join(folder, "patterning_parens.png"))
    ],
    captions={
      "patterning_parens.png": "1: the share of seeds that learn counts (line) and each seed's "
      "counts rate (dots) against the base rate. 2: each group's response of the LLC at the two "
      "reference solutions, bars ±2 s.e. 3: the predicted against the re-measured change of each "
      "LLC per re-weighting, bars ±2 s.e.; the dashed line is equality. 4: what the retrained "
      "seeds of each condition learned."
    },
  )


def reference_summary(pat: dict, refs: dict) -> dict:
  """Each forced reference solution's accuracies with its unweighted LLC from the analysis ``pat``
  (mean and spread over chains, R-hat) and the LLC of its susceptibility run."""
  per_chain = pat["measured_llc_per_chain"]
  return {
    a: {
      **r,
      "llc": np.mean(per_chain[a]["unweighted"]),
      "llc_sd_over_chains": np.std(per_chain[a]["unweighted"]),
      "llc_from_susceptibility_run": pat["responses"][a]["llc"],
      "llc_rhat": pat["llc_mixing"][a]["unweighted"]["rhat"],
    }
    for a, r in patterning_parens_base.refs_summary(refs).items()
  }


def reexamination(cfg: Config, model, data, refs, fraction, ctx) -> frame.Outputs:
  """The prediction re-examined
  (:func:`~mechjax.studies.patterning.patterning_parens_llc.reexamine`) at ``--total_variations``
  and this run's SGLD settings, without retraining."""
  ids, names = parens.groups(data["train"]["tokens"])
  pat = ctx.stage(
    "reexamination",
    lambda: patterning_parens_llc.reexamine(cfg, model, data, refs, ids, names, ctx),
  )
  chains = cfg.sgld.num_chains
  chi = {a: {"llc": r["llc"], **chi_mixing(r, chains)} for a, r in pat["responses"].items()}
  summary = {
    "design": "reexamination",
    "neg_prefix_fraction": fraction,
    "sgld": {
      k: getattr(cfg.sgld, k) for k in ("num_draws", "step_size", "localization", "batch_size")
    },
    "nbeta": cfg.nbeta,
    "chi": chi,
    "clipped_to_the_simplex": pat["clipped_to_the_simplex"],
    "llc_mixing": pat["llc_mixing"],
    "total_variation": {k: r["total_variation"] for k, r in pat["reweightings"].items()},
    "predicted_vs_measured": pat["comparison"],
  }
  return frame.Outputs(summary)


def chi_mixing(response: dict, num_chains: int) -> dict:
  """The worst split-R̂ and batch-means ESS of the probes' entries in the LLC's χ row, and the share
  of them that fail :mod:`mechjax.slt.mixing`'s rule."""
  return mixing.worst(response["chi_rhat"], response["chi_ess"], num_chains)


def chi_text(c: dict) -> str:
  return (
    f"χ of the LLC: R̂ ≤ {c['rhat_max']:.3f}, batch-means ESS ≥ {c['ess_min']:.0f}, "
    f"{c['share_failing']:.0%} of the probes fail R̂ ≤ 1.01 or ESS ≥ 100 per chain"
  )


def plot(sweep: list, pat: dict, outcomes: dict, path: str) -> str:
  """Four panels: the base-rate sweep; each group's LLC response at both references (from the
  analysis ``pat``); predicted against measured ``Δλ``; and what every condition's seeds learned."""
  fig, axes = plotting.plt.subplots(1, 4, figsize=(21, 4.8), width_ratios=[0.9, 1.6, 1.0, 1.0])
  ax = axes[0]
  fractions, shares = [row["fraction"] for row in sweep], [row["counts_share"] for row in sweep]
  ax.plot(fractions, shares, "o-", color="C2", label="seeds learning counts")
  for row in sweep:
    rates = np.asarray(row["counts_rate"], float)
    ax.scatter(np.full(rates.size, row["fraction"]), rates, s=8, color="gray", alpha=0.5)
  ax.axhspan(0.25, 0.75, color="C0", alpha=0.08, label="target base rate 25–75%")
  ax.set_ylim(-0.03, 1.03)
  ylabel, xlabel = (
    "counts share (line) / counts rate (dots)",
    "share of negatives with a negative prefix",
  )
  plotting.label_panel(ax, "base-rate sweep, unweighted", ylabel, xlabel)

  ax, names, responses = axes[1], pat["group_names"], pat["responses"]
  x = np.arange(len(names))
  for i, a in enumerate(parens.ALGORITHMS):
    r, label = responses[a], f"dλ/dh at the {a} solution (λ = {responses[a]['llc']:.1f})"
    yerr, color = 2 * np.asarray(r["dllc_implicit_se"]), patterning_parens_base.COLORS[a]
    ax.bar(
      x + (i - 0.5) * 0.4, r["dllc_total"], 0.4, yerr=yerr, capsize=1.5, color=color, label=label
    )
  ax.axhline(0, color="black", lw=0.6)
  ax.set_xticks(x, names, rotation=90, fontsize=6)
  title = "the LLC's response to each group of training strings"
  plotting.label_panel(ax, title, "dλ/dh_group  (implicit + explicit, ±2 s.e.)", grid="y")

  ax = axes[2]
  for k, (name, row) in enumerate(pat["comparison"].items()):
    for j, a in enumerate(parens.ALGORITHMS):
      r = row[f"dllc_{a}"]
      label = f"{name.replace('_', ' ')}: λ_{a}"
      yerr = 2 * r["se"]
      ax.errorbar(r["predicted"], r["measured"], yerr, fmt="o^"[j], color=f"C{k}", label=label)
  lims = np.array(ax.get_xlim() + ax.get_ylim())
  ax.plot([lims.min(), lims.max()], [lims.min(), lims.max()], color="black", lw=0.6, ls="--")
  title, xlabel = "the prediction, checked before retraining", "predicted Δλ (linear response)"
  plotting.label_panel(ax, title, "measured Δλ (re-estimated, ±2 s.e.)", xlabel, legend=6)

  ax, x = axes[3], np.arange(len(outcomes))
  bottom = np.zeros(len(outcomes))
  for outcome in patterning_parens_base.OUTCOMES:
    v = np.array([o["selected"][outcome] for o in outcomes.values()], float)
    ax.bar(x, v, bottom=bottom, color=patterning_parens_base.COLORS[outcome], label=outcome)
    bottom += v
  ax.set_xticks(x, [c.replace("_", "\n") for c in outcomes], fontsize=8)
  ax.set_ylim(0, 1.3 * max(bottom.max(), 1))
  plotting.label_panel(ax, "what the retrained seeds learned", "seeds", grid="", legend=None)
  ax.legend(fontsize=7, loc="upper center", ncol=3)
  return plotting.save(fig, path)


def report(summary: dict) -> list[str]:
  """What the command line prints: the sweep, each reference solution's LLC, predicted against
  measured Δλ, and which algorithm every condition's seeds learned (or, for a re-examination,
  χ's mixing and predicted against measured Δλ)."""
  if summary.get("design") == "reexamination":
    lines = [f"  {a}: LLC {c['llc']:.1f}; {chi_text(c)}" for a, c in summary["chi"].items()]
    for name, row in summary["predicted_vs_measured"].items():
      gap = row["dllc_counts_minus_prefix"]
      lines.append(
        f"  {name} (TV {summary['total_variation'][name]:.4f}): Δ(λ_counts − λ_prefix) predicted "
        f"{gap['predicted']:+.2f}, measured {gap['measured']:+.2f} ± {gap['se']:.2f}"
      )
    return lines
  lines = ["  base-rate sweep (unweighted; share of negatives with the prefix cue: selected):"]
  lines += [f"    {row['fraction']:g}: {row['selected']}" for row in summary["base_rate_sweep"]]
  lines += [f"  passed over {passed_over_text(p)}" for p in summary["shares_passed_over"]]
  lines.append(
    f"  continued at {summary['neg_prefix_fraction']:g} ({summary['neg_prefix_fraction_chosen_by']}"
    f"; base rate in 25-75%: {summary['base_rate_in_25_75']})"
  )
  for a, r in summary["reference_solutions"].items():
    lines.append(
      f"  reference {a}: LLC {r['llc']:.2f} ± {r['llc_sd_over_chains']:.2f} (sd over chains, "
      f"R̂ {r['llc_rhat']:.3f}), "
      f"train accuracy {r['train_accuracy']:.3f} after {r['steps']} steps, held-out "
      f"{r['test_accuracy']:.3f}, counts rate {r['counts_rate']:.2f}"
    )
    if a in summary.get("chi_mixing", {}):
      lines.append(f"    {chi_text(summary['chi_mixing'][a])}")
  for name, row in summary["predicted_vs_measured"].items():
    tv = summary["reweightings"][name]["total_variation"]
    gap = row["dllc_counts_minus_prefix"]
    lines.append(
      f"  {name} (TV {tv:.3f}): Δ(λ_counts − λ_prefix) predicted {gap['predicted']:+.2f}, "
      f"measured {gap['measured']:+.2f} ± {gap['se']:.2f}"
    )
  for c, o in summary["conditions"].items():
    p = summary["fisher_p_vs_unweighted"].get(c)
    w = summary["wilcoxon_p_vs_unweighted"].get(c)
    lines.append(
      f"  {c}: selected {o['selected']}; counts rate {o['counts_rate_mean']:.3f} ± "
      f"{o['counts_rate_sd']:.3f}"
      + ("" if p is None else f"; Fisher p (counts share vs unweighted) = {p['counts']:.3g}")
      + ("" if w is None else f", Wilcoxon p (paired counts rates) = {w:.3g}")
    )
  return lines


STUDY = frame.Study(
  NAME,
  Config,
  science,
  report,
  cpu_cores_as_devices=True,  # the SGLD chains run over every core
)
run = STUDY.run
