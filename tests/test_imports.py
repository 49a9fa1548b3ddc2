"""The package's import graph has no cycle (every module can be imported on its own, in any
order), and no import runs from a lower layer to a higher one."""

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
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
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


# The layers, from the bottom: a module may import its own layer and the ones below, never above,
# not even inside a function (a lower layer that needs a helper from a higher one is a sign that the
# helper belongs lower).
BASE = ("mechjax", "mechjax.config", "mechjax.rng", "mechjax.sharding", "mechjax.plotting")
BASE += ("mechjax.report", "mechjax.errors")
LAYERS = {"data": 1, "models": 2, "train": 3, "slt": 4, "similarity": 4, "align": 5}
LAYERS |= {"studies": 6, "cli": 7}


def layer_of(module: str) -> int:
  """The layer of a mechjax module (see :data:`LAYERS`); a module that none names is an error, so
  that a new top-level module must be given a place."""
  if module in BASE:
    return 0
  top = module.split(".")[1]
  if top not in LAYERS:
    raise AssertionError(f"{module} is in no layer: add it to BASE or LAYERS in {__file__}")
  return LAYERS[top]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
  return [
    f"{m} (layer {layer_of(m)}) imports {e} (layer {layer_of(e)})"
    for m, edges in sorted(graph.items())
    for e in sorted(edges)
    if layer_of(e) > layer_of(m)
  ]


def test_no_import_runs_up_the_layers():
  graph = import_graph()
  assert "mechjax.train.loop" in graph["mechjax.train.sae"]  # training an SAE is training
  assert not upward_imports(graph), "\n".join(upward_imports(graph))


def test_the_layer_check_finds_a_planted_upward_import():
  graph = import_graph()
  graph["mechjax.models.sae"] = graph["mechjax.models.sae"] | {"mechjax.train.loop"}
  assert upward_imports(graph) == [
    "mechjax.models.sae (layer 2) imports mechjax.train.loop (layer 3)"
  ]


def is_abbreviation(alias: str, module: str) -> bool:
  """Whether ``alias`` names ``module`` (a dotted path) rather than hiding it: its letters, less a
  ``_lib`` suffix and underscores, appear in order in the path's letters (``bl`` for
  ``models.bilinear``, ``ckpt_lib`` for ``train.checkpoint``, ``train_sae`` for ``train.sae``),
  where another word (``shared`` for ``studies.patterning_parens_base``) does not."""
  letters = iter(module.lower().replace(".", "").replace("_", ""))
  return all(c in letters for c in alias.lower().removesuffix("_lib").replace("_", ""))


def hiding_aliases(folders: tuple[str, ...]) -> list[str]:
  """``file:line alias <- module`` for every ``from mechjax... import m as a`` (and ``import
  mechjax.m as a``) in ``folders`` whose alias is not an abbreviation of the module."""
  bad = []
  for top in folders:
    for folder, _, files in os.walk(os.path.join(ROOT, top)):
      for f in (f for f in files if f.endswith(".py")):
        path = os.path.join(folder, f)
        with open(path) as fh:
          tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
          if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mechjax"):
            pairs = [(f"{node.module}.{a.name}", a.asname) for a in node.names]
          elif isinstance(node, ast.Import):
            pairs = [(a.name, a.asname) for a in node.names if a.name.startswith("mechjax")]
          else:
            continue
          for module, alias in pairs:
            if alias and not is_abbreviation(alias, module.removeprefix("mechjax.")):
              bad.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {alias} <- {module}")
  return bad


def test_no_alias_hides_the_module_it_imports():
  """``import m as a`` keeps ``a`` an abbreviation of ``m``, in the package and in every script and
  test; an alias that is another word (``flags as shared``) hides what it names."""
  assert is_abbreviation("sus", "slt.susceptibility") and is_abbreviation("H", "align.haar")
  assert not is_abbreviation("shared", "studies.patterning.patterning_parens_base")
  assert not is_abbreviation("study", "studies.fourier.fourier_phase")
  folders = ("mechjax", "experiments", "theory", "benchmarks", "launch", "tests", ".ci")
  assert not hiding_aliases(folders), "\n".join(hiding_aliases(folders))
