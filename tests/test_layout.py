"""The package's layout: docs/design.md's layout block names every module and only modules that
exist, and no module or function is too long."""

import ast
import os
import re

from tests.helpers import ROOT

DESIGN = os.path.join(ROOT, "docs", "design.md")


def layout_block() -> list[str]:
  """The lines of the code block under design.md's "## Layout" heading."""
  with open(DESIGN) as f:
    text = f.read()
  section = text[text.index("\n## Layout") :]
  block = section[section.index("```\n") + 4 :]
  return block[: block.index("```")].splitlines()


def named_modules(lines: list[str]) -> tuple[set[str], list[str]]:
  """``(modules, other paths)``: the ``mechjax/`` modules the block names, as paths relative to
  ``mechjax/`` (an entry ``slt/ ... chain.py ...`` names ``slt/chain.py``; a name with a slash is
  relative to ``mechjax/``), and the first path of each entry outside ``mechjax/``."""
  modules, others, folder, inside = set(), [], "", False
  for line in lines:
    if not line.strip():
      continue
    if not line.startswith(" "):  # a top-level entry: mechjax/, experiments/, tests/, ...
      inside = line.split()[0] == "mechjax/"
      if not inside:
        others.append(line.split()[0])
      continue
    if inside and not line.startswith(" " * 4):  # an entry of mechjax/: its first token
      first = line.split()[0]
      folder = first if first.endswith("/") else os.path.dirname(first) + "/"
      folder = "" if folder == "/" else folder
    if not inside:
      continue
    for token in re.findall(r"[\w/]+\.py\b", line):
      modules.add(token if "/" in token else folder + token)
  return modules, others


def package_modules() -> set[str]:
  out = set()
  for folder, _, files in os.walk(os.path.join(ROOT, "mechjax")):
    for f in files:
      if f.endswith(".py") and f != "__init__.py":
        out.add(os.path.relpath(os.path.join(folder, f), os.path.join(ROOT, "mechjax")))
  return out


def test_the_layout_block_names_every_module_and_no_other():
  named, others = named_modules(layout_block())
  actual = package_modules()
  assert not actual - named, f"design.md's layout block misses {sorted(actual - named)}"
  assert not named - actual, (
    f"design.md's layout block names {sorted(named - actual)}, not in mechjax/"
  )
  missing = [p for p in others if not os.path.exists(os.path.join(ROOT, p))]
  assert not missing, f"design.md's layout block names {missing}, which do not exist"


def test_the_check_sees_a_missing_module():
  lines = [line for line in layout_block() if "langevin.py" not in line]
  named, _ = named_modules(lines)
  assert "slt/langevin.py" in package_modules() - named


# Guards, not the goal: a module holds one job and says which in its docstring's first line.
MAX_MODULE_LINES = 600
MAX_BODY_LINES = 80


def _bodies(path: str):
  """``(name, lines)`` of every function in ``path``, its docstring left out."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      body = node.body
      if (
        len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
      ):
        body = body[1:]
      yield node.name, node.end_lineno - body[0].lineno + 1


def test_no_module_or_function_of_the_package_is_too_long():
  long_modules, long_bodies = [], []
  for module in sorted(package_modules()):
    path = os.path.join(ROOT, "mechjax", module)
    with open(path) as f:
      lines = f.read().count("\n")
    if lines > MAX_MODULE_LINES:
      long_modules.append(f"{module} ({lines} lines)")
    long_bodies += [f"{module}: {n} ({k} lines)" for n, k in _bodies(path) if k > MAX_BODY_LINES]
  assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
  assert not long_bodies, f"function bodies over {MAX_BODY_LINES} lines: {long_bodies}"


def test_every_module_says_its_job_in_its_docstring():
  missing = []
  for module in sorted(package_modules()):
    with open(os.path.join(ROOT, "mechjax", module)) as f:
      doc = ast.get_docstring(ast.parse(f.read()))
    if not doc or not doc.split("\n")[0].strip():
      missing.append(module)
  assert not missing, f"modules without a docstring whose first line says their job: {missing}"
