"""Shared timing helper for the benchmarks."""

import time


def best_time(fn, repeats: int) -> float:
  """Best wall time of ``repeats`` calls of ``fn`` after one warm-up call (compilation excluded)."""
  import jax  # local: the workers that import this module for run_worker need not import JAX

  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t)
  return min(times)


def run_worker(module: str, *args: str) -> tuple[float, dict]:
  """``python -m module args`` in a fresh process from the checkout; returns its whole-process wall
  time and the last JSON line it printed. Raises with the end of its stderr if it fails."""
  import json
  import os
  import subprocess
  import sys

  env = {
    **os.environ,
    "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
    "TQDM_DISABLE": "1",
    "PYTHONWARNINGS": "ignore",
  }
  t0 = time.perf_counter()
  done = subprocess.run(
    [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env
  )
  wall = time.perf_counter() - t0
  if done.returncode != 0:
    raise RuntimeError(f"{module} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
  return wall, json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
