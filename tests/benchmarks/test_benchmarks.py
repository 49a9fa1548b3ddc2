"""The benchmarks as a user without their extra requirements meets them."""

import importlib.util

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llc_vs_devinterp", "pretrained_llc_vs_devinterp"])
def test_devinterp_benchmarks_name_their_extra_requirements_when_they_are_missing(run_cli, name):
  if importlib.util.find_spec("devinterp") is not None:
    pytest.skip("devinterp is installed: the benchmark would run in full")
  done = run_cli(f"benchmarks.{name}", timeout=120)
  assert done.returncode != 0 and "benchmarks/requirements.txt" in done.stderr


def test_run_worker_reports_the_child_s_own_peak_memory(monkeypatch):
  from benchmarks import timing
  from tests.helpers import ROOT

  monkeypatch.chdir(ROOT)
  small_wall, small = timing.run_worker("tests.benchmarks.rss_child", "8")
  _, big = timing.run_worker("tests.benchmarks.rss_child", "300")
  assert small["sum"] == 8 * 2**20 // 8 and small_wall > 0
  assert big["peak_rss_mib"] >= 300 > small["peak_rss_mib"]  # each child's own, not the largest
  with pytest.raises(RuntimeError, match="failed"):
    timing.run_worker("tests.benchmarks.rss_child", "not-a-number")


def test_the_gaussian_section_names_the_path_the_library_takes():
  from benchmarks import tensor_similarity as bench

  plans = {(d, h): bench.gaussian_plan(d, h) for d, h in bench.GAUSSIAN_GRID}
  assert plans[(64, 2048)][0] == "forms" and plans[(784, 64)][0] == "hidden"
  assert all(path in ("hidden", "forms") and work > 0 for path, work in plans.values())
