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


def first_and_second(fn):
  """``(first_s, second_s, second_result)``: the wall times of two calls of ``fn``, the first
  compiling its programs and the second reusing them, and what the second returned (``fn`` returns
  once its results are ready, as the SLT calls do)."""
  t = time.perf_counter()
  fn()
  first = time.perf_counter() - t
  t = time.perf_counter()
  result = fn()
  return first, time.perf_counter() - t, result


# A small launcher between the benchmark and its worker. Linux counts in a child's peak resident
# memory (ru_maxrss) the resident memory of the process it was forked from, so a worker forked from
# the benchmark's own process (JAX loaded, a model trained) would inherit that as its "peak". The
# launcher is a fresh interpreter of a few MiB: it starts the worker, waits for it with wait4 and
# writes the worker's own ru_maxrss (KiB) to the file named by its first argument.
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as f:
  f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_worker(module: str, *args: str, env: dict | None = None) -> tuple[float, dict]:
  """``python -m module args`` in a fresh process from the checkout; returns its whole-process wall
  time and the last JSON line it printed, with ``peak_rss_mib`` added: the worker's peak resident
  memory as the kernel accounts it (``wait4``'s ``ru_maxrss``, taken from outside the worker by a
  small launcher process, so that the benchmark's own memory is not counted in it). ``env`` adds
  to (or overrides) the worker's environment. Raises with the end of its stderr if it fails."""
  import json
  import os
  import subprocess
  import sys
  import tempfile

  env = {
    **os.environ,
    "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
    "TQDM_DISABLE": "1",
    "PYTHONWARNINGS": "ignore",
    **(env or {}),
  }
  with tempfile.TemporaryDirectory() as tmp:
    rss_file = os.path.join(tmp, "maxrss")
    t0 = time.perf_counter()
    done = subprocess.run(
      [sys.executable, "-c", _LAUNCHER, rss_file, sys.executable, "-m", module, *args],
      capture_output=True,
      text=True,
      env=env,
    )
    wall = time.perf_counter() - t0
    peak_kib = -1
    if os.path.exists(rss_file):
      with open(rss_file) as f:
        peak_kib = int(f.read())
  if done.returncode != 0:
    raise RuntimeError(f"{module} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
  result = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
  result["peak_rss_mib"] = peak_kib / 1024  # Linux reports KiB
  return wall, result
