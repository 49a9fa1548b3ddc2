"""The report of the polymorphism study: the per-site table (``table.md``) and the figures."""

from __future__ import annotations

import os

import numpy as np

from mechjax import plotting
from mechjax import rng
from mechjax.align import haar
from mechjax.studies.polymorphism_analysis import HAAR_STATS

TABLE_COLUMNS = (
  ("sae_ev_within", "SAE EV within", "{:.3f}"),
  ("sae_ev_raw", "SAE EV cross, raw", "{:.3f}"),
  ("sae_ev_aligned", "SAE EV cross, via sR", "{:.3f}"),
  ("decoder_max_cos_raw", "decoder max cos, raw", "{:.3f}"),
  ("decoder_max_cos_aligned", "decoder max cos, via R", "{:.3f}"),
  ("decoder_max_cos_random_rotation", "decoder max cos, random Q", "{:.3f}"),
  ("aligned_ev_held_out", "EV of s·x·R", "{:.3f}"),
  ("rotation_only_ev_held_out", "EV of x·R", "{:.3f}"),
  ("rotation_split_half_agreement", "R split-half tr/d", "{:.3f}"),
  ("cka", "CKA", "{:.3f}"),
  ("procrustes_distance", "Procrustes dist.", "{:.3f}"),
  ("steer_ratio_aligned", "steer ratio, sR", "{:.2f}"),
  ("steer_ratio_raw", "steer ratio, none", "{:.2f}"),
  ("steer_ratio_random", "steer ratio, random", "{:.2f}"),
  ("effective_dimension", "eff. dim", "{:.1f}"),
  ("min_cross_covariance_rank", "rank XᵀY", "{}"),
  ("privileged_basis_seeds", "seeds w/ privileged basis", "{:.2f}"),
  ("haar_basis_rejections", "pairs rejecting Haar", "{:.2f}"),
)


def table_markdown(opt_summary: dict) -> str:
  """The per-site table of one optimizer as markdown (means over seed pairs and transfer
  directions)."""
  head = "| site | " + " | ".join(c[1] for c in TABLE_COLUMNS) + " |"
  rule = "|" + "---|" * (len(TABLE_COLUMNS) + 1)
  rows = []
  for site, m in opt_summary["sites"].items():
    cells = [("n/a" if m[key] is None else fmt.format(m[key])) for key, _, fmt in TABLE_COLUMNS]
    rows.append(f"| {site} | " + " | ".join(cells) + " |")
  return "\n".join([head, rule, *rows])


def tables_markdown(summary: dict) -> str:
  """Every optimizer's table under its own heading: ``table.md``."""
  return "\n\n".join(
    f"### {name}\n\n{table_markdown(s)}" for name, s in summary["optimizers"].items()
  )


def _assignment_order(r: np.ndarray) -> np.ndarray:
  """Column order that puts each row's matched column (linear assignment on ``|R|``) on the
  diagonal."""
  from scipy import optimize  # local: only the figures need it

  rows, cols = optimize.linear_sum_assignment(-np.abs(r))
  return cols[np.argsort(rows)]


def captions(cfg) -> dict[str, str]:
  """One line per figure: what its curves, bars and bands are."""
  return {
    "training.png": f"Test accuracy of each head during training, per optimizer: lines are the "
    f"means over {cfg.run.num_seeds} seeds, shaded bands ±1 sd over seeds.",
    "dictionary_transfer.png": "Held-out explained variance of an SAE at each site: on its own "
    "seed (the ceiling), moved to another seed as is, and moved through the fitted rotation sR; "
    "with the best |cos| between the raw decoders. Bars are means over seeds (within) or seed "
    "pairs (the rest).",
    "haar_tests.png": "p-values per site: the kurtosis test for a privileged basis of the "
    "activations, and each Haar test of the fitted rotation; bars are medians over seeds or seed "
    "pairs, the dotted line is 0.05.",
    "steering_transfer.png": "A steering vector's effect in another seed, over that seed's own "
    "vector: moved through sR, moved as is, and a random vector of the same norm. Bars are means "
    "over seed pairs and directions.",
    "rotation_matrices.png": "The fitted rotation from seed 0 to seed 1 at the last site, columns "
    "matched to rows: a privileged basis shows as a bright signed diagonal. A Haar-random rotation "
    "with the same matching is beside it for reference.",
  }


def plot_all(cfg, summary: dict, histories: dict, rotations: dict, figures: str) -> list[str]:
  """Writes the five figures into the folder ``figures``; returns their paths."""
  written = []
  opts = list(summary["optimizers"])
  sites = summary["sites"]

  # 1. Training curves: every head's test accuracy, one curve per optimizer.
  panels = []
  for head in ("token", "depth", "valid"):
    curves = [
      plotting.Curve(
        np.array([r["step"] for r in histories[o]]),
        np.array([r[f"test_{head}_acc"] for r in histories[o]], dtype=float),
        o,
      )
      for o in opts
    ]
    panels.append((f"{head} head", curves))
  written.append(
    plotting.curves_figure(
      panels, os.path.join(figures, "training.png"), ylabel="test accuracy", xlabel="steps"
    )
  )

  # 2. Dictionary transfer: within-seed, raw cross-seed and rotated cross-seed EV on held-out data.
  ev = [
    (
      o,
      sites,
      {
        label: [summary["optimizers"][o]["sites"][s][key] for s in sites]
        for key, label in (
          ("sae_ev_within", "within seed (ceiling)"),
          ("sae_ev_raw", "cross-seed, raw"),
          ("sae_ev_aligned", "cross-seed, through sR"),
          ("decoder_max_cos_raw", "decoder max |cos| (raw)"),
        )
      },
    )
    for o in opts
  ]
  written.append(
    plotting.bars_figure(
      ev,
      os.path.join(figures, "dictionary_transfer.png"),
      ylabel="held-out explained variance / cosine",
      hlines=(0.0, 1.0),
    )
  )

  # 3. Haar tests: p-values of every seed pair, per statistic, at each site.
  pv = []
  for o in opts:
    pairs_at = lambda s: summary["optimizers"][o]["sites"][s]["haar"]
    series = {
      "privileged basis of activations (kurtosis)": [
        summary["optimizers"][o]["sites"][s]["basis_p_median"] for s in sites
      ]
    }
    series.update(
      {f"R: {stat}": [pairs_at(s)[stat]["p_median"] for s in sites] for stat in HAAR_STATS}
    )
    pv.append((f"{o}: p-values (median over seeds / pairs)", sites, series))
  written.append(
    plotting.bars_figure(
      pv, os.path.join(figures, "haar_tests.png"), ylabel="p-value", hlines=(0.0, 0.05)
    )
  )

  # 4. Steering transfer: effect in the target model relative to the target's own vector.
  st = [
    (
      o,
      sites,
      {
        label: [summary["optimizers"][o]["sites"][s][key] for s in sites]
        for key, label in (
          ("steer_ratio_aligned", "source vector through sR"),
          ("steer_ratio_raw", "source vector, no R"),
          ("steer_ratio_random", "random vector, same norm"),
        )
      },
    )
    for o in opts
  ]
  written.append(
    plotting.bars_figure(
      st,
      os.path.join(figures, "steering_transfer.png"),
      ylabel="effect / target's own vector",
      hlines=(0.0, 1.0),
    )
  )

  # 5. The fitted rotation between seeds 0 and 1 at the last site, columns matched to rows: a
  #    privileged basis shows up as a bright (signed) diagonal; a Haar rotation as noise. A Haar
  #    sample is shown for reference.
  site = sites[-1]
  mats = []
  for o in opts:
    r = rotations.get(f"{o}/{site}/0_1")
    if r is not None:
      mats.append((f"{o}: R (seeds 0→1, {site})", r[:, _assignment_order(r)]))
  q = np.asarray(haar.haar_orthogonal(rng.key(cfg.run.seed, "figure-haar-sample"), cfg.d_model))
  mats.append(("Haar sample, same matching", q[:, _assignment_order(q)]))
  written.append(plotting.matrices_figure(mats, os.path.join(figures, "rotation_matrices.png")))
  return written
