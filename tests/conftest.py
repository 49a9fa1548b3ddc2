import atexit
import json
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
  # Every program, however quickly it compiles: the tests' tiny programs compile in well under a
  # second each, and the same ones recur across tests and the processes they start.
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# The tests' shapes are tiny, so compiling is most of the suite's time, and two settings halve it
# in every test and every process a test starts: XLA's optimizations are off, and the CPU backend
# emits fusions with its older emitters, which compile faster. The programs compute the same
# functions (to rounding). Users' runs, the theory checks and the benchmarks keep XLA's defaults,
# and tests marked compute_bound are compiled with the optimizations (the fixture below). Either
# variable set by you (JAX_DISABLE_MOST_OPTIMIZATIONS=0, XLA_FLAGS naming the emitters) wins, and
# MECHJAX_TEST_COMPILE=defaults leaves both at XLA's defaults: the compile path users run, which
# .ci/run tests with the fast tier.
COMPILE = os.environ.get("MECHJAX_TEST_COMPILE", "fast")
if COMPILE not in ("fast", "defaults"):
  raise pytest.UsageError(f"MECHJAX_TEST_COMPILE must be 'fast' or 'defaults'; got {COMPILE!r}")
if COMPILE == "fast":
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
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The files go to the two workers longest first (pytest.ini: --no-loadscope-reorder): each worker
# takes whole files, and a long file taken last leaves the other worker idle while it runs. The
# order comes from measured times, tests/durations.json (seconds per file under `-n 2`, its tests'
# setup, call and teardown summed); files it does not name follow in collection order. Measure
# again after a change that moves the times:
#   MECHJAX_RECORD_DURATIONS=1 python -m pytest -q -n 2
DURATIONS = os.path.join(_ROOT, "tests", "durations.json")
RECORD = os.environ.get("MECHJAX_RECORD_DURATIONS") == "1"
_missing = [f for f in SMOKE if not os.path.exists(os.path.join(_ROOT, f))]
if _missing:
  raise pytest.UsageError(f"tests/conftest.py SMOKE names files that do not exist: {_missing}")


def _durations() -> dict[str, float]:
  if not os.path.exists(DURATIONS):
    return {}
  with open(DURATIONS) as f:
    return json.load(f)


def _schedule_rank(item, durations: dict[str, float]) -> float:
  return -durations.get(os.path.relpath(str(item.path), _ROOT), 0.0)


_MEASURED: dict[str, float] = {}


def pytest_runtest_logreport(report):
  if RECORD:
    path = report.nodeid.split("::")[0]
    _MEASURED[path] = _MEASURED.get(path, 0.0) + report.duration


def pytest_sessionfinish(session):
  """With MECHJAX_RECORD_DURATIONS=1, the controller (not an xdist worker) writes the files' times
  into tests/durations.json, over the entries of the files that ran."""
  if RECORD and not hasattr(session.config, "workerinput") and _MEASURED:
    merged = {**_durations(), **{k: round(v, 1) for k, v in _MEASURED.items()}}
    merged = {k: v for k, v in merged.items() if os.path.exists(os.path.join(_ROOT, k))}
    with open(DURATIONS, "w") as f:
      json.dump(dict(sorted(merged.items(), key=lambda kv: -kv[1])), f, indent=1)
      f.write("\n")


def pytest_collection_modifyitems(config, items):
  durations = _durations()
  items.sort(key=lambda item: _schedule_rank(item, durations))  # stable: a file's order is kept
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
