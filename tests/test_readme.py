"""The README as a front door: its size, its Quickstart, and links that resolve.

The limits are those the project set for the README: at most 200 lines and 1,500 words, a Quickstart
of exactly two commands whose prose holds at most 3 numbers, and no prose line over 200 characters.
Every relative link (README, results, benchmarks, api, design, contributing) must name a file that
exists and, where it has one, a heading in that file.
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _read(path):
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return f.read()


def _section(text, title):
  start = text.index(f"## {title}\n")
  end = text.find("\n## ", start + 1)
  return text[start : end if end >= 0 else len(text)]


def anchor(heading):
  """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


def test_anchor_follows_github():
  assert anchor("Rotation alignment: `mechjax.align`") == "rotation-alignment-mechjaxalign"
  assert anchor("Reading the N³ check") == "reading-the-n³-check"


@pytest.fixture(scope="module")
def readme():
  return _read("README.md")


def test_size(readme):
  assert len(readme.splitlines()) <= 200
  assert len(readme.split()) <= 1500


def test_no_long_prose_lines(readme):
  prose = FENCE.sub("", readme).splitlines()
  long = [line[:60] for line in prose if len(line) > 200 and not line.startswith("|")]
  assert not long, long


def test_quickstart_is_two_commands_with_few_numbers(readme):
  quick = _section(readme, "Quickstart")
  blocks = FENCE.findall(quick)
  assert len(blocks) == 1
  commands = [s for s in blocks[0].splitlines()[1:-1] if s.strip() and not s.startswith("#")]
  assert len(commands) == 2, commands
  assert "python -m experiments." in commands[0] and "pytest" in commands[1]
  # .ci/run runs the README's test command, with `python3` for `python`.
  test_command = commands[1].split("&&")[-1].strip().replace("python -m", "python3 -m", 1)
  ci = [line.split("#")[0].strip() for line in _read(".ci/run").splitlines()]
  assert test_command in ci, (test_command, [line for line in ci if "pytest" in line])
  numbers = re.findall(r"\d+(?:[.,]\d+)*", FENCE.sub("", quick))
  assert len(numbers) <= 3, numbers
  assert "report.html" in quick


def test_readme_test_command_is_what_ci_runs(readme):
  command = FENCE.findall(_section(readme, "Quickstart"))[0].splitlines()[2]
  ci = _read(".ci/run")
  assert command.split("&& ", 1)[1] in ci.replace("python3 ", "python ")


def test_sections_in_order(readme):
  order = ["Quickstart", "Use it on your model", "The four pillars", "Running at scale", "Findings"]
  found = [readme.index(f"## {title}\n") for title in order]
  assert found == sorted(found)


@pytest.mark.parametrize(
  "doc",
  [
    "README.md",
    "docs/results.md",
    "docs/benchmarks.md",
    "docs/api.md",
    "docs/design.md",
    "docs/contributing.md",
  ],
)
def test_relative_links_resolve(doc):
  text = FENCE.sub("", _read(doc))
  base = os.path.dirname(doc)
  bad = []
  for target in LINK.findall(text):
    if re.match(r"[a-z]+:", target):
      continue
    path, _, frag = target.partition("#")
    path = os.path.normpath(os.path.join(base, path)) if path else doc
    if not os.path.exists(os.path.join(ROOT, path)):
      bad.append(target)
    elif frag and path.endswith(".md"):
      heads = {anchor(h) for h in re.findall(r"^#+ (.+)$", FENCE.sub("", _read(path)), re.M)}
      if frag not in heads:
        bad.append(target)
  assert not bad, bad


def test_findings_link_their_rows(readme):
  rows = [
    r for r in _section(readme, "Findings").splitlines() if r.startswith("| ") and "---" not in r
  ]
  assert 6 <= len(rows) - 1 <= 10
  for row in rows[1:]:
    number = row.rstrip(" |").rsplit("|", 1)[1]
    assert re.fullmatch(r" \[[^\]]+\]\(docs/(results|benchmarks)\.md#[\w\-³]+\)", number), row
