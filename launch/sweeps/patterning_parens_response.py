"""The parenthesis patterning prediction re-examined (docs/results.md, "Patterning: is the predicted
Δλ right?"): the re-weightings of the study's own SGLD settings, predicted and re-measured at more
draws, another step size, another localization and a larger SGLD batch, each scaled to total
variations 0.2 %, 0.8 % and 3 % (the last four settings at 0.8 % only), without retraining.

    python -m launch.sweep --sweep=launch/sweeps/patterning_parens_response.py \\
        --root=sweeps/patterning_parens_response
"""

EXPERIMENT = "experiments.patterning_parens"
SHARE = {"neg_prefix_fraction": 0.1}  # the share of the README's patterning row
ALL_TV, STUDY_TV = "0.002,0.008,0.03", "0.008"


def get_sweep():
  return [
    {**SHARE, "draws": 500, "total_variations": ALL_TV},
    {**SHARE, "draws": 2000, "total_variations": ALL_TV},
    {**SHARE, "draws": 2000, "sgld_step_size": 2e-4, "total_variations": STUDY_TV},
    {**SHARE, "draws": 2000, "localization": 200.0, "total_variations": STUDY_TV},
    {**SHARE, "draws": 8000, "total_variations": STUDY_TV},
    # Minibatch gradient noise: eight times the batch, at the study's own 500 draws.
    {**SHARE, "draws": 500, "sgld_batch_size": 512, "total_variations": STUDY_TV},
  ]


def FIGURE(root, rows):  # noqa: N802 (the sweep file's hook is named in capitals)
  """``ROOT/results.png``: left, the measured against the predicted change of λ_counts − λ_prefix
  at each setting's 0.8 % re-weightings (bars ±2 s.e. over chains; dashed: equality); right, the
  measured change (bars) and the prediction (dashed) against the total variation, per setting that
  scanned it."""
  import json
  import os

  import numpy as np

  from mechjax import plotting

  runs = []
  for r in rows:
    if r["state"] == "done":
      with (
        open(os.path.join(root, r["id"], "summary.json")) as f,
        open(os.path.join(root, r["id"], "config.json")) as c,
      ):
        runs.append({**json.load(f), "flags": json.load(c)})
  if not runs:
    return None
  fig, (left, right) = plotting.plt.subplots(1, 2, figsize=(12, 4.6))
  markers = {"toward_counts": "o", "toward_prefix": "^", "random": "s"}
  for i, s in enumerate(runs):
    g = s["flags"]
    label = (
      f"{g['draws']} draws, ε = {g['sgld_step_size']:g}, γ = {g['localization']:g}, batch "
      f"{g['sgld_batch_size']}"
    )
    color = f"C{i}"
    by_direction = {}
    for name, row in s["predicted_vs_measured"].items():
      direction, tv = name.split("@")
      gap = row["dllc_counts_minus_prefix"]
      by_direction.setdefault(direction, []).append((s["total_variation"][name], gap))
      if float(tv) == 0.008:
        left.errorbar(
          gap["predicted"], gap["measured"], 2 * gap["se"], fmt=markers[direction], color=color,
          label=label if direction == "toward_counts" else None,
        )  # fmt: skip
    for direction, pts in by_direction.items():
      if len(pts) < 2:
        continue
      pts.sort(key=lambda p: p[0])
      tvs = np.array([p[0] for p in pts])
      right.errorbar(
        tvs, [p[1]["measured"] for p in pts], [2 * p[1]["se"] for p in pts],
        fmt=markers[direction] + "-", color=color, label=f"{direction}, {g['draws']} draws",
      )  # fmt: skip
      right.plot(tvs, [p[1]["predicted"] for p in pts], "--", color=color, lw=0.8)
  lims = np.array(left.get_xlim() + left.get_ylim())
  left.plot([lims.min(), lims.max()], [lims.min(), lims.max()], color="black", lw=0.6, ls="--")
  left.axhline(0, color="gray", lw=0.5)
  plotting.label_panel(
    left, "0.8 % re-weightings (o counts, △ prefix, □ random)", "measured Δ(λ_c − λ_p), ±2 s.e.",
    "predicted Δ(λ_c − λ_p) = nβ·χ·dp", legend=7,
  )  # fmt: skip
  right.axhline(0, color="gray", lw=0.5)
  plotting.label_panel(
    right, "the response against the size of the re-weighting (dashed: predicted)",
    "Δ(λ_c − λ_p)", "total variation", legend=7,
  )  # fmt: skip
  return plotting.save(fig, os.path.join(root, "results.png"))
