"""The pretrained LLC study's report: its verdict, the printed table, and the two figures.

* :func:`verdict`: what ``report.html`` opens with: the loss at ``w*`` against the uniform loss
  (does the checkpoint fit its corpus?), whether the chains mixed, the whole model's LLC with its
  error, the negative LLCs and what they usually mean, and the run's size and time.
* :func:`llc_figure`: every restriction's LLC with its standard error over chains, as a layer ×
  head grid with the MLPs beside it, and the other restrictions (the whole model, unions) apart.
* :func:`chi_figure`: χ of every probe token, each row scaled by its own largest ``|χ|`` (printed
  beside it), with the row's top tokens as text.
* :func:`report`: the lines the command line prints; the report keeps them, collapsed.
"""

from __future__ import annotations

import math
import re

import numpy as np

from mechjax import plotting
from mechjax.slt import progress

_HEAD = re.compile(r"^(?:attn_(\d+)\.head_(\d+)|l(\d+)h(\d+))$")
_MLP = re.compile(r"^(?:mlp_(\d+)|l(\d+) mlp)$")
FITS = 0.9  # a loss at w* above this share of the uniform loss is "does not fit the corpus"


def grid(names) -> tuple[dict, dict, list]:
  """``({(layer, head): name}, {layer: name}, [other names])``: the restrictions that are one
  attention head (``attn_0.head_3`` or ``l0h3``), one MLP (``mlp_2`` or ``l2 mlp``), and the rest
  (the whole model, unions, embeddings), in order."""
  heads, mlps, others = {}, {}, []
  for name in names:
    h, m = _HEAD.match(name), _MLP.match(name)
    if h:
      layer, head = (int(g) for g in h.groups() if g is not None)
      heads[layer, head] = name
    elif m:
      mlps[int(next(g for g in m.groups() if g is not None))] = name
    else:
      others.append(name)
  return heads, mlps, others


def unjudged(summary: dict) -> str:
  """Why a run's mixing cannot be judged: one chain (no spread over chains), or too few evaluated
  draws per chain for the split-chain R̂ and ESS."""
  if summary.get("chains", 2) < 2:
    return "one chain: mixing cannot be judged (no standard error, R̂ or ESS)"
  return (
    f"{summary.get('evaluated_draws', 'too few')} evaluated draws per chain: mixing cannot be "
    "judged (R̂ and ESS need more)"
  )


def negative(c: dict) -> bool:
  """A restriction whose LLC is below zero by more than two standard errors over chains (or below
  zero at all, without a standard error)."""
  se = c.get("llc_se")
  return c["llc"] < 0 and (se is None or c["llc"] < -2 * se)


def _llc(c: dict, digits: int = 3) -> str:
  se = c.get("llc_se")
  return f"{c['llc']:.{digits}g}" + ("" if se is None else f" ± {se:.2g}")


def verdict(summary: dict) -> list[str]:
  """The report's opening paragraphs (module docstring)."""
  m, comps = summary["model"], summary["components"]
  out = []
  loss, uniform = summary.get("loss_star"), summary.get("uniform_loss")
  if loss is not None and uniform:
    fit = (
      "the checkpoint predicts this corpus far better than chance"
      if loss < FITS * uniform
      else "close to chance: the checkpoint does not fit this corpus (random or barely trained "
      "weights, or a corpus made with another tokenizer), so its LLC describes a point that is "
      "not a trained minimum"
    )
    out.append(
      f"Loss at w*: {loss:.3f} nats per token on the {summary.get('eval_windows', '')} "
      f"evaluation windows, against {uniform:.3f} for a uniform guess over the "
      f"{m.get('vocab_size', 0):,}-token vocabulary: {fit}."
    )
  mixing = [c["mixing"] for c in comps.values()]
  if all(x["rhat_max"] is None for x in mixing):
    out.append(f"Mixing: {unjudged(summary)}. Read the LLCs and χ as a smoke test, not a result.")
  else:
    failing = max(x["share_failing"] for x in mixing)
    worst = max(comps, key=lambda n: comps[n]["mixing"]["share_failing"])
    if failing > 0:
      out.append(
        f"Mixing: the chains did not mix. In {worst}, {100 * failing:.0f}% of the probe tokens' χ "
        "fail R̂ ≤ 1.01 or ESS ≥ 100 per chain; the standard errors, and the share of tokens "
        "they resolve, are not reliable until the chains mix (more draws or burn-in, a smaller "
        "step size)."
      )
    else:
      out.append("Mixing: every restriction's χ passes R̂ ≤ 1.01 and ESS ≥ 100 per chain.")
  if "all" in comps:
    se = comps["all"].get("llc_se")
    out.append(
      f"The whole model's LLC is {_llc(comps['all'])}"
      + (
        " (the ± is one standard error over chains)."
        if se is not None
        else " (one chain: no error)."
      )
    )
  below = [n for n in comps if negative(comps[n])]
  if below:
    shown = ", ".join(below[:6]) + (f" and {len(below) - 6} more" if len(below) > 6 else "")
    beyond = (
      "beyond two standard errors"
      if any(comps[n].get("llc_se") is not None for n in below)
      else "(with one chain, no standard error says by how much)"
    )
    out.append(
      f"{len(below)} of {len(comps)} restrictions have an LLC below zero {beyond} "
      f"({shown}; marked in the figure). A negative LLC is not an estimate of λ: the "
      "chains found lower loss than at w*, which usually means w* is not a local minimum of the "
      "loss on these windows (a checkpoint mid-training, or too few windows), or that too few "
      "draws were evaluated for the mean to settle."
    )
  seconds = (summary.get("seconds") or {}).get("total")
  took = f", in {progress.duration(seconds)}" if seconds else ""
  out.append(
    f"The run: {_count(summary.get('chains'), 'chain')} × {summary.get('draws', '?')} draws "
    f"({summary.get('evaluated_draws', '?')} evaluated) for each of {len(comps)} restrictions of "
    f"a {m['parameters']:,}-parameter {m['family']} model{took}."
  )
  return out


def _count(n, noun: str) -> str:
  return f"{n if n is not None else '?'} {noun}{'' if n == 1 else 's'}"


def report(summary: dict) -> list[str]:
  """The model, nβ, L(w*), and per restriction its LLC ± its standard error, how many probe tokens
  the chains resolve and whether they mixed; negative LLCs are marked."""
  m = summary["model"]
  lines = [
    f"  {m['family']}: {m['layers']} layers, d_model {m['d_model']}, {m['parameters']:,} "
    f"parameters; nβ = {summary['nbeta']:.1f}, {summary['probe_tokens']} probe tokens"
    + (f"; L(w*) = {summary['loss_star']:.3f}" if summary.get("loss_star") is not None else "")
  ]
  for name, c in summary["components"].items():
    if c["mixing"]["rhat_max"] is None:
      spread = unjudged(summary)
    else:
      spread = (
        f"|χ| > 2 s.e. for {100 * c['resolved_fraction']:.0f}% of tokens | R̂ ≤ "
        f"{c['mixing']['rhat_max']:.3f}, {100 * c['mixing']['share_failing']:.0f}% of tokens fail "
        "R̂ or ESS"
      )
    flag = " (negative)" if negative(c) else ""
    lines.append(f"  {name:<16} LLC {_llc(c):>16}{flag} | mean χ {c['chi_mean']:+.3g} | {spread}")
  return lines


def llc_figure(summary: dict, path: str) -> str:
  """Every restriction's LLC ± one standard error over chains (module docstring); a restriction
  whose LLC is negative beyond two standard errors is drawn in red."""
  comps = summary["components"]
  heads, mlps, others = grid(comps)
  layers = sorted({layer for layer, _ in heads} | set(mlps))
  rows = max(1, len(layers))
  fig, axes = plotting.plt.subplots(
    rows + 1,
    2,
    figsize=(11, 1.6 + 1.35 * rows),
    gridspec_kw={"width_ratios": [4, 1], "height_ratios": [1.3] + [1] * rows},
    squeeze=False,
  )

  def bars(ax, names, labels):
    x = np.arange(len(names))
    value = np.array([comps[n]["llc"] for n in names], float)
    se = np.array([comps[n].get("llc_se") or 0.0 for n in names], float)
    colour = ["#c62828" if negative(comps[n]) else "#1565c0" for n in names]
    ax.bar(x, value, yerr=se, color=colour, alpha=0.85, capsize=2, ecolor="#333")
    ax.axhline(0, color="#555", lw=0.6)
    ax.set_xticks(x, labels, fontsize=7)
    ax.tick_params(axis="y", labelsize=7)

  top, key = axes[0, 0], axes[0, 1]
  if others:
    bars(top, others, others)
  top.set_title("LLC ± s.e. over chains: whole model and other restrictions", fontsize=9)
  key.axis("off")
  key.text(0, 0.7, "blue: LLC\nred: negative beyond 2 s.e.", fontsize=7, va="top")
  head_axes, mlp_axes = [], []
  for i, layer in enumerate(layers):
    ax, mx = axes[i + 1, 0], axes[i + 1, 1]
    in_layer = sorted(h for ly, h in heads if ly == layer)
    if in_layer:
      bars(ax, [heads[layer, h] for h in in_layer], [f"h{h}" for h in in_layer])
      head_axes.append(ax)
    else:
      ax.axis("off")
    if layer in mlps:
      bars(mx, [mlps[layer]], ["MLP"])
      mlp_axes.append(mx)
    else:
      mx.axis("off")
    ax.set_ylabel(f"layer {layer}", fontsize=8)
  if head_axes:
    head_axes[0].set_title("each attention head", fontsize=9)
    plotting.share_ylim(head_axes)
  if mlp_axes:
    mlp_axes[0].set_title("the MLP", fontsize=9)
    plotting.share_ylim(mlp_axes)
  fig.tight_layout()
  return plotting.save(fig, path)


def top_tokens(chi: np.ndarray, probes: np.ndarray, decode, k: int = 3) -> list[list[dict]]:
  """Per restriction (row of ``chi``, ``(C, windows·(T−1))``), its ``k`` probe tokens of largest
  ``|χ|``: ``{"token", "context", "chi"}``, the predicted token and the few tokens before it as
  text (``decode(ids) -> str``; token ids where there is no tokenizer)."""
  windows, length = probes.shape
  out = []
  for row in np.asarray(chi):
    picked = np.argsort(-np.abs(row))[:k]
    entries = []
    for column in picked:
      w, p = divmod(int(column), length - 1)
      entries.append(
        {
          "token": decode([int(probes[w, p + 1])]),
          "context": decode([int(t) for t in probes[w, max(0, p - 5) : p + 1]]),
          "chi": float(row[column]),
        }
      )
    out.append(entries)
  return out


def chi_figure(names, chi: np.ndarray, top: list[list[dict]], path: str) -> str:
  """χ per probe token (columns) and restriction (rows), each row divided by its own largest
  ``|χ|`` so that a head's pattern shows beside the whole model's; the row's scale and its top
  tokens are printed at its right."""
  chi = np.asarray(chi, float)
  scale = np.max(np.abs(chi), axis=1, keepdims=True)
  shown = np.divide(chi, scale, out=np.zeros_like(chi), where=scale > 0)
  fig, ax = plotting.plt.subplots(figsize=(12, 1.4 + 0.26 * len(names)))
  im = ax.imshow(shown, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
  ax.set_yticks(range(len(names)), names, fontsize=7)
  ax.set_xlabel("probe token (windows in order)", fontsize=8)
  ax.set_title(
    "per-token susceptibility χ of each restriction, each row over its max |χ|", fontsize=9
  )
  for i, row in enumerate(top):
    words = ", ".join(f"{_quote(e['token'])} {e['chi']:+.2g}" for e in row)
    ax.text(
      1.01,
      i,
      f"max|χ| {scale[i, 0]:.2g}: {words}",
      transform=ax.get_yaxis_transform(),
      fontsize=6.5,
      va="center",
      clip_on=False,
    )
  bar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.22, location="bottom", shrink=0.5)
  bar.set_label("χ / max|χ| of its row", fontsize=7)
  bar.ax.tick_params(labelsize=6)
  fig.subplots_adjust(left=0.18, right=0.62)
  return plotting.save(fig, path)


def _quote(text: str) -> str:
  text = text.replace("\n", "⏎")
  return repr(text) if text.strip() != text or not text else text


def uniform_loss(vocab_size: int) -> float:
  """The cross-entropy of a uniform guess over the vocabulary, ``ln V`` nats."""
  return math.log(vocab_size)
