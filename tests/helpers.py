"""What several test modules share: the repository root and running a module as a user would."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(
  module: str, *args: str, timeout: float = 300, **kwargs
) -> subprocess.CompletedProcess:
  """Runs ``python -m module args`` from the repository root, as a user would."""
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
  }
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
    **kwargs,
  )
