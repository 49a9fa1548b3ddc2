import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One JAX compilation cache per test session, inherited by the experiments the tests start as subprocesses:
# a program that several tests (or a run and its resumption) compile is compiled once. Set before any test
# module imports JAX; a cache the user configured is left alone.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="mechjax-test-jax-cache-")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


def run_module(module: str, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
  """Runs ``python -m module args`` from the repository root, as a user would."""
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
  return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout, **kwargs)


@pytest.fixture
def run_cli():
  return run_module
