"""The public API: each subpackage's ``__all__`` names real objects, each documented, with an
``Args:`` section (``Attributes:`` for a class) wherever it takes three or more parameters."""

import importlib
import inspect
import types

import pytest

SUBPACKAGES = ("train", "slt", "align", "similarity", "data", "models")
# Constructor parameters that flax adds to every module; they are not the module's own.
FLAX_PARAMS = {"parent", "name"}


def _exported():
  for sub in SUBPACKAGES:
    module = importlib.import_module(f"mechjax.{sub}")
    for name in module.__all__:
      yield sub, name, module


def _own_parameters(obj) -> list[str]:
  try:
    signature = inspect.signature(obj)
  except (TypeError, ValueError):
    return []
  names = []
  for p in signature.parameters.values():
    if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("self", "cls"):
      continue
    if isinstance(obj, type) and p.name in FLAX_PARAMS:
      continue
    names.append(p.name)
  return names


def test_every_subpackage_exports_names_that_exist():
  for sub, name, module in _exported():
    assert hasattr(module, name), f"mechjax.{sub}.__all__ names {name!r}, which it does not define"
    assert not name.startswith("_"), f"mechjax.{sub}.__all__ exports private name {name!r}"
  for sub in SUBPACKAGES:
    module = importlib.import_module(f"mechjax.{sub}")
    assert len(set(module.__all__)) == len(module.__all__), f"mechjax.{sub}.__all__ repeats a name"


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_every_exported_name_is_documented(sub):
  module = importlib.import_module(f"mechjax.{sub}")
  missing, no_args = [], []
  for name in module.__all__:
    obj = getattr(module, name)
    doc = inspect.getdoc(obj) if not isinstance(obj, types.ModuleType) else obj.__doc__
    # A dataclass without a docstring of its own gets its signature as one ("Name(a: int, ...)").
    if not doc or not doc.strip() or doc.startswith(f"{name}("):
      missing.append(name)
      continue
    if isinstance(obj, types.ModuleType):
      continue
    if len(_own_parameters(obj)) >= 3:
      sections = ("Args:", "Attributes:") if isinstance(obj, type) else ("Args:",)
      if not any(s in doc for s in sections):
        no_args.append(f"{name}({', '.join(_own_parameters(obj))})")
  assert not missing, f"mechjax.{sub}: no docstring: {missing}"
  assert not no_args, f"mechjax.{sub}: three or more parameters but no Args: section: {no_args}"


def test_no_exported_name_hides_a_submodule():
  import pkgutil

  for sub in SUBPACKAGES:
    module = importlib.import_module(f"mechjax.{sub}")
    for info in pkgutil.iter_modules(module.__path__):
      importlib.import_module(f"mechjax.{sub}.{info.name}")
      attr = getattr(module, info.name)
      assert isinstance(attr, types.ModuleType), (
        f"mechjax.{sub}.{info.name} is {attr!r}, not the submodule of that name"
      )


def test_the_checks_fail_for_an_undocumented_function():
  def undocumented(a, b, c):
    return a

  def documented_without_args(a, b, c):
    """Adds."""

  assert inspect.getdoc(undocumented) is None
  assert len(_own_parameters(documented_without_args)) == 3
  assert "Args:" not in inspect.getdoc(documented_without_args)


def test_importing_mechjax_imports_no_subpackage():
  import subprocess
  import sys

  code = "import sys, mechjax; print(mechjax.__version__); print('jax' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  version, jax_loaded = out.stdout.split()
  assert version.count(".") == 2
  assert jax_loaded == "False"


def test_docs_api_lists_every_exported_name():
  import os
  import re

  from tests.helpers import ROOT

  with open(os.path.join(ROOT, "docs", "api.md")) as f:
    text = f.read()
  sections = dict(re.findall(r"^## .*?`mechjax\.(\w+)`\n(.*?)(?=^## |\Z)", text, re.S | re.M))
  for sub, name, _ in _exported():
    listed = set(re.findall(r"`(\w+)`", sections.get(sub, "")))
    assert name in listed, f"docs/api.md does not list mechjax.{sub}.{name}"


@pytest.mark.slow
def test_use_all_cpu_cores_makes_every_core_a_device_before_jax_starts_and_nothing_after():
  import os
  import subprocess
  import sys

  import mechjax
  from tests.helpers import ROOT

  code = (
    "import mechjax, jax; n = mechjax.use_all_cpu_cores(); "
    "jax.numpy.ones(1); print(n, len(jax.devices()), mechjax.use_all_cpu_cores())"
  )
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHONPATH"] = ROOT
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.split() == [str(mechjax.usable_cpu_cores())] * 3
  # A device count the user set already wins.
  env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.split() == ["3", "3", "3"]
