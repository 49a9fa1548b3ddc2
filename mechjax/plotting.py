"""Figures shared by the experiments (matplotlib, Agg backend: no display needed).

matplotlib is imported when the first figure is made (:func:`pyplot`; ``plotting.plt`` is the same
module): importing it takes about 0.7 s, which a command that stops before its figures (a bad flag,
a finished run) need not pay."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np


@functools.cache
def pyplot():
  """``matplotlib.pyplot`` on the Agg backend, imported on the first call."""
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  return plt


def __getattr__(name: str):
  if name == "plt":  # plotting.plt: matplotlib.pyplot, imported on first use
    return pyplot()
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def save(fig, path: str) -> str:
  """Lays ``fig`` out tightly, writes it to ``path`` (110 dpi) and closes it. Returns ``path``."""
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  pyplot().close(fig)
  return path


@dataclasses.dataclass
class Curve:
  """``y_TxS``: one value per logged point ``x_T`` and seed; drawn as the seed mean with a ±1 sd
  band."""

  x_T: np.ndarray
  y_TxS: np.ndarray
  label: str


def history_curve(history: list[dict], key: str, label: str, x_scale: float = 1) -> Curve:
  """The :class:`Curve` of the metric ``key`` over a run's logged rows ``history`` (one value per
  seed in each), at the logged steps times ``x_scale`` (the batch size turns steps into samples)."""
  x_T = np.array([r["step"] for r in history]) * x_scale
  return Curve(x_T, np.array([r[key] for r in history], dtype=float), label)


def mark_steps(ax, marks: list[tuple[int | None, str]], text_y: float | None = None) -> None:
  """A dashed black vertical line at the step of each ``(step, label)`` of ``marks`` (a None step is
  skipped); with ``text_y``, ``"<label> / step <step>"`` is written on two lines left of the line,
  at that height."""
  for step, label in marks:
    if step is not None:
      ax.axvline(step, color="k", ls="--", lw=0.8)
      if text_y is not None:
        ax.text(step, text_y, f"{label} \nstep {step} ", fontsize=8, ha="right")


def label_panel(ax, title: str, ylabel: str, xlabel: str = "", grid: str = "both", legend=7):
  """The panel style of the multi-panel figures: a title (font size 10), axis labels, a light grid
  on ``grid`` (``"both"``, ``"x"``, ``"y"``; ``""``: none) and a legend of font size ``legend``
  (None: none)."""
  ax.set_title(title, fontsize=10)
  ax.set_ylabel(ylabel)
  if xlabel:
    ax.set_xlabel(xlabel)
  if grid:
    ax.grid(alpha=0.3, axis=grid)
  if legend:
    ax.legend(fontsize=legend)


def errorbar_floored(ax, x, mean, sd, floor: float, *, color, label, floor_label=None, **style):
  """Points ``mean`` at ``x`` with error bars ``± sd`` where ``mean ≥ floor``, and the points below
  ``floor`` as triangles on it (labelled ``floor_label``), so that the axis can stop at ``floor``.
  ``style`` goes to :meth:`~matplotlib.axes.Axes.errorbar` (``ls``, ``ms``, ``capsize``, …)."""
  x, mean, sd = np.asarray(x), np.asarray(mean), np.asarray(sd)
  shown = mean >= floor
  ax.errorbar(x[shown], mean[shown], yerr=sd[shown], fmt="o", label=label, color=color, **style)
  if (~shown).any():
    ax.plot(x[~shown], np.full((~shown).sum(), floor), "v", ms=6, color=color, label=floor_label)


def share_ylim(axes, bottom: float | None = None) -> None:
  """Gives every axis of ``axes`` the highest upper y-limit among them, and ``bottom`` as the lower
  one when it is given (else each keeps its own)."""
  top = max(a.get_ylim()[1] for a in axes)
  for a in axes:
    a.set_ylim(bottom, top)


def curves_figure(
  panels: list[tuple[str, list[Curve]]],
  path: str,
  *,
  ylabel: str,
  xlabel: str = "training samples",
  target: float | None = None,
) -> str:
  """One panel per ``(title, curves)``; mean over seeds with a ±1 sd band. Returns ``path``."""
  fig, axes = pyplot().subplots(
    1, len(panels), figsize=(4.8 * len(panels), 3.8), squeeze=False, sharey=True
  )
  for ax, (title, curves) in zip(axes[0], panels):
    for c in curves:
      y = np.atleast_2d(np.asarray(c.y_TxS, dtype=float).T).T
      mean, sd = np.nanmean(y, axis=1), np.nanstd(y, axis=1)
      (line,) = ax.plot(c.x_T, mean, label=c.label, lw=1.6)
      ax.fill_between(c.x_T, mean - sd, mean + sd, color=line.get_color(), alpha=0.2, lw=0)
    if target is not None:
      ax.axhline(target, color="gray", ls=":", lw=1, label=f"target {target:g}")
    ax.axhline(0.5, color="black", lw=0.6, alpha=0.4)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
  axes[0][0].set_ylabel(ylabel)
  return save(fig, path)


def loglog_fit_figure(
  x: np.ndarray,
  y: np.ndarray,
  fit_exponent: float,
  fit_prefactor: float,
  path: str,
  *,
  xlabel: str,
  ylabel: str,
  title: str,
  scatter: list[tuple[np.ndarray, np.ndarray]] | None = None,
  label: str = "median over seeds",
) -> str:
  """Log-log points with a fitted power law ``y = prefactor · x^exponent``. Returns ``path``."""
  fig, ax = pyplot().subplots(figsize=(4.8, 3.8))
  if scatter:
    for xs, ys in scatter:
      ax.scatter(xs, ys, s=8, color="gray", alpha=0.4)
  ax.loglog(x, y, "o", color="C0", label=label)
  grid = np.geomspace(x.min(), x.max(), 50)
  ax.loglog(
    grid,
    fit_prefactor * grid**fit_exponent,
    "-",
    color="C1",
    label=f"fit: exponent {fit_exponent:.2f}",
  )
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=8)
  return save(fig, path)


def bars_figure(
  panels: list[tuple[str, list[str], dict[str, list[float]]]],
  path: str,
  *,
  ylabel: str,
  hlines: tuple[float, ...] = (0.0,),
  points: bool = False,
) -> str:
  """Grouped bars: one panel per ``(title, categories, {series label: one value per category})``.

  With ``points``, each value may instead be a list (one point per repetition, e.g. per seed pair),
  drawn as dots over a bar at their mean. ``None`` values are skipped. Returns ``path``.
  """
  fig, axes = pyplot().subplots(
    1,
    len(panels),
    figsize=(max(4.8, 1.1 * max(len(p[1]) for p in panels)) * len(panels), 3.8),
    squeeze=False,
    sharey=True,
  )
  for ax, (title, categories, series) in zip(axes[0], panels):
    width = 0.8 / max(len(series), 1)
    for s, (label, values) in enumerate(series.items()):
      x = np.arange(len(categories)) + (s - (len(series) - 1) / 2) * width
      groups = [np.atleast_1d(np.asarray([] if v is None else v, dtype=float)) for v in values]
      means = [np.nanmean(g) if g.size else np.nan for g in groups]
      ax.bar(x, means, width * 0.9, label=label, color=f"C{s}", alpha=0.5 if points else 0.85)
      if points:
        for xi, g in zip(x, groups):
          ax.plot(np.full(g.shape, xi), g, ".", color=f"C{s}", ms=4)
    for h in hlines:
      ax.axhline(h, color="black", lw=0.7, ls=":" if h else "-", alpha=0.6)
    ax.set_xticks(np.arange(len(categories)))
    ax.set_xticklabels(categories, rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="best")
  axes[0][0].set_ylabel(ylabel)
  return save(fig, path)


def matrices_figure(
  panels: list[tuple[str, np.ndarray]], path: str, *, vmax: float | None = None
) -> str:
  """Heatmaps of matrices side by side (diverging colours, shared scale). Returns ``path``."""
  vmax = vmax or max(float(np.max(np.abs(m))) for _, m in panels)
  fig, axes = pyplot().subplots(1, len(panels), figsize=(3.6 * len(panels), 3.6), squeeze=False)
  for ax, (title, m) in zip(axes[0], panels):
    im = ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
  fig.colorbar(im, ax=list(axes[0]), shrink=0.8)
  fig.savefig(path, dpi=110)
  pyplot().close(fig)
  return path
