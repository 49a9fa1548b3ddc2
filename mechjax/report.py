"""``report.html``: a run, or a sweep, at a glance in a browser, without a server.

A run's report leads with the study's verdict when it gives one (a few sentences: the answer and
how far to trust it), beside the first figure so that both are on the first screen; then the other
figures in ``figures/`` with their captions, then the study's results (the lines its
``report(summary)`` prints; shown first, above the figures, when there is no verdict, and collapsed
otherwise); then its config (``config.json``) and what it ran on (``metadata.json``); last,
collapsed, the whole summary as a table (nested keys joined by dots, floats to 4 significant
digits). Files are linked by relative paths, so the folder can be moved or copied as a whole. A
sweep root's report leads with the results table (one row per member, linking its own report) and
``results.png`` when there is one.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any, Iterable, Sequence

FILE = "report.html"
FIGURE_TYPES = (".png", ".svg", ".jpg", ".jpeg", ".gif")
_MAX_CELL = 240  # characters of a value shown in a cell; the full value is in its tooltip

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1em auto; max-width: 1200px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; margin: 0.3em 0; }
h2 { font-size: 1.2em; margin-top: 1.5em; border-bottom: 1px solid #ddd; }
h1 + h2 { margin-top: 0.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.key { font-family: monospace; white-space: nowrap; }
td.value { font-family: monospace; word-break: break-all; }
figure { display: inline-block; margin: 0 1em 1em 0; } figure img { max-width: 100%; }
figcaption { font-family: monospace; font-size: 0.85em; color: #555; }
.muted { color: #777; }
pre.results { background: #f7f7f7; border: 1px solid #ddd; padding: 0.8em; font-size: 0.9em;
              overflow-x: auto; }
details summary { cursor: pointer; font-weight: bold; margin-top: 2em; }
.verdict p { line-height: 1.35; margin: 0.3em 0; max-width: 70em; }
.lead { display: flex; gap: 1.5em; align-items: flex-start; }
.lead .verdict { flex: 1 1 42%; font-size: 0.95em; } .lead figure { flex: 1 1 58%; margin: 0; }
.lead figure img { max-height: 85vh; }
@media (max-width: 900px) { .lead { display: block; } }
"""


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  """Scalars of a nested dict as ``{"a.b.c": value}``; a list of scalars is kept as one JSON text;
  lists of other things and empty dicts are left out."""
  out: dict[str, Any] = {}
  if isinstance(tree, dict):
    for k, v in tree.items():
      out.update(flatten(v, f"{prefix}{k}."))
  elif isinstance(tree, (int, float, str, bool)) or tree is None:
    out[prefix[:-1]] = tree
  elif isinstance(tree, list) and all(
    isinstance(x, (int, float, str, bool)) or x is None for x in tree
  ):
    out[prefix[:-1]] = json.dumps(tree)
  return out


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
  """A markdown table of text cells: the ``header`` line, its rule (``|---|---|…``) and one line per
  row of ``rows``, each ``| a | b | … |``."""
  line = lambda cells: "| " + " | ".join(cells) + " |"
  return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])


def _cell(value: Any) -> str:
  if isinstance(value, float):
    text = f"{value:.4g}"
  else:
    text = value if isinstance(value, str) else json.dumps(value)
  if len(text) <= _MAX_CELL:
    return html.escape(text)
  return f'<span title="{html.escape(text)}">{html.escape(text[:_MAX_CELL])}…</span>'


def _table(tree: dict | None, empty: str) -> str:
  if not tree:
    return f'<p class="muted">{html.escape(empty)}</p>'
  rows = "".join(
    f'<tr><td class="key">{html.escape(k)}</td><td class="value">{_cell(v)}</td></tr>'
    for k, v in flatten(tree).items()
  )
  return f"<table>{rows}</table>"


def _load(path: str) -> Any:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def figures_in(workdir: str, named: Iterable[str] = ()) -> list[str]:
  """The figures of a run, as paths relative to ``workdir``: those named (in ``figures/``) first,
  then any other figure file in ``figures/``."""
  folder = os.path.join(workdir, "figures")
  present = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
  names = list(dict.fromkeys([*named, *(f for f in present if f.lower().endswith(FIGURE_TYPES))]))
  return [f"figures/{name}" for name in names]


def _page(title: str, body: str) -> str:
  return (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
    f"<body>\n<h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
  )


def write_run_report(
  workdir: str,
  summary: dict | None = None,
  title: str | None = None,
  lines: Iterable[str] = (),
  captions: dict[str, str] | None = None,
  verdict: Sequence[str] = (),
) -> str:
  """Writes ``<workdir>/report.html`` and returns its path.

  Args:
    workdir: the run folder, with ``config.json`` and ``metadata.json`` as the workdir contract
      writes them (:mod:`mechjax.studies.workdir`).
    summary: the run's summary; by default read from ``summary.json``.
    title: the page's title; by default the experiment in the command line, or the folder's name.
    lines: the study's results, as its ``report(summary)`` prints them; shown first.
    captions: one line per figure file name (``"loss.png"``), saying what its curves and bands are.
    verdict: paragraphs shown first, under "Verdict": the answer and how far to trust it. With a
      verdict, the results ``lines`` are collapsed below the figures.
  """
  config = _load(os.path.join(workdir, "config.json"))
  metadata = _load(os.path.join(workdir, "metadata.json"))
  if summary is None:
    summary = _load(os.path.join(workdir, "summary.json")) or {}
  if title is None:
    argv = (metadata or {}).get("command", {}).get("argv") or []
    module = next((a for a in argv if a.startswith("experiments.")), None)
    title = f"{module or os.path.basename(os.path.abspath(workdir))}: {os.path.abspath(workdir)}"
  shown = {k: v for k, v in summary.items() if k != "figures"}
  figures = figures_in(workdir, summary.get("figures", []))
  captions = captions or {}

  def caption(f):
    text = captions.get(os.path.basename(f))
    return (
      html.escape(text) + " " if text else ""
    ) + f'<span class="muted">({html.escape(f)})</span>'

  shown_figures = [
    f'<figure><a href="{html.escape(f)}"><img src="{html.escape(f)}" alt="{html.escape(f)}"></a>'
    f"<figcaption>{caption(f)}</figcaption></figure>"
    for f in figures
  ]
  lines = [str(line) for line in lines]
  block = '<pre class="results">' + html.escape("\n".join(lines)) + "</pre>"
  verdict_html = "".join(f"<p>{html.escape(str(p))}</p>" for p in verdict)
  if verdict_html:  # the verdict beside the first figure: both on the first screen
    first = shown_figures.pop(0) if shown_figures else ""
    lead = (
      f'<h2>Verdict</h2><div class="lead"><div class="verdict">{verdict_html}</div>{first}</div>'
    )
    tail = f"<details><summary>Results: every number, as printed</summary>{block}</details>"
  else:
    lead, tail = ("<h2>Results</h2>" + block if lines else ""), ""
  if not lines:
    tail = ""
  files = sorted(
    {
      f
      for f in os.listdir(workdir)
      if os.path.isfile(os.path.join(workdir, f)) and f != FILE and not f.endswith(".tmp")
    }
    | {"summary.json"}  # the frame writes it right after the report
  )
  file_links = " · ".join(f'<a href="{html.escape(f)}">{html.escape(f)}</a>' for f in files)
  resumes = len((metadata or {}).get("resumes", []))
  body = (
    lead
    + (
      "<h2>Figures</h2>" + ("".join(shown_figures) or '<p class="muted">no figures</p>')
      if shown_figures or not verdict_html
      else ""
    )
    + tail
    + f"<p>Files: {file_links or '(none)'}</p>"
    + "<h2>Config</h2>"
    + _table(config, "no config.json")
    + f"<h2>Ran on</h2><p class='muted'>metadata.json; resumed {resumes} time(s)</p>"
    + _table({k: v for k, v in (metadata or {}).items() if k != "resumes"}, "no metadata.json")
    + "<details><summary>Summary: every value of summary.json</summary>"
    + _table(shown, "no summary")
    + "</details>"
  )
  path = os.path.join(workdir, FILE)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(_page(title, body))
  os.replace(tmp, path)
  return path


def write_sweep_report(
  root: str, rows: list[dict], title: str | None = None, member_folder: str = "{id}"
) -> str:
  """Writes ``<root>/report.html``: the results table (one row per member: id, state, flags and
  the summary's scalars), ``results.png`` when present, and a link to each member's report.

  Args:
    root: the sweep's root folder.
    rows: one dict per member, with ``"id"`` and ``"state"``; other keys become columns (the rows
      of ``results.json``).
    title: the page's title; by default the root's path.
    member_folder: where a member's workdir is, relative to ``root``, with ``{id}`` for its id.
  """
  columns = list(dict.fromkeys(k for r in rows for k in r))
  head = "".join(f"<th>{html.escape(c)}</th>" for c in ["report", *columns])
  body_rows = []
  for r in rows:
    folder = member_folder.format(id=r.get("id", ""))
    report = os.path.join(folder, FILE)
    link = (
      f'<a href="{html.escape(report)}">report</a>'
      if os.path.exists(os.path.join(root, report))
      else '<span class="muted">none</span>'
    )
    cells = "".join(f'<td class="value">{_cell(r[c]) if c in r else ""}</td>' for c in columns)
    body_rows.append(f"<tr><td>{link}</td>{cells}</tr>")
  figure = (
    '<h2>Figure</h2><figure><img src="results.png" alt="results.png"><figcaption>results.png: '
    "one summary value of each finished member against one swept flag, a line per setting of "
    "the other flags</figcaption></figure>"
    if os.path.exists(os.path.join(root, "results.png"))
    else ""
  )
  states: dict[str, int] = {}
  for r in rows:
    states[r.get("state", "?")] = states.get(r.get("state", "?"), 0) + 1
  counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
  body = (
    f"<p>{len(rows)} members: {html.escape(counts)}. "
    '<a href="results.csv">results.csv</a> · <a href="results.json">results.json</a></p>'
    + f"<h2>Members</h2><table><tr>{head}</tr>{''.join(body_rows)}</table>"
    + figure
  )
  path = os.path.join(root, FILE)
  with open(path + ".tmp", "w") as f:
    f.write(_page(title or f"sweep: {os.path.abspath(root)}", body))
  os.replace(path + ".tmp", path)
  return path
