"""llc_over_training's summary, verdict, printed report and figure."""

from __future__ import annotations

import jax
import numpy as np

from mechjax import slt

# A head whose attention to the induction target averages at least this is called an induction head
# in the verdict: a majority of its attention (fixed before any run, not tuned).
INDUCTION = 0.5
CAPTION = (
  "Top: the whole model's LLC at each checkpoint (± one standard error over chains), against the "
  "training step (0, then log scale); vertical lines mark where its slope changes sign, solid "
  "when both slopes differ from zero by two standard errors, dotted when not. Middle: the refined "
  "LLC of each restriction. Bottom: each layer's highest prefix-matching (induction) score over "
  "its heads (uniform attention scores about the dashed line), and on the right axis the "
  "in-context-learning score (loss at a late token minus at an early one; lower is more "
  "in-context learning)."
)


def summarise(cfg, model, params_P, revs, duplicates, steps, llcs: dict, found: dict) -> dict:
  """The summary: the model, the checkpoints (with the weight hash and the step each duplicate
  repeats), nβ, each restriction's LLC per distinct checkpoint with its standard error and mixing,
  and the probes."""
  chains = cfg.sgld.num_chains
  first_of = {}
  checkpoints = []
  for r in revs:
    first_of.setdefault(r.weights, r.step)
    same = first_of[r.weights]
    checkpoints.append(
      {
        "step": r.step,
        "name": r.name,
        "weights": r.weights[:16],
        "same_as": None if same == r.step else same,
      }
    )
  params = sum(int(np.size(x)) for x in jax.tree.leaves(params_P)) // len(steps)
  llc = {}
  for name, r in llcs.items():
    per_chain = np.asarray(r["llc_per_chain"])
    se = (
      per_chain.std(axis=1, ddof=1) / np.sqrt(chains) if chains > 1 else np.full(len(steps), np.nan)
    )
    llc[name] = {
      "llc": r["llc"],
      "se": se,
      "rhat": r["rhat"],
      "ess": r["ess"],
      "init_loss": r["init_loss"],
      "mixing": slt.mixing.worst(r["rhat"], r["ess"], chains),
    }
  pm = np.asarray(found["prefix_matching"])  # (P, L, H)
  best = pm.reshape(len(steps), -1).argmax(axis=1)
  heads = pm.shape[2]
  return {
    "model": {
      "family": model.arch.family,
      "layers": model.arch.num_layers,
      "heads": heads,
      "d_model": model.arch.d_model,
      "vocab_size": model.arch.vocab_size,
      "parameters": params,
    },
    "checkpoints": checkpoints,
    "duplicates": [sorted(v) for v in duplicates.values()],
    "steps": list(steps),
    "nbeta": float(np.asarray(next(iter(llcs.values()))["nbeta"]).ravel()[0]),
    "chains": chains,
    "draws": cfg.sgld.num_draws,
    "llc": llc,
    "probes": {
      "prefix_matching": pm,
      "uniform_prefix_matching": uniform_prefix_matching(cfg.seq_len),
      "best_head": [f"l{b // heads}h{b % heads}" for b in best],
      "best_score": pm.reshape(len(steps), -1).max(axis=1),
      "repeat_loss_drop": found["repeat_loss_drop"],
      "icl_score": found["icl_score"],
      "loss": found["loss"],
    },
  }


def uniform_prefix_matching(seq_len: int) -> float:
  """The prefix-matching score of a head that attends uniformly to every earlier position: the mean
  of ``1/(i + 1)`` over the second copy's query positions ``i``."""
  m = seq_len // 2
  return float(np.mean(1 / (np.arange(m, 2 * m) + 1)))


def verdict(summary: dict) -> list[str]:
  """The stages found (or that none is resolved), what the probes show, and whether the chains
  mixed."""
  steps, whole = summary["steps"], summary["llc"]["all"]
  llc = np.asarray(whole["llc"], float)
  found = [c for c in summary.get("critical_points", []) if c["resolved"]]
  m = summary["model"]
  lines = [
    f"The LLC of a {m['family']} model ({m['parameters']:,} parameters) at {len(steps)} distinct "
    f"checkpoints, steps {steps[0]} to {steps[-1]}: {llc[0]:.3g} at the first, {llc[-1]:.3g} at "
    f"the last, highest {llc.max():.3g} at step {steps[int(llc.argmax())]}."
  ]
  if found:
    lines.append(
      "Stages: the LLC's slope against log step changes sign, beyond two standard errors on both "
      "sides, at "
      + "; ".join(
        f"step {c['step']} (a {c['kind']}, between {c['from']} and {c['to']})" for c in found
      )
      + "."
    )
  else:
    lines.append(
      "Stages: no change of the LLC's slope is resolved at two standard errors"
      + (
        f" ({len(summary.get('critical_points', []))} unresolved)"
        if summary.get("critical_points")
        else ""
      )
      + ": at this size and with these chains, the landscape shows no stage boundary."
    )
  p = summary["probes"]
  score = np.asarray(p["best_score"], float)
  formed = [s for s, v in zip(steps, score) if v >= INDUCTION]
  lines.append(
    f"Induction: the best head's prefix-matching score goes from {score[0]:.2f} to {score[-1]:.2f} "
    f"({p['best_head'][-1]} at the last checkpoint; uniform attention scores "
    f"{p['uniform_prefix_matching']:.3f}); "
    + (
      f"a head gives the induction target most of its attention (≥ {INDUCTION}) from step "
      f"{formed[0]}."
      if formed
      else f"no head gives the induction target most of its attention (≥ {INDUCTION})."
    )
    + f" The in-context-learning score goes from {p['icl_score'][0]:+.3f} to "
    f"{p['icl_score'][-1]:+.3f} nats."
  )
  lines += negative(summary) + [mixing_line(summary)]
  if summary["duplicates"]:
    lines.append(
      "Identical weights under several steps, estimated once: "
      + "; ".join(", ".join(map(str, d)) for d in summary["duplicates"])
      + "."
    )
  return lines


def negative(summary: dict) -> list[str]:
  """The checkpoints whose whole-model LLC is negative beyond two standard errors, and what that
  means."""
  whole = summary["llc"]["all"]
  llc, se = np.asarray(whole["llc"], float), np.nan_to_num(np.asarray(whole["se"], float))
  below = [s for s, v, e in zip(summary["steps"], llc, se) if v < -2 * e]
  if not below:
    return []
  return [
    f"Negative LLCs at {len(below)} checkpoint{'s' * (len(below) > 1)} (steps "
    f"{', '.join(map(str, below))}): the chains found lower loss near w*, which is then not a "
    "local minimum (as early in training). Those values are a diagnostic, not learning "
    "coefficients, and the stages above are read without them."
  ]


def mixing_line(summary: dict) -> str:
  """Whether the whole model's chains mixed, over the checkpoints."""
  m, n = summary["llc"]["all"]["mixing"], len(summary["steps"])
  if m["rhat_max"] is None or not np.isfinite(m["rhat_max"]):
    return "Mixing: too few draws to judge (R̂ and ESS need 8 or more per chain)."
  failing = round(m["share_failing"] * n)
  return (
    f"Mixing (whole model): R̂ at most {m['rhat_max']:.3f} and bulk ESS at least "
    f"{m['ess_min']:.0f} over the {n} checkpoints; {failing} of {n} miss R̂ ≤ "
    f"{slt.mixing.RHAT_MAX} or ESS ≥ {slt.mixing.ESS_PER_CHAIN_MIN} per chain"
    + (", so read their LLCs with care." if failing else ".")
  )


def report(summary: dict) -> list[str]:
  """One line per distinct checkpoint: the LLC ± s.e., the refined LLCs, the whole model's R̂ and
  bulk ESS, the probes."""
  names = list(summary["llc"])
  p = summary["probes"]
  lines = []
  whole = summary["llc"]["all"]
  for i, step in enumerate(summary["steps"]):
    parts = []
    for name in names:
      r = summary["llc"][name]
      se = r["se"][i]
      part = f"{name} {r['llc'][i]:.3g}" + (
        "" if se is None or not np.isfinite(se) else f" ± {se:.2g}"
      )
      if name == "all":
        part += f" (R̂ {whole['rhat'][i]:.3f}, ESS {whole['ess'][i]:.0f})"
      parts.append(part)
    lines.append(
      f"  step {step:>6}: LLC {'; '.join(parts)}; best induction {p['best_score'][i]:.2f} "
      f"({p['best_head'][i]}); ICL {p['icl_score'][i]:+.3f}; loss {p['loss'][i]:.3f}"
    )
  return lines


def plot(summary: dict, path: str) -> str:
  from mechjax import plotting

  steps = np.asarray(summary["steps"], float)
  fig, axes = plotting.plt.subplots(3, 1, figsize=(8, 8.5), sharex=True)
  whole = summary["llc"]["all"]
  se = np.nan_to_num(np.asarray(whole["se"], float))
  axes[0].errorbar(
    steps, whole["llc"], yerr=se, fmt="o-", ms=3, capsize=2, color="k", label="whole model"
  )
  for c in summary.get("critical_points", []):
    for ax in axes:
      ax.axvline(c["step"], color="tab:red", lw=1, ls="-" if c["resolved"] else ":")
  plotting.label_panel(axes[0], "The LLC over training", "LLC")
  for name, r in summary["llc"].items():
    if name != "all":
      axes[1].plot(steps, r["llc"], "o-", ms=3, label=name)
  plotting.label_panel(
    axes[1], "Refined LLCs", "LLC", legend=7 if len(summary["llc"]) > 1 else None
  )
  pm = np.asarray(summary["probes"]["prefix_matching"], float)
  for l in range(pm.shape[1]):
    axes[2].plot(steps, pm[:, l].max(axis=1), "o-", ms=3, label=f"layer {l}: best head")
  axes[2].axhline(summary["probes"]["uniform_prefix_matching"], color="gray", ls="--", lw=0.8)
  twin = axes[2].twinx()
  twin.plot(
    steps, summary["probes"]["icl_score"], "s:", ms=3, color="tab:purple", label="ICL score"
  )
  twin.set_ylabel("ICL score (nats)", color="tab:purple")
  plotting.label_panel(axes[2], "Probes", "prefix matching", "training step")
  axes[2].set_xscale(
    "symlog", linthresh=max(1.0, float(steps[steps > 0].min()) if (steps > 0).any() else 1.0)
  )
  return plotting.save(fig, path)
