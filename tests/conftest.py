import atexit
import os
import shutil
import tempfile

import pytest

from tests.helpers import run_module

# One JAX compilation cache per test session, inherited by the experiments the tests start as
# subprocesses: a program that several tests (or a run and its resumption) compile is compiled once.
# Set before any test module imports JAX; a cache the user configured is left alone.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="mechjax-test-jax-cache-")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

# The tests' shapes are tiny, so compiling is most of the suite's time, and two settings halve it
# in every test and every process a test starts: XLA's optimizations are off, and the CPU backend
# emits fusions with its older emitters, which compile faster. The programs compute the same
# functions (to rounding). Users' runs, the theory checks and the benchmarks keep XLA's defaults,
# and tests marked compute_bound are compiled with the optimizations (the fixture below). Either
# variable set by you (JAX_DISABLE_MOST_OPTIMIZATIONS=0, XLA_FLAGS naming the emitters) wins.
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
  _flags = os.environ.get("XLA_FLAGS", "")
  os.environ["XLA_FLAGS"] = f"{_flags} --xla_cpu_use_fusion_emitters=false".strip()
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

# Implicit rank promotion (adding a (n,) array to an (n, 1) one, say) is an error in every test and
# in every process a test starts: a broadcast the code did not ask for is a bug.
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"


# The smoke tier, `python -m pytest -q -m smoke` (at most 30 s on two cores, in one process): the
# tests not marked slow in these files, one or two per layer of the package (settings and flags,
# streams, the training loop, the study frame, the sampler's step, alignment, data, models, the
# README's commands).
SMOKE = (
  "tests/test_config.py",
  "tests/test_rng.py",
  "tests/test_readme.py",
  "tests/train/test_loop.py",
  "tests/studies/test_frame.py",
  "tests/slt/test_settings.py",
  "tests/slt/test_sgld_step.py",
  "tests/slt/test_closed_forms.py",
  "tests/align/test_haar_procrustes.py",
  "tests/data/test_parens.py",
  "tests/models/test_mlp.py",
)
# The files that take longest under `-n 2` (a clean clone's --durations, summed per file), handed to
# the two workers first (pytest.ini: --no-loadscope-reorder): each worker takes whole files, and a
# long file taken last leaves the other worker idle while it runs. The rest in collection order.
LONGEST_FIRST = (
  "tests/test_docs.py",
  "tests/studies/test_patterning_parens.py",
  "tests/theory/test_theory_fast.py",
  "tests/slt/test_mesh.py",
  "tests/studies/test_polymorphism.py",
  "tests/train/test_cli.py",
  "tests/train/test_multihost.py",
  "tests/launch/test_launch.py",
  "tests/pretrained/test_studies.py",
  "tests/align/test_haar_procrustes.py",
  "tests/pretrained/test_loader.py",
  "tests/slt/test_llc_paths.py",
)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _name, _files in (("SMOKE", SMOKE), ("LONGEST_FIRST", LONGEST_FIRST)):
  _missing = [f for f in _files if not os.path.exists(os.path.join(_ROOT, f))]
  if _missing:
    raise pytest.UsageError(f"tests/conftest.py {_name} names files that do not exist: {_missing}")


def _schedule_rank(item) -> int:
  path = os.path.relpath(str(item.path), _ROOT)
  return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
  items.sort(key=_schedule_rank)  # stable: the order within a file, and of the rest, is kept
  for item in items:
    path = os.path.relpath(str(item.path), _ROOT)
    if path in SMOKE and item.get_closest_marker("slow") is None:
      item.add_marker(pytest.mark.smoke)


@pytest.fixture(autouse=True)
def _optimized_when_compute_bound(request, monkeypatch):
  """A test marked compute_bound, and every process it starts, compiles with XLA's optimizations.
  JAX's in-memory caches do not tell the two apart, so they are cleared on the way in and out: a
  later test must not reuse an optimized program (its rounding differs from what that test's
  subprocesses compile)."""
  if request.node.get_closest_marker("compute_bound") is None:
    yield
    return
  import jax  # noqa: PLC0415  (after the environment above is set)

  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", False)
  jax.clear_caches()
  yield
  jax.config.update("jax_disable_most_optimizations", before)
  jax.clear_caches()


@pytest.fixture
def run_cli():
  return run_module
