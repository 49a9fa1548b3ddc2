"""The package's import graph has no cycle: every module can be imported on its own, in any
order."""

import ast
import os

from tests.helpers import ROOT

PACKAGE = os.path.join(ROOT, "mechjax")


def _module_name(path: str) -> str:
  rel = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
  return rel.removesuffix(".__init__")


def _modules() -> dict[str, str]:
  out = {}
  for folder, _, files in os.walk(PACKAGE):
    for f in files:
      if f.endswith(".py"):
        path = os.path.join(folder, f)
        out[_module_name(path)] = path
  return out


def import_graph() -> dict[str, set[str]]:
  """``{module: the mechjax modules it imports}``, counting every import statement, also those
  inside functions (a local import that dodges a cycle at import time is still a cycle in the
  design)."""
  modules = _modules()
  graph = {}
  for name, path in modules.items():
    edges = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        targets = [
          f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
          for a in node.names
        ]
      else:
        continue
      edges |= {t for t in targets if t in modules and t != name}
    graph[name] = edges
  return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One cycle of ``graph`` as a list of modules (first = last), or None."""
  state, stack = {}, []

  def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
      if state.get(nxt) == "open":
        return stack[stack.index(nxt) :] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    stack.pop()
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def test_mechjax_has_no_import_cycle():
  graph = import_graph()
  assert (
    "mechjax.slt.sgld" in graph and "mechjax.slt.moments" in graph["mechjax.slt.susceptibility"]
  )
  assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_planted_cycle():
  graph = import_graph()
  graph["mechjax.slt.moments"] = graph["mechjax.slt.moments"] | {"mechjax.slt.susceptibility"}
  cycle = find_cycle(graph)
  assert cycle is not None and cycle[0] == cycle[-1] and "mechjax.slt.moments" in cycle
