"""The report of the polymorphism study: the per-site table (``table.md``) and the figures."""

from __future__ import annotations

import os

import numpy as np

from mechjax import plotting
from mechjax import report
from mechjax import rng
from mechjax.align import haar
from mechjax.studies.rotation.polymorphism_analysis import HAAR_STATS

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
  rows = [
    [site, *("n/a" if m[key] is None else fmt.format(m[key]) for key, _, fmt in TABLE_COLUMNS)]
    for site, m in opt_summary["sites"].items()
  ]
  return report.markdown_table(["site", *(c[1] for c in TABLE_COLUMNS)], rows)


def tables_markdown(summary: dict) -> str:
  """Every optimizer's table under its own heading: ``table.md``."""
  return "\n\n".join(
    f"### {name}\n\n{table_markdown(s)}" for name, s in summary["optimizers"].items()
  )


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


# The bar figures' series: {label: the key of a site's summary, dotted (report.flatten) if nested}.
DICTIONARY = {
  "within seed (ceiling)": "sae_ev_within",
  "cross-seed, raw": "sae_ev_raw",
  "cross-seed, through sR": "sae_ev_aligned",
  "decoder max |cos| (raw)": "decoder_max_cos_raw",
}
P_VALUES = {"privileged basis of activations (kurtosis)": "basis_p_median"} | {
  f"R: {stat}": f"haar.{stat}.p_median" for stat in HAAR_STATS
}
STEERING = {
  "source vector through sR": "steer_ratio_aligned",
  "source vector, no R": "steer_ratio_raw",
  "random vector, same norm": "steer_ratio_random",
}


def plot_all(cfg, summary: dict, histories: dict, rotations: dict, figures: str) -> list[str]:
  """Writes the five figures into the folder ``figures``; returns their paths."""
  opts, sites = summary["optimizers"], summary["sites"]

  accuracy = lambda o, head: plotting.history_curve(histories[o], f"test_{head}_acc", o)
  panels = [(f"{h} head", [accuracy(o, h) for o in opts]) for h in ("token", "depth", "valid")]
  path = lambda name: os.path.join(figures, name)
  written = [
    plotting.curves_figure(panels, path("training.png"), ylabel="test accuracy", xlabel="steps")
  ]
  for name, title, series, ylabel, hlines in (
    ("dictionary_transfer.png", "{}", DICTIONARY, "held-out explained variance / cosine", (0, 1)),
    ("haar_tests.png", "{}: p-values (median over seeds / pairs)", P_VALUES, "p-value", (0, 0.05)),
    ("steering_transfer.png", "{}", STEERING, "effect / target's own vector", (0, 1)),
  ):
    by_label = lambda s: {
      label: [report.flatten(s["sites"][site])[key] for site in sites]
      for label, key in series.items()
    }
    panels = [(title.format(o), sites, by_label(s)) for o, s in opts.items()]
    written.append(plotting.bars_figure(panels, path(name), ylabel=ylabel, hlines=hlines))
  # The fitted rotation from seed 0 to seed 1 at the last site, and a Haar sample (see captions).
  site = sites[-1]
  mats = []
  for o in opts:
    r = rotations.get(f"{o}/{site}/0_1")
    if r is not None:
      mats.append((f"{o}: R (seeds 0→1, {site})", r[:, haar.nearest_signed_permutation(r)]))
  q = np.asarray(haar.haar_orthogonal(rng.key(cfg.run.seed, "figure-haar-sample"), cfg.d_model))
  mats.append(("Haar sample, same matching", q[:, haar.nearest_signed_permutation(q)]))
  written.append(plotting.matrices_figure(mats, path("rotation_matrices.png")))
  return written
