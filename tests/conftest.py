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

# Implicit rank promotion (adding a (n,) array to an (n, 1) one, say) is an error in every test and
# in every process a test starts: a broadcast the code did not ask for is a bug.
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"


@pytest.fixture
def run_cli():
  return run_module
