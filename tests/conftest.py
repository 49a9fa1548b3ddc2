import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(module: str, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
  """Runs ``python -m module args`` from the repository root, as a user would."""
  env = {**os.environ, "PYTHONPATH": ROOT}
  return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout, **kwargs)


@pytest.fixture
def run_cli():
  return run_module
