"""Plain prose from a MediaWiki XML dump: each article's wiki markup reduced to its paragraphs.

:func:`articles` reads a dump (``.xml`` or ``.xml.bz2``) and yields ``(title, text)`` for every
article of the main namespace that is not a redirect. :func:`prose` does the reduction, in the
order it matters:

* comments, ``<ref>`` citations and the blocks that are not prose (``<math>``, ``<gallery>``,
  ``<pre>``, ...) go, then every template ``{{...}}`` and table ``{|...|}`` (nested ones too), then
  the remaining HTML tags;
* file, image and category links go; ``[[target|label]]`` becomes ``label`` and ``[[target]]``
  ``target``; external links keep their label;
* bold and italic quotes go; a heading keeps its words on a line of their own, and the article ends
  at its first back-matter heading (References, External links, See also, ...);
* list markers go, and lines left from tables are dropped.

The result is English prose with the odd gap where a template stood (a pronunciation, a date).
"""

from __future__ import annotations

import bz2
import html
import os
import re
import xml.etree.ElementTree as ET
from typing import Iterator

# Sections after which an article holds lists of sources, not prose.
BACK_MATTER = frozenset(
  (
    "references",
    "external links",
    "see also",
    "notes",
    "further reading",
    "bibliography",
    "sources",
    "footnotes",
    "citations",
    "notes and references",
  )
)
_BLOCKS = "math|gallery|timeline|score|syntaxhighlight|source|pre|imagemap|chem|hiero"
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF_EMPTY = re.compile(r"<ref[^>]*/>", re.I)
_REF = re.compile(r"<ref\b[^>]*>.*?</ref\s*>", re.S | re.I)  # after the empty ones
_BLOCK = re.compile(rf"<({_BLOCKS})\b[^>]*>.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
# The opening of a link whose target has a namespace: File:, Image:, Category:, or a language code.
_NAMESPACED_LINK = re.compile(
  r"\[\[\s*(?:File|Image|Category|Media|[a-z]{2,3}(?:-[a-z]+)?)\s*:", re.I
)
_LINK = re.compile(
  r"\[\[\s*(?:File|Image|Category|Media|[a-z]{2,3}(?:-[a-z]+)?)\s*:"
  r"[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]",
  re.I,
)
_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")
_EXTERNAL_LABELLED = re.compile(r"\[(?:https?:)?//\S+\s+([^\]]*)\]")
_EXTERNAL_BARE = re.compile(r"\[(?:https?:)?//\S+\]")
_QUOTES = re.compile(r"'{2,}")
_HEADING = re.compile(r"^(=+)\s*(.*?)\s*\1$")
_LIST_MARK = re.compile(r"^[*#:;]+\s*")
_BLANKS = re.compile(r"\n{3,}")


def strip_nested(text: str, opening: str, closing: str) -> str:
  """``text`` without every span from ``opening`` to its matching ``closing``, nested spans
  included; an unclosed span runs to the end of the text."""
  marks = re.finditer(f"{re.escape(opening)}|{re.escape(closing)}", text)
  out, depth, kept_from = [], 0, 0
  for m in marks:
    if m.group() == opening:
      if depth == 0:
        out.append(text[kept_from : m.start()])
      depth += 1
    elif depth:
      depth -= 1
      if depth == 0:
        kept_from = m.end()
  if depth == 0:
    out.append(text[kept_from:])
  return "".join(out)


def strip_namespaced_links(text: str) -> str:
  """``text`` without its file, image, category and interlanguage links, each up to its matching
  ``]]`` (a caption may hold links of its own)."""
  out, kept_from = [], 0
  for start in _NAMESPACED_LINK.finditer(text):
    if start.start() < kept_from:
      continue  # inside a link already removed
    depth = 0
    # A run of k "]" closes k // 2 links ("]]]" closes a single bracket, then the link).
    for m in re.finditer(r"\[\[|\]+", text[start.start() :]):
      depth += 1 if m.group() == "[[" else -(len(m.group()) // 2)
      if depth <= 0:
        end = start.start() + m.end()
        break
    else:
      end = len(text)
    out.append(text[kept_from : start.start()])
    kept_from = end
  out.append(text[kept_from:])
  return "".join(out)


def prose(markup: str) -> str:
  """The paragraphs of one article's wiki markup (module docstring), separated by blank lines."""
  t = _COMMENT.sub("", markup)
  t = _REF_EMPTY.sub("", t)
  t = _REF.sub("", t)
  t = _BLOCK.sub("", t)
  t = strip_nested(t, "{{", "}}")
  t = strip_nested(t, "{|", "|}")
  t = _TAG.sub("", t)
  t = strip_namespaced_links(t)
  t = _LINK.sub(r"\1", t)
  t = _EXTERNAL_LABELLED.sub(r"\1", t)
  t = _EXTERNAL_BARE.sub("", t)
  t = _QUOTES.sub("", t)
  lines = []
  for line in t.split("\n"):
    s = line.strip()
    heading = _HEADING.match(s)
    if heading:
      if heading.group(2).lower() in BACK_MATTER:
        break
      lines += ["", heading.group(2), ""]
      continue
    s = _LIST_MARK.sub("", s)
    if s.startswith(("|", "!", "{", "}")):
      continue
    lines.append(s)
  return html.unescape(_BLANKS.sub("\n\n", "\n".join(lines)).strip())


def articles(path: str | os.PathLike) -> Iterator[tuple[str, str]]:
  """``(title, prose)`` of each article in the dump ``path`` (``.xml`` or ``.xml.bz2``), in the
  dump's order: main-namespace pages (``<ns>0</ns>``) that are not redirects and keep some prose."""
  path = os.fspath(path)
  opener = bz2.open if path.endswith(".bz2") else open
  with opener(path, "rb") as f:
    for _, element in ET.iterparse(f):
      if not element.tag.endswith("}page") and element.tag != "page":
        continue
      space = element.tag[: -len("page")]
      namespace = element.findtext(f"{space}ns")
      title = element.findtext(f"{space}title") or ""
      markup = element.findtext(f"{space}revision/{space}text") or ""
      redirect = element.find(f"{space}redirect") is not None
      element.clear()
      if namespace != "0" or redirect or markup.lstrip().lower().startswith("#redirect"):
        continue
      text = prose(markup)
      if text:
        yield title, text
