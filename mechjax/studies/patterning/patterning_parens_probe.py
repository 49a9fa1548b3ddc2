"""Patterning on parenthesis balancing, the earlier design: a behavioural probe loss targeted at one
posterior, not the LLC of each solution. The task, the counts rate and how a seed's algorithm is
counted: :mod:`mechjax.studies.patterning.patterning_parens_base`.

Susceptibilities are estimated at the unweighted seed 0's checkpoint ``chi_step``
(:func:`mechjax.slt.susceptibility.estimate_susceptibilities`), with per-sample probes drawn from
every group of training strings and two observables: ``φ_counts``, the probe loss under counts
labels (low for a counts model), and ``φ_test``, the held-out in-distribution loss. The group
responses ``J_g = dE[φ]/dh`` (:func:`mechjax.slt.patterning.group_response`) are inverted on the
simplex (:func:`mechjax.slt.patterning.patterning_weights`), once toward each algorithm ``A``, for
``Δφ_test = 0`` and a change of ``φ_counts`` that is, with ``target="gap"``, the whole distance
between the two reference solutions, ``∓(φ_counts(w_prefix) − φ_counts(w_counts))``; with
``target="reference"`` it is ``φ_counts(w_A) − E[φ_counts]``.

This asks a local linear response for a jump between two solutions, far outside its linear regime,
and it drops the LLC observable that the patterning mechanism works through;
:mod:`mechjax.studies.patterning.patterning_parens` targets each solution's LLC instead. The seeds
retrained toward each algorithm are paired with the unweighted ones (Wilcoxon's signed-rank test on
the counts rates). Outputs: ``metrics.jsonl``, ``patterning.json`` (reused on resume),
``summary.json`` and ``figures/patterning_parens.png``.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.data import parens
from mechjax.slt import langevin
from mechjax.slt import llc as llc_lib
from mechjax.slt import mixing
from mechjax.slt import patterning
from mechjax.slt import susceptibility as sus
from mechjax.studies import frame
from mechjax.studies.patterning import patterning_parens_base

NAME = "patterning_parens_probe"
TARGETS = ("gap", "reference")


@dataclasses.dataclass(frozen=True)
class Config(patterning_parens_base.ParensSettings):
  """The settings of :class:`~mechjax.studies.patterning.patterning_parens_base.ParensSettings`
  and these."""

  neg_prefix_fraction: float | None = config.setting(
    None,
    "Share of the negative (unequal-count) training strings that have a negative prefix, the "
    "cue the prefix algorithm reads; unset (-1): uniform negatives (about 0.81 at length 20).",
    check=config.within(0, 1, low_open=False, high_open=False),
    unset=-1.0,
  )
  chi_step: int = config.setting(
    250,
    "The checkpoint of the unweighted seed 0 at which susceptibilities are estimated (a "
    "multiple of --checkpoint_every, at most --steps).",
    check=config.at_least(1),
  )
  target: str = config.setting(
    "gap",
    "Size of the φ_counts target: 'gap' moves it by the distance between the reference "
    "solutions (same size both ways); 'reference' moves the posterior mean onto each reference.",
    choices=TARGETS,
  )

  def validate(self):
    self.run.check_checkpoint("chi_step", self.chi_step)
    super().validate()


def compute_patterning(cfg: Config, model, data: dict, w_star, references: dict, ids, names):
  """Susceptibilities at ``w_star`` (the posterior's localisation) over group-stratified training
  probes (group ``ids``, group ``names``), group responses, and the simplex re-weighting toward each
  reference solution (whose ``phi_counts`` set the targets)."""
  num_groups = len(names)
  chosen = patterning_parens_base.group_probes(cfg, ids, num_groups)
  train, test = jax.tree.map(jnp.asarray, (data["train"], data["test"]))
  res = sus.estimate_susceptibilities(
    model.per_sample_loss,
    w_star,
    train,
    jax.tree.map(lambda v: v[chosen], train),
    key=rng.key(cfg.run.seed, "susceptibility"),
    settings=cfg.sgld,
    eval_size=cfg.eval_size,
    observable=model.probe_observables,
    observable_data={"probes": jnp.asarray(data["probes"]["tokens"]), "test": test},
  )
  response = res.response[0, 1:]  # (2 observables, probes): φ_counts, φ_test
  se = cfg.nbeta * res.standard_error[0, 1:]
  sub_ids = ids[chosen]
  j_g = patterning.group_response(response, sub_ids, num_groups)
  se_g = patterning.group_response_se(se, sub_ids, num_groups)
  base = np.bincount(ids, minlength=num_groups) / len(ids)
  mean_phi = res.observable_means[0, 1:]
  out = {
    "group_names": names,
    "group_sizes": np.bincount(ids, minlength=num_groups),
    "base": base,
    "group_response": j_g,
    "group_response_se": se_g,
    "llc_at_w_star": res.llc[0],
    "chi_mixing": mixing.worst(res.chi_rhat[0, 1:], res.chi_ess[0, 1:], cfg.sgld.num_chains),
    "posterior_mean_phi": mean_phi,
    "probes_per_group": np.bincount(sub_ids, minlength=num_groups),
    "targets": {},
  }
  gap = references["prefix"]["phi_counts"] - references["counts"]["phi_counts"]
  for algorithm in parens.ALGORITHMS:
    if cfg.target == "gap":
      delta = gap if algorithm == "prefix" else -gap
    else:
      delta = references[algorithm]["phi_counts"] - mean_phi[0]
    target = np.array([delta, 0.0])
    dh = patterning.patterning_weights(j_g, target, ridge=cfg.ridge, simplex=True, base=base)
    out["targets"][algorithm] = {
      "target_delta": target,
      "group_distribution": base + dh,
      "predicted_delta": j_g @ dh,
      "total_variation": 0.5 * np.abs(dh).sum(),
    }
  return out


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Runs every stage (each resumes from what the workdir holds) and writes summary.json and the
  figure."""
  model = patterning_parens_base.Model(cfg)
  data = patterning_parens_base.make_data(cfg, cfg.neg_prefix_fraction)
  with ctx.timed("references"):
    refs = patterning_parens_base.reference_solutions(cfg, model, data, ctx)
    for r in refs.values():  # each one's LLC on the training set alone, where both are perfect
      est = llc_lib.estimate_llc(
        langevin.MeanLoss(model.per_sample_loss),
        r["params"],
        jax.tree.map(jnp.asarray, data["train"]),
        key=rng.key(cfg.run.seed, "reference-llc"),
        settings=cfg.sgld,
        num_draws=cfg.llc_draws,
      )
      r["llc_mean"], r["llc_sd_over_chains"] = est.llc_mean, np.std(est.llc_per_chain)
      r["llc_rhat"], r["llc_ess_bulk"] = est.diagnostics["rhat"], est.diagnostics["ess_bulk"]
  unweighted = patterning_parens_base.train_weighted(
    cfg, model, data, np.ones(cfg.n), "unweighted", ctx
  )
  ids, names = parens.groups(data["train"]["tokens"])

  def patterning_stage():  # the checkpoint is restored only when the stage is computed
    w_star = unweighted.params_of(0, cfg.chi_step)
    return compute_patterning(cfg, model, data, w_star, refs, ids, names)

  pat = ctx.stage("patterning", patterning_stage)
  histories = {"unweighted": unweighted.history}
  for a in parens.ALGORITHMS:
    weights = patterning.sample_weights(pat["targets"][a]["group_distribution"], ids)
    # Checkpointed at the end only: no susceptibility is estimated on these runs.
    result = patterning_parens_base.train_weighted(
      cfg, model, data, weights, f"toward_{a}", ctx, checkpoint_every=cfg.run.steps
    )
    histories[f"toward_{a}"] = result.history
  outcomes = {c: patterning_parens_base.seed_outcomes(cfg, h[-1]) for c, h in histories.items()}
  summary = {
    "design": "probe",
    "nbeta": cfg.nbeta,
    "chi_step": cfg.chi_step,
    "reference_solutions": patterning_parens_base.refs_summary(refs),
    "patterning": {
      k: pat[k] for k in ("llc_at_w_star", "chi_mixing", "posterior_mean_phi", "targets")
    },
    "conditions": outcomes,
    "wilcoxon_p_vs_unweighted": patterning_parens_base.wilcoxon_vs_unweighted(outcomes),
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      plot(cfg, pat, histories, refs, os.path.join(folder, "patterning_parens.png"))
    ],
    captions={
      "patterning_parens.png": "Left: each group's response of the counts observable, bars ±2 "
      "s.e. Middle: how each re-weighting changes the groups' probabilities (same order). Right: "
      "the counts rate during training per condition, thick lines the means over seeds, thin "
      "lines each seed; the horizontal lines are the two reference solutions."
    },
  )


def report(summary: dict) -> list[str]:
  """What the command line prints: each reference solution's LLC and which algorithm every
  condition's seeds learned."""
  lines = []
  for a, r in summary["reference_solutions"].items():
    lines.append(
      f"  reference {a}: LLC {r['llc_mean']:.2f} ± {r['llc_sd_over_chains']:.2f} (sd over chains, "
      f"R̂ {r['llc_rhat']:.3f}), train accuracy {r['train_accuracy']:.3f}, counts rate "
      f"{r['counts_rate']:.2f}"
    )
  c = summary["patterning"]["chi_mixing"]
  lines.append(f"  χ of the probe observables: R̂ ≤ {c['rhat_max']:.3f}, ESS ≥ {c['ess_min']:.0f}")
  targets = summary["patterning"]["targets"]
  for c, o in summary["conditions"].items():
    tv = "" if c == "unweighted" else f" (TV {targets[c.split('_', 1)[1]]['total_variation']:.3f})"
    p = summary["wilcoxon_p_vs_unweighted"].get(c)
    lines.append(
      f"  {c}{tv}: selected {o['selected']}; counts rate {o['counts_rate_mean']:.3f} ± "
      f"{o['counts_rate_sd']:.3f} (sd over seeds)"
      + ("" if p is None else f", Wilcoxon p = {p:.3g} vs unweighted")
    )
  return lines


def plot(cfg: Config, pat: dict, histories: dict, refs: dict, path: str) -> str:
  """Group responses of φ_counts (±2 s.e.), the group distributions, and the counts rate over
  training."""
  fig, axes = plotting.plt.subplots(1, 3, figsize=(17, 4.6), width_ratios=[1.3, 1.3, 1])
  j, se = np.asarray(pat["group_response"])[0], np.asarray(pat["group_response_se"])[0]
  order = np.argsort(j)
  x, names = np.arange(len(order)), [pat["group_names"][i] for i in order]
  ax = axes[0]
  colors = np.where(j[order] < 0, "C2", "C3")
  ax.bar(x, j[order], yerr=2 * se[order], color=colors, alpha=0.8, capsize=2)
  ax.set_xticks(x, names, rotation=90, fontsize=6)
  title = f"group responses at step {cfg.chi_step} (nβ = {cfg.nbeta:.0f}, ±2 s.e.)"
  plotting.label_panel(ax, title, "dE[φ_counts]/dh  (< 0: toward counts)", grid="y", legend=None)
  ax = axes[1]
  for i, a in enumerate(parens.ALGORITHMS):
    target = pat["targets"][a]
    change = np.asarray(target["group_distribution"]) - np.asarray(pat["base"])
    label = f"toward {a} (TV {target['total_variation']:.3f})"
    ax.bar(
      x + (i - 0.5) * 0.4, change[order], 0.4, label=label, color=patterning_parens_base.COLORS[a]
    )
  ax.axhline(0, color="black", lw=0.6)
  ax.set_xticks(x, names, rotation=90, fontsize=6)
  title = "re-weighting (same group order)"
  plotting.label_panel(ax, title, "change of the group's probability", grid="y", legend=8)
  ax = axes[2]
  colors = {"unweighted": "gray", "toward_counts": "C2", "toward_prefix": "C3"}
  for c, history in histories.items():
    steps = np.array([h["step"] for h in history])
    rate = np.array([h["counts_rate"] for h in history], float)
    ax.plot(steps, rate, color=colors[c], lw=0.7, alpha=0.5)
    ax.plot(steps, rate.mean(1), color=colors[c], lw=2, label=c.replace("_", " "))
  for a, style in zip(parens.ALGORITHMS, ("--", ":")):
    label = f"reference {a} (LLC {refs[a]['llc_mean']:.1f})"
    ax.axhline(refs[a]["counts_rate"], color="black", ls=style, lw=0.8, label=label)
  ax.set_ylim(-0.03, 1.03)
  title = f"{cfg.run.num_seeds} seeds per condition (thin: each seed)"
  plotting.label_panel(ax, title, "counts rate on probes", "training step")
  return plotting.save(fig, path)


STUDY = frame.Study(
  NAME,
  Config,
  science,
  report,
  cpu_cores_as_devices=True,  # the SGLD chains run over every core
)
run = STUDY.run
