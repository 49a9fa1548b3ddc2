"""Patterning on parenthesis balancing: which of two algorithms a transformer learns, and whether a
data re-weighting computed from susceptibilities (Wang & Murfet 2026, arXiv:2601.13548) changes it.

The task (:mod:`mechjax.data.parens`): classify strings of ``(`` and ``)`` as balanced. Training
holds balanced strings and strings with unequal counts, so two algorithms are perfect on it:
**counts** (equal numbers of each) and **prefix** (equal numbers and no negative prefix). Probes are
equal-count strings with a negative prefix that start with ``(`` and end with ``)`` (so neither end
gives the answer away); counts calls them balanced and prefix does not. A trained model's **counts
rate**, the fraction of probes it calls balanced, tells which algorithm it runs; a seed is counted
as one algorithm when it is perfect in distribution (held-out accuracy ≥ ``perfect_accuracy``) and
its counts rate is above (counts) or below (prefix) one half.

Two designs share the data, the model, the reference solutions and the retraining:

* ``design="llc"`` (default; :mod:`mechjax.studies.patterning_parens_llc`), the paper's question.
  First a **base-rate sweep**: ``num_seeds`` unweighted seeds at each share of negatives that carry
  the prefix cue (``base_rate_fractions``; with uniform negatives 81% do, and every seed learns
  prefix, a base rate that 8 seeds cannot see move). The study continues at ``neg_prefix_fraction``,
  by default the swept share whose counts share is nearest one half. Then the **reference
  solutions** (one model forced to each algorithm by ``disagreement`` strings labelled by it; one
  short of ``perfect_accuracy`` on the training set trains on to ``reference_max_steps``, and if it
  is still short the study moves to the next share of that ranking, recording the share it passed
  over, and stops with a one-line reason only when no share qualifies), the
  **response of each one's LLC** to every group of training strings, the re-weighting that lowers
  the target's LLC relative to the other's by ``llc_margin`` inside the linear regime, the
  **re-estimated LLCs** on the re-weighted data (predicted against measured Δλ), and **retraining**
  under four conditions: unweighted, toward counts, toward prefix, and a random re-weighting with
  the same total variation, with paired seeds and Fisher's exact test on the selection counts.
* ``design="probe"`` (:mod:`mechjax.studies.patterning_parens_probe`), the earlier question: a
  behavioural probe loss targeted at one posterior, localised at the unweighted seed 0's checkpoint
  ``chi_step``, with the data of uniform negatives.

The data, the model, the training and the reference solutions they share are in
:mod:`mechjax.studies.patterning_parens_base`.

Outputs in the workdir: ``metrics.jsonl`` (every run), ``patterning.json`` (the susceptibilities,
responses and weights; reused on resume), ``summary.json`` and ``figures/patterning_parens.png``.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from mechjax import config
from mechjax.config import ConfigError
from mechjax.data import parens
from mechjax.slt import patterning
from mechjax.slt import sgld as sgld_lib
from mechjax.studies import frame
from mechjax.studies import patterning_parens_llc as llc_design
from mechjax.studies import patterning_parens_probe as probe_design
from mechjax.studies.patterning_parens_base import OUTCOMES  # noqa: F401 (the study's names)
from mechjax.studies.patterning_parens_base import Model
from mechjax.studies.patterning_parens_base import NotASolution
from mechjax.studies.patterning_parens_base import fisher_p
from mechjax.studies.patterning_parens_base import groups
from mechjax.studies.patterning_parens_base import make_data
from mechjax.studies.patterning_parens_base import make_evaluate  # noqa: F401
from mechjax.studies.patterning_parens_base import optimizer  # noqa: F401
from mechjax.studies.patterning_parens_base import paired_wilcoxon_p
from mechjax.studies.patterning_parens_base import reference_solutions
from mechjax.studies.patterning_parens_base import refs_summary
from mechjax.studies.patterning_parens_base import seed_outcomes
from mechjax.studies.patterning_parens_base import train_condition
from mechjax.studies.patterning_parens_base import train_weighted
from mechjax.train.loop import StudyStopped

NAME = "patterning_parens"
CPU_CORES_AS_DEVICES = True  # the SGLD chains run over every core
DESIGNS = ("llc", "probe")
PROBE_CONDITIONS = ("unweighted", "toward_counts", "toward_prefix")
LLC_CONDITIONS = ("unweighted", *llc_design.REWEIGHTINGS)
TARGETS = ("gap", "reference")


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=1000, num_seeds=8, log_every=50, checkpoint_every=250)
  )
  design: str = config.setting(
    "llc",
    "'llc': target each reference solution's LLC inside the linear regime, after a base-rate "
    "sweep; 'probe': the earlier design, a probe loss targeted at one posterior.",
    choices=DESIGNS,
  )
  length: int = config.setting(
    20, "String length (even).", check=config.all_of(config.at_least(6), config.even)
  )
  n: int = config.setting(
    4000,
    "Training strings; nβ = n / ln n for the susceptibilities and LLCs.",
    check=config.at_least(2),
  )
  balanced_fraction: float = config.setting(
    0.5, "Fraction of balanced training strings.", check=config.within(0, 1)
  )
  neg_prefix_fraction: float | None = config.setting(
    None,
    "Share of the negative (unequal-count) training strings that have a negative prefix, the "
    "cue the prefix algorithm reads; unset (-1): with --design=llc the share of "
    "--base_rate_fractions whose unweighted counts share is nearest 1/2, with --design=probe "
    "uniform negatives (about 0.81 at length 20).",
    check=config.within(0, 1, low_open=False, high_open=False),
    unset=-1.0,
  )
  base_rate_fractions: tuple[float, ...] = config.setting(
    (0.0, 0.05, 0.1, 0.2),
    "Shares of negatives with the prefix cue at which --num_seeds unweighted seeds are trained "
    "and counted (design llc; empty: no sweep, then --neg_prefix_fraction must be set).",
    check=config.all_of(
      config.each(config.within(0, 1, low_open=False, high_open=False)), config.distinct
    ),
  )
  num_probes: int = config.setting(
    512,
    "Probe strings (equal counts, a negative prefix, starting ( and ending )).",
    check=config.at_least(1),
  )
  num_test: int = config.setting(
    1000,
    "Held-out in-distribution strings (the 'perfect' check and the held-out loss).",
    check=config.at_least(1),
  )
  disagreement: int = config.setting(
    1000,
    "Equal-count strings with a negative prefix added to force each reference solution.",
    check=config.at_least(1),
  )
  reference_steps: int | None = config.setting(
    None,
    "Training steps of the forced reference solutions; unset (0): --steps.",
    check=config.at_least(1),
    unset=0,
  )
  reference_max_steps: int | None = config.setting(
    None,
    "Design llc: a forced reference below --perfect_accuracy on the training set after "
    "--reference_steps trains on to this many steps before its share is passed over for the "
    "next; unset (0): 4 × the reference steps.",
    check=config.at_least(1),
    unset=0,
  )
  d_model: int = config.setting(32, "Transformer width.", check=config.at_least(1))
  num_layers: int = config.setting(2, "Transformer layers.", check=config.at_least(1))
  num_heads: int = config.setting(4, "Attention heads per layer.", check=config.at_least(1))
  d_mlp: int = config.setting(64, "MLP width.", check=config.at_least(1))
  learning_rate: float = config.setting(1e-3, "Adam step size.", check=config.positive)
  weight_decay: float = config.setting(
    1e-3, "Decoupled weight decay (AdamW); 0 trains with plain Adam.", check=config.non_negative
  )
  batch_size: int = config.setting(64, "Training minibatch size.", check=config.at_least(1))
  chi_step: int = config.setting(
    250,
    "Design probe: the checkpoint of the unweighted seed 0 at which susceptibilities are "
    "estimated (a multiple of --checkpoint_every, at most --steps).",
    check=config.at_least(1),
  )
  per_group: int = config.setting(
    64, "Training probes per group of strings for the susceptibilities.", check=config.at_least(1)
  )
  sgld: sgld_lib.SGLDSettings = sgld_lib.study_group(
    "SGLD for the susceptibilities (and, with --llc_draws draws, the reference solutions' LLCs).",
    num_draws=500,
    num_burnin=100,
  )
  eval_size: int = config.setting(
    512,
    "Training samples in the fixed subset that defines L(w) for the susceptibilities.",
    check=config.at_least(1),
  )
  llc_draws: int = config.setting(
    1000, "SGLD draws per chain for the reference solutions' LLCs.", check=config.at_least(1)
  )
  llc_margin: float = config.setting(
    20.0,
    "Design llc: how far the re-weighting is to lower λ_target − λ_other, to first order.",
    check=config.positive,
  )
  ridge: float = config.setting(
    0.0, "Ridge ρ of the patterning inverse.", check=config.non_negative
  )
  target: str = config.setting(
    "gap",
    "Design probe: size of the φ_counts target: 'gap' moves it by the distance between the "
    "reference solutions (same size both ways); 'reference' moves the posterior mean onto "
    "each reference.",
    choices=TARGETS,
  )
  perfect_accuracy: float = config.setting(
    0.99,
    "Held-out accuracy at which a seed counts as perfect in distribution.",
    check=config.within(0.5, 1.0, high_open=False),
  )

  def validate(self):
    if self.design == "probe":
      self.run.check_checkpoint("chi_step", self.chi_step)
    elif self.neg_prefix_fraction is None and not self.base_rate_fractions:
      raise ConfigError(
        ("neg_prefix_fraction", "base_rate_fractions"),
        "design llc needs --base_rate_fractions to choose from, or --neg_prefix_fraction",
      )
    if max(self.batch_size, self.sgld.batch_size) > self.n:
      raise ConfigError(
        ("batch_size", "sgld.batch_size", "n"),
        f"batch sizes ({self.batch_size}, {self.sgld.batch_size}) must not exceed n={self.n}",
      )

  @property
  def nbeta(self) -> float:
    return sgld_lib.default_nbeta(self.n)


@frame.study
def run(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Runs every stage of the chosen design (each resumes from what the workdir holds) and writes
  summary.json and the figure."""
  if cfg.design == "probe":
    return _run_probe(cfg, ctx)
  return _run_llc(cfg, ctx)


def base_rate_sweep(cfg: Config, model: Model, ctx: frame.Context) -> tuple[list[dict], dict]:
  """``num_seeds`` unweighted seeds at every share of ``base_rate_fractions``; returns the sweep's
  rows and the runs' histories by fraction."""
  rows, histories = [], {}
  for f in cfg.base_rate_fractions:
    data = make_data(cfg, f)
    result = train_condition(cfg, model, data, np.ones(cfg.n), f"base_rate_{f:g}", ctx)
    o = seed_outcomes(cfg, result.history[-1])
    histories[f] = result.history
    rows.append(
      {
        "fraction": f,
        "selected": o["selected"],
        "counts_share": o["selected"]["counts"] / cfg.run.num_seeds,
        "counts_rate": o["counts_rate"],
        "counts_rate_mean": o["counts_rate_mean"],
      }
    )
  return rows, histories


def choose_fraction(cfg: Config, sweep: list[dict]) -> tuple[float, str, bool]:
  """The share the study continues at: ``neg_prefix_fraction`` if set, else the swept share whose
  counts share is nearest one half (the first such). Returns it, how it was chosen, and whether its
  base rate lies in 25–75% (None when it was not swept)."""
  return ranked_fractions(cfg, sweep)[0]


def ranked_fractions(cfg: Config, sweep: list[dict]) -> list[tuple[float, str, bool]]:
  """The shares the study may continue at, in the order it tries them: ``neg_prefix_fraction``
  alone if set, else every swept share by how near its counts share is to one half (ties in sweep
  order). Each as ``(share, how it was chosen, base rate in 25–75%)``."""

  def in_range(row):
    return None if row is None else bool(0.25 <= row["counts_share"] <= 0.75)

  if cfg.neg_prefix_fraction is not None:
    row = next((r for r in sweep if r["fraction"] == cfg.neg_prefix_fraction), None)
    return [(cfg.neg_prefix_fraction, "given", in_range(row))]
  order = sorted(sweep, key=lambda r: abs(r["counts_share"] - 0.5))  # stable: sweep order on ties
  return [(r["fraction"], "sweep", in_range(r)) for r in order]


def solved_share(cfg: Config, model: Model, sweep: list[dict], ctx: frame.Context):
  """The first share of :func:`ranked_fractions` whose forced references both train (each given
  up to ``reference_max_steps``), as ``(share, chosen_by, in_range, data, refs, passed_over)``;
  ``passed_over`` lists the shares tried before it and why. Stops the study
  (:class:`~mechjax.train.loop.StudyStopped`) only when no share qualifies."""
  passed_over = []
  for rank, (fraction, chosen_by, in_range) in enumerate(ranked_fractions(cfg, sweep)):
    data = make_data(cfg, fraction)
    try:
      refs = reference_solutions(
        cfg,
        model,
        data,
        ctx,
        estimate_llcs=False,
        require_solutions=True,
        prefix="" if rank == 0 else f"share_{fraction:g}_",
      )
    except NotASolution as e:
      passed_over.append(
        {
          "fraction": fraction,
          "algorithm": e.algorithm,
          "train_accuracy": e.train_accuracy,
          "steps": e.steps,
        }
      )
      ctx.log(f"passing over neg_prefix_fraction={fraction:g}: {e}")
      continue
    if passed_over:
      chosen_by = (
        f"{chosen_by}, rank {rank + 1} (the references of the shares before it do not train)"
      )
    return fraction, chosen_by, in_range, data, refs, passed_over
  tried = "; ".join(
    f"{p['fraction']:g}: the {p['algorithm']} reference reached {p['train_accuracy']:.3f} after "
    f"{p['steps']} steps"
    for p in passed_over
  )
  raise StudyStopped(
    f"no share's forced references reach training accuracy perfect_accuracy="
    f"{cfg.perfect_accuracy:g} ({tried}), so no reference LLC means anything; raise "
    "--reference_max_steps, or try other --base_rate_fractions or another --seed"
  )


def _run_llc(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  model = Model(cfg)
  sweep, sweep_histories = base_rate_sweep(cfg, model, ctx)
  fraction, chosen_by, in_range, data, refs, passed_over = solved_share(cfg, model, sweep, ctx)
  ctx.log(
    f"continuing at neg_prefix_fraction={fraction:g} ({chosen_by}; base rate in 25-75%: {in_range})"
  )
  histories = {}
  if fraction in sweep_histories:
    histories["unweighted"] = sweep_histories[fraction]
  else:
    histories["unweighted"] = train_condition(
      cfg, model, data, np.ones(cfg.n), "unweighted", ctx
    ).history
  ids, names = groups(data["train"]["tokens"])
  num_groups = len(names)
  base = np.bincount(ids, minlength=num_groups) / len(ids)

  def analysis():
    chosen = probe_design.group_probes(cfg, ids, num_groups)
    responses = llc_design.llc_responses(cfg, model, data, refs, ids, num_groups, chosen)
    reweightings = llc_design.targets(responses, base, cfg.llc_margin, cfg.ridge)
    tv = max(r["total_variation"] for r in reweightings.values())
    d = {a: np.asarray(responses[a]["dllc_total"]) for a in parens.ALGORITHMS}
    g = {a: np.asarray(responses[a]["dtest"]) for a in parens.ALGORITHMS}
    reweightings["random"] = llc_design.random_reweighting(cfg.run.seed, base, tv, d, g)
    measured = llc_design.measure_llcs(
      cfg,
      model,
      data,
      refs,
      ids,
      {k: r["group_distribution"] for k, r in reweightings.items()},
    )
    return {
      "group_names": names,
      "base": base.tolist(),
      "probes_per_group": np.bincount(ids[chosen], minlength=num_groups).tolist(),
      "responses": responses,
      "reweightings": reweightings,
      "measured_llc_per_chain": measured,
      "comparison": llc_design.compare(reweightings, measured),
    }

  pat = ctx.stage("patterning", analysis)
  for name in llc_design.REWEIGHTINGS:
    weights = patterning.sample_weights(pat["reweightings"][name]["group_distribution"], ids)
    histories[name] = train_condition(cfg, model, data, weights, name, ctx).history
  outcomes = {c: seed_outcomes(cfg, histories[c][-1]) for c in LLC_CONDITIONS}
  unweighted_llc = {
    a: float(np.mean(pat["measured_llc_per_chain"][a]["unweighted"])) for a in parens.ALGORITHMS
  }
  summary = {
    "design": "llc",
    "nbeta": cfg.nbeta,
    "perfect_accuracy": cfg.perfect_accuracy,
    "base_rate_sweep": sweep,
    "neg_prefix_fraction": fraction,
    "neg_prefix_fraction_chosen_by": chosen_by,
    "base_rate_in_25_75": in_range,
    "shares_passed_over": passed_over,
    "reference_solutions": {
      a: {
        **r,
        "llc": unweighted_llc[a],
        "llc_sd_over_chains": float(np.std(pat["measured_llc_per_chain"][a]["unweighted"])),
        "llc_from_susceptibility_run": pat["responses"][a]["llc"],
      }
      for a, r in refs_summary(refs).items()
    },
    "llc_response_parts": {
      a: {
        "implicit_norm": float(np.linalg.norm(pat["responses"][a]["dllc_implicit"])),
        "explicit_norm": float(np.linalg.norm(pat["responses"][a]["dllc_explicit"])),
        "total_norm": float(np.linalg.norm(pat["responses"][a]["dllc_total"])),
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
      c: {a: fisher_p(outcomes[c], outcomes["unweighted"], a) for a in parens.ALGORITHMS}
      for c in llc_design.REWEIGHTINGS
    },
    # The seeds are paired (the same keys in every condition): Wilcoxon signed-rank on counts rates.
    "wilcoxon_p_vs_unweighted": {
      c: paired_wilcoxon_p(outcomes[c]["counts_rate"], outcomes["unweighted"]["counts_rate"])
      for c in llc_design.REWEIGHTINGS
    },
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      llc_design.plot(
        sweep,
        pat["responses"],
        pat["comparison"],
        outcomes,
        names,
        os.path.join(folder, "patterning_parens.png"),
      )
    ],
    captions={
      "patterning_parens.png": "1: the share of seeds that learn counts (line) and each seed's "
      "counts rate (dots) against the base rate. 2: each group's response of the LLC at the two "
      "reference solutions, bars ±2 s.e. 3: the predicted against the re-measured change of each "
      "LLC per re-weighting, bars ±2 s.e.; the dashed line is equality. 4: what the retrained "
      "seeds of each condition learned."
    },
  )


def _run_probe(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  model = Model(cfg)
  data = make_data(cfg, cfg.neg_prefix_fraction)
  with ctx.timed("references"):
    refs = reference_solutions(cfg, model, data, ctx, estimate_llcs=True)
  unweighted = train_condition(cfg, model, data, np.ones(cfg.n), "unweighted", ctx)
  histories = {"unweighted": unweighted.history}

  def patterning_stage():
    w_star = unweighted.params_of(0, cfg.chi_step)
    return probe_design.compute_patterning(cfg, model, data, w_star, refs, groups)

  pat = ctx.stage("patterning", patterning_stage)
  ids, _ = groups(data["train"]["tokens"])
  for algorithm in parens.ALGORITHMS:
    weights = patterning.sample_weights(pat["targets"][algorithm]["group_distribution"], ids)
    histories[f"toward_{algorithm}"] = train_weighted(
      cfg,
      model,
      data,
      weights,
      f"toward_{algorithm}",
      ctx,
      num_seeds=cfg.run.num_seeds,
      checkpoint_every=cfg.run.steps,
    ).history
  outcomes = {c: seed_outcomes(cfg, histories[c][-1]) for c in PROBE_CONDITIONS}
  summary = {
    "design": "probe",
    "nbeta": cfg.nbeta,
    "chi_step": cfg.chi_step,
    "reference_solutions": refs_summary(refs),
    "patterning": {
      k: pat[k] for k in ("llc_at_w_star", "posterior_mean_phi", "targets", "seconds")
    },
    "conditions": outcomes,
    # Paired by seed (the same keys in every condition): Wilcoxon signed-rank on the counts rates.
    "wilcoxon_p_vs_unweighted": {
      c: paired_wilcoxon_p(outcomes[c]["counts_rate"], outcomes["unweighted"]["counts_rate"])
      for c in PROBE_CONDITIONS[1:]
    },
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      probe_design.plot(
        cfg, pat, histories, refs, PROBE_CONDITIONS, os.path.join(folder, "patterning_parens.png")
      )
    ],
    captions={
      "patterning_parens.png": "Left: each group's response of the counts observable, bars ±2 "
      "s.e. Middle: how each re-weighting changes the groups' probabilities (same order). Right: "
      "the counts rate during training per condition, thick lines the means over seeds, thin "
      "lines each seed; the horizontal lines are the two reference solutions."
    },
  )


def report(summary: dict) -> list[str]:
  """What the command line prints: the sweep, each reference solution's LLC, predicted against
  measured Δλ, and which algorithm every condition's seeds learned."""
  if summary.get("design", "probe") == "probe":
    return _report_probe(summary)
  lines = ["  base-rate sweep (unweighted; share of negatives with the prefix cue: selected):"]
  for row in summary["base_rate_sweep"]:
    lines.append(f"    {row['fraction']:g}: {row['selected']}")
  for p in summary.get("shares_passed_over", []):
    lines.append(
      f"  passed over {p['fraction']:g}: its forced {p['algorithm']} reference reached training "
      f"accuracy {p['train_accuracy']:.3f} after {p['steps']} steps"
    )
  lines.append(
    f"  continued at {summary['neg_prefix_fraction']:g} ({summary['neg_prefix_fraction_chosen_by']}"
    f"; base rate in 25-75%: {summary['base_rate_in_25_75']})"
  )
  for a, r in summary["reference_solutions"].items():
    lines.append(
      f"  reference {a}: LLC {r['llc']:.2f} ± {r['llc_sd_over_chains']:.2f} (sd over chains), "
      f"train accuracy {r['train_accuracy']:.3f}"
      + ("" if "steps" not in r else f" after {r['steps']} steps")
      + f", held-out {r['test_accuracy']:.3f}, counts rate {r['counts_rate']:.2f}"
      + (
        ""
        if r["train_accuracy"] >= summary.get("perfect_accuracy", 0.99)
        else " (NOT a solution: imperfect on the training set)"
      )
    )
  for name, row in summary["predicted_vs_measured"].items():
    tv = summary["reweightings"][name]["total_variation"]
    gap = row["dllc_counts_minus_prefix"]
    lines.append(
      f"  {name} (TV {tv:.3f}): Δ(λ_counts − λ_prefix) predicted {gap['predicted']:+.2f}, "
      f"measured {gap['measured']:+.2f} ± {gap['se']:.2f}"
    )
  for c, o in summary["conditions"].items():
    p = summary["fisher_p_vs_unweighted"].get(c)
    w = summary.get("wilcoxon_p_vs_unweighted", {}).get(c)
    lines.append(
      f"  {c}: selected {o['selected']}; counts rate {o['counts_rate_mean']:.3f} ± "
      f"{o['counts_rate_sd']:.3f}"
      + ("" if p is None else f"; Fisher p (counts share vs unweighted) = {p['counts']:.3g}")
      + ("" if w is None else f", Wilcoxon p (paired counts rates) = {w:.3g}")
    )
  return lines


def _report_probe(summary: dict) -> list[str]:
  lines = []
  for a, r in summary["reference_solutions"].items():
    lines.append(
      f"  reference {a}: LLC {r['llc_mean']:.2f} ± {r['llc_sd_over_chains']:.2f} (sd over chains), "
      "train "
      f"accuracy {r['train_accuracy']:.3f}, counts rate {r['counts_rate']:.2f}"
    )
  for c, o in summary["conditions"].items():
    targets = summary["patterning"]["targets"]
    tv = "" if c == "unweighted" else f" (TV {targets[c.split('_', 1)[1]]['total_variation']:.3f})"
    p = summary["wilcoxon_p_vs_unweighted"].get(c)
    lines.append(
      f"  {c}{tv}: selected {o['selected']}; counts rate {o['counts_rate_mean']:.3f} ± "
      f"{o['counts_rate_sd']:.3f} (sd over seeds)"
      + ("" if p is None else f", Wilcoxon p = {p:.3g} vs unweighted")
    )
  return lines
