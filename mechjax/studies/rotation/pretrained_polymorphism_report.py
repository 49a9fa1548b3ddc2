"""The pretrained polymorphism study's report: a verdict per site, the printed table and the figure.

How far the fit tokens determine ``R`` decides what may be read from a site. The split-half
agreement ``tr(R₁ᵀR₂)/d`` of the rotations fitted on the two halves of the fit tokens
(:func:`mechjax.align.procrustes.split_half_agreement`) is 1 for a determined ``R`` and near 0 for
a free choice. Below :data:`DETERMINED` the site's ``R`` is mostly the noise of its fit: its Haar
tests say nothing about the two models, and the report draws no Haar verdict from it.
"""

from __future__ import annotations

import math

import numpy as np

from mechjax import plotting

# The split-half agreement at and above which a site's R counts as determined by its fit tokens: the
# two halves' rotations then differ by ‖R₁ − R₂‖²_F = 2d(1 − agreement) ≤ 0.2·d, a tenth of the
# 2d that two independent Haar rotations differ by.
DETERMINED = 0.9
TRANSFERRED = ("aligned", "raw", "random")  # the vectors whose effect is over B's own vector's
HAAR_SHOWN = ("frobenius_to_identity", "signed_permutation_distance", "entry_kurtosis")
ALPHA = 0.05  # the Haar tests' level in the verdict


def fit_tokens_needed(fit_tokens: int, agreement: float, target: float = DETERMINED) -> int | None:
  """About how many fit tokens would bring the split-half agreement to ``target``: the fit's
  squared error, and with it ``1 − agreement``, falls as one over the tokens once ``R`` is nearly
  determined, so ``fit_tokens · (1 − agreement) / (1 − target)``. Far from determined
  (agreement near 0) the fall is slower, so read it as a lower bound. None when already there."""
  if agreement is None or agreement >= target:
    return None
  return int(math.ceil(fit_tokens * (1 - max(agreement, 0.0)) / (1 - target)))


def clearly_positive(effect: float, se: float | None) -> bool:
  """B's own steering vector raises log p by more than two standard errors over held-out batches
  (by more than zero when there is no standard error): only then is a ratio over it meaningful."""
  return effect > (2 * se if se is not None else 0.0)


def site_verdict(site: str, r: dict, summary: dict) -> str:
  """One site's sentence: whether R is determined, what the Haar tests say if it is, how much of
  B's own steering effect A's vector carries through R, and the held-out EV through R."""
  d, agree = summary["d_model"], r["rotation_split_half_agreement"]
  per_dim = summary["fit_tokens"] / d
  if not r["determined"]:
    need = r.get("fit_tokens_needed")
    rotation = (
      f"R not determined (split-half agreement {agree:.2f} < {DETERMINED} at {per_dim:.0f} fit "
      f"tokens per dimension; about {need:,}+ would determine it): no Haar verdict"
    )
  else:
    ps = {k: r["haar"][k]["p_value"] for k in HAAR_SHOWN}
    low = [k for k, p in ps.items() if p < ALPHA]
    rotation = f"R determined (split-half agreement {agree:.2f}), " + (
      f"not Haar-like by {', '.join(low)} (p < {ALPHA})"
      if low
      else f"Haar-random by every test (p ≥ {ALPHA})"
    )
  e, se = r["steer_effect"], r["steer_effect_se"]
  if clearly_positive(e["native"], se["native"]):
    steer = f"A's vector through R steers B {r['steer_ratio']['aligned']:.2f}× as much as B's own"
  else:
    shown = f"{e['native']:+.3f}" + (f" ± {se['native']:.3f}" if se["native"] is not None else "")
    steer = f"B's own vector has no clear effect (Δlog p {shown}): no ratio"
  ev = f"{r['aligned_ev_held_out']:.2f}" + _pm(r.get("aligned_ev_held_out_se"))
  return f"{site}: {rotation}; {steer}; held-out EV through R {ev}."


def _pm(se) -> str:
  return "" if se is None else f" ± {se:.2f}"


def verdict(summary: dict) -> list[str]:
  """The report's opening paragraphs: the answer over the sites, then one sentence per site."""
  rows = summary["sites"]
  determined = [s for s, r in rows.items() if r["determined"]]
  d, fit = summary["d_model"], summary["fit_tokens"]
  if not determined:
    need = max((r.get("fit_tokens_needed") or 0) for r in rows.values())
    head = (
      f"No site's rotation is determined by the {fit:,} fit tokens ({fit / d:.0f} per dimension "
      f"of d = {d}): the fits are mostly noise, and whether the two models differ by a random or a "
      f"privileged rotation cannot be read from this run. Pass more fit windows (at least about "
      f"{need:,} fit tokens in all, e.g. --fit_windows={-(-need // summary['seq_len'])})."
    )
  else:
    haar_like = [
      s for s in determined if all(rows[s]["haar"][k]["p_value"] >= ALPHA for k in HAAR_SHOWN)
    ]
    head = (
      f"R is determined at {len(determined)} of {len(rows)} sites; at {len(haar_like)} of them it "
      "looks Haar-random, at the others it is not."
    )
  return [head] + [site_verdict(s, r, summary) for s, r in rows.items()]


def report(summary: dict) -> list[str]:
  """One line per site: how far R is determined, explained variance raw → through R, ‖R − I‖_F
  against √(2d), the Haar p-values (of determined sites), and the steering ratios (where B's own
  vector has a clear effect)."""
  m = summary["models"]
  lines = [
    f"  A: {m['a']['family']} ({m['a']['layers']} layers), B: {m['b']['family']} "
    f"({m['b']['layers']} layers); d = {summary['d_model']}, √(2d) = {summary['sqrt_2d']:.2f}; "
    f"{summary['fit_tokens']:,} fit ({summary['fit_tokens'] / summary['d_model']:.0f} per "
    f"dimension) and {summary['held_out_tokens']:,} held-out tokens"
  ]
  fmt = lambda x: "  n/a" if x is None else f"{x:5.2f}"
  for site, r in summary["sites"].items():
    rank = r["cross_covariance_rank"]
    if rank < summary["d_model"]:
      lines.append(f"  {site}: the cross-covariance has rank {rank} < d; R is partly arbitrary")
    if r["determined"]:
      haar = "Haar p (‖R−I‖, perm, kurt) " + " ".join(
        f"{r['haar'][k]['p_value']:.2f}" for k in HAAR_SHOWN
      )
    else:
      haar = "R not determined: no Haar verdict"
    s = r["steer_ratio"]
    steer = (
      f"steer aligned {fmt(s['aligned'])} raw {fmt(s['raw'])} random {fmt(s['random'])}"
      if s["aligned"] is not None
      else f"B's own steering effect {r['steer_effect']['native']:+.3f} is not clearly positive"
    )
    lines.append(
      f"  {site:<13} split-half {r['rotation_split_half_agreement']:.2f} | EV "
      f"{r['identity_ev_held_out']:+.3f} → {r['aligned_ev_held_out']:.3f} | ‖R−I‖ "
      f"{r['frobenius_to_identity']:.2f} | {haar} | {steer}"
    )
  return lines


def plot(summary: dict, path: str) -> str:
  """Four panels (2 × 2) over the sites, sites whose R is not determined shaded grey in each: the
  split-half agreement against :data:`DETERMINED`; the held-out EV raw and through R; ‖R − I‖_F
  minus √(2d) with the Haar null's mean ± 2 sd; and each vector's steering effect on B."""
  sites, rows = list(summary["sites"]), list(summary["sites"].values())
  x = np.arange(len(sites))
  fig, grid_axes = plotting.plt.subplots(
    2, 2, figsize=(10, 7.2)
  )  # 2 × 2: legible beside the verdict
  axes = grid_axes.ravel()
  agree, ev, frob, steer = axes
  agree.plot(x, [r["rotation_split_half_agreement"] for r in rows], "o-", c="k")
  agree.axhline(DETERMINED, ls="--", c="#2e7d32", lw=1, label=f"determined ({DETERMINED})")
  agree.set_ylim(min(-0.1, *(r["rotation_split_half_agreement"] for r in rows)), 1.05)
  agree.set_ylabel("R's split-half agreement")
  agree.set_title(
    f"{summary['fit_tokens'] / summary['d_model']:.0f} fit tokens per dim.", fontsize=9
  )
  for key, label in (("identity_ev_held_out", "raw"), ("aligned_ev_held_out", "through R")):
    se = [r.get(f"{key}_se") or 0.0 for r in rows]
    ev.errorbar(x, [r[key] for r in rows], yerr=se, fmt="o-", capsize=2, label=label)
  ev.set_ylabel("explained variance of B (held out)")
  tests = [r["haar"]["frobenius_to_identity"] for r in rows]
  root = summary["sqrt_2d"]
  mean, sd = (np.array([t[k] for t in tests]) for k in ("null_mean", "null_sd"))
  frob.fill_between(
    x, mean - root - 2 * sd, mean - root + 2 * sd, alpha=0.3, label="Haar null ± 2 sd"
  )
  frob.axhline(0, ls="--", c="k", lw=1, label="√(2d), Haar's mean")
  frob.plot(x, [t["value"] - root for t in tests], "o-", label="R")
  frob.set_ylabel("‖R − I‖_F − √(2d)")
  for kind in ("native", *TRANSFERRED):
    value = [r["steer_effect"][kind] for r in rows]
    se = [r["steer_effect_se"][kind] or 0.0 for r in rows]
    label = "B's own" if kind == "native" else kind
    steer.errorbar(x, value, yerr=se, fmt="o-", capsize=2, label=label, ms=4)
  steer.axhline(0, c="#555", lw=0.6)
  steer.set_ylabel(f"Δ log p({summary.get('steer_token_text', 'token')!r}) in B")
  for ax in axes:
    for i, r in enumerate(rows):
      if not r["determined"]:
        ax.axvspan(i - 0.5, i + 0.5, color="#bbb", alpha=0.35, lw=0)
    ax.legend(fontsize=7)
    ax.set_xticks(x, sites, rotation=45, ha="right", fontsize=7)
  if not all(r["determined"] for r in rows):
    fig.suptitle("grey: sites whose R is not determined by the fit tokens", fontsize=9)
  fig.tight_layout()
  return plotting.save(fig, path)
