"""Shared timing helper for the benchmarks."""

import time

import jax


def best_time(fn, repeats: int) -> float:
  """Best wall time of ``repeats`` calls of ``fn`` after one warm-up call (compilation excluded)."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t)
  return min(times)
