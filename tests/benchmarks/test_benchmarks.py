"""The benchmarks as a user without their extra requirements meets them."""

import importlib.util

import pytest


@pytest.mark.slow
def test_devinterp_benchmark_names_its_extra_requirements_when_they_are_missing(run_cli):
  if importlib.util.find_spec("devinterp") is not None:
    pytest.skip("devinterp is installed: the benchmark would run in full")
  done = run_cli("benchmarks.llc_vs_devinterp", timeout=120)
  assert done.returncode != 0 and "benchmarks/requirements.txt" in done.stderr
