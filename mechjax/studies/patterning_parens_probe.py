"""The earlier design of the parenthesis patterning study (``--design=probe``): it targets a
behavioural probe loss at one posterior, not the LLC of each solution.

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
and it drops the LLC observable that the patterning mechanism works through; the default design
(:mod:`mechjax.studies.patterning_parens_llc`) targets each solution's LLC instead.
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

from mechjax import plotting
from mechjax import rng
from mechjax.data import parens
from mechjax.slt import patterning
from mechjax.slt import susceptibility as sus


def compute_patterning(cfg, model, data: dict, w_star, references: dict, groups_fn) -> dict:
  """Susceptibilities at ``w_star`` over group-stratified training probes, group responses, and the
  simplex re-weighting toward each reference solution.

  Args:
    cfg: the study's Config.
    model: the study's Model.
    data: the study's data (``train``, ``test``, ``probes``).
    w_star: the parameters where the posterior is localised.
    references: each reference solution's numbers (``phi_counts`` is used).
    groups_fn: ``groups_fn(tokens) -> (ids, names)``.
  """
  ids, names = groups_fn(data["train"]["tokens"])
  num_groups = len(names)
  chosen = group_probes(cfg, ids, num_groups)
  probe_data = _jnp({k: v[chosen] for k, v in data["train"].items()})
  probes = jnp.asarray(data["probes"]["tokens"])
  test = _jnp(data["test"])
  counts_labels = jnp.ones(len(probes), jnp.int32)

  t0 = time.perf_counter()
  res = sus.estimate_susceptibilities(
    model.per_sample_loss,
    w_star,
    _jnp(data["train"]),
    probe_data,
    key=rng.key(cfg.run.seed, "susceptibility"),
    settings=cfg.sgld,
    eval_size=cfg.eval_size,
    observable=model.probe_observables,
    observable_data={"probes": probes, "counts_labels": counts_labels, "test": test},
  )
  seconds = time.perf_counter() - t0
  response = res.response[0, 1:]  # (2 observables, probes): φ_counts, φ_test
  se = cfg.nbeta * res.standard_error[0, 1:]
  sub_ids = ids[chosen]
  j_g = patterning.group_response(response, sub_ids, num_groups)
  se_g = np.sqrt(
    patterning.group_response(se**2, sub_ids, num_groups)
    / np.bincount(sub_ids, minlength=num_groups)
  )
  base = np.bincount(ids, minlength=num_groups) / len(ids)
  mean_phi = res.observable_means[0, 1:]
  out = {
    "group_names": names,
    "group_sizes": np.bincount(ids, minlength=num_groups).tolist(),
    "base": base.tolist(),
    "group_response": j_g.tolist(),
    "group_response_se": se_g.tolist(),
    "llc_at_w_star": float(res.llc[0]),
    "posterior_mean_phi": mean_phi.tolist(),
    "seconds": seconds,
    "probes_per_group": np.bincount(sub_ids, minlength=num_groups).tolist(),
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
      "target_delta": target.tolist(),
      "group_distribution": (base + dh).tolist(),
      "predicted_delta": (j_g @ dh).tolist(),
      "total_variation": float(0.5 * np.abs(dh).sum()),
    }
  return out


def group_probes(cfg, ids: np.ndarray, num_groups: int) -> np.ndarray:
  """The training strings used as probes: up to ``per_group`` of each group, from the stream
  ``"probe-choice"``."""
  choice = rng.numpy(cfg.run.seed, "probe-choice")
  return np.concatenate(
    [choice.permutation(np.nonzero(ids == g)[0])[: cfg.per_group] for g in range(num_groups)]
  )


def _jnp(tree):
  return {k: jnp.asarray(v) for k, v in tree.items()}


def plot(cfg, pat: dict, histories: dict, refs: dict, conditions, path: str) -> str:
  """Group responses of φ_counts (±2 s.e.), the group distributions, and the counts rate over
  training."""
  plt = plotting.plt
  fig, axes = plt.subplots(1, 3, figsize=(17, 4.6), gridspec_kw={"width_ratios": [1.3, 1.3, 1]})
  names = pat["group_names"]
  j = np.asarray(pat["group_response"])[0]
  se = np.asarray(pat["group_response_se"])[0]
  order = np.argsort(j)
  x = np.arange(len(names))
  ax = axes[0]
  ax.bar(
    x, j[order], yerr=2 * se[order], color=np.where(j[order] < 0, "C2", "C3"), alpha=0.8, capsize=2
  )
  ax.set_xticks(x, [names[i] for i in order], rotation=90, fontsize=6)
  ax.set_ylabel("dE[φ_counts]/dh  (< 0: toward counts)")
  ax.set_title(
    f"group responses at step {cfg.chi_step} (nβ = {cfg.nbeta:.0f}, ±2 s.e.)", fontsize=10
  )
  ax.grid(alpha=0.3, axis="y")
  ax = axes[1]
  width = 0.4
  base = np.asarray(pat["base"])
  for i, a in enumerate(parens.ALGORITHMS):
    tv = pat["targets"][a]["total_variation"]
    change = np.asarray(pat["targets"][a]["group_distribution"]) - base
    ax.bar(
      x + (i - 0.5) * width,
      change[order],
      width,
      label=f"toward {a} (TV {tv:.3f})",
      color=f"C{2 if a == 'counts' else 3}",
    )
  ax.axhline(0, color="black", lw=0.6)
  ax.set_xticks(x, [names[i] for i in order], rotation=90, fontsize=6)
  ax.set_ylabel("change of the group's probability")
  ax.set_title("re-weighting (same group order)", fontsize=10)
  ax.legend(fontsize=8)
  ax.grid(alpha=0.3, axis="y")
  ax = axes[2]
  colors = {"unweighted": "gray", "toward_counts": "C2", "toward_prefix": "C3"}
  for c in conditions:
    steps = np.array([h["step"] for h in histories[c]])
    rate = np.array([h["counts_rate"] for h in histories[c]], float)
    ax.plot(steps, rate, color=colors[c], lw=0.7, alpha=0.5)
    ax.plot(steps, rate.mean(1), color=colors[c], lw=2, label=c.replace("_", " "))
  for a, style in zip(parens.ALGORITHMS, ("--", ":")):
    ax.axhline(
      refs[a]["counts_rate"],
      color="black",
      ls=style,
      lw=0.8,
      label=f"reference {a} (LLC {refs[a]['llc_mean']:.1f})",
    )
  ax.set_xlabel("training step")
  ax.set_ylabel("counts rate on probes")
  ax.set_ylim(-0.03, 1.03)
  ax.set_title(f"{cfg.run.num_seeds} seeds per condition (thin: each seed)", fontsize=10)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
