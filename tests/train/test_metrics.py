"""Reading a run's metrics rows: the first step a metric reaches a threshold."""

import numpy as np
import pytest

from mechjax.train import metrics

HISTORY = [
  {"step": 10, "acc": [0.2, 0.6, 0.1]},
  {"step": 20, "acc": [0.5, 0.9, 0.4]},
  {"step": 30, "acc": [0.7, 0.95, 0.8]},
]


def test_first_step_of_one_seed_a_block_or_all():
  assert metrics.first_step(HISTORY, "acc", 0.5, 0) == 20
  assert metrics.first_step(HISTORY, "acc", 0.6, 1) == 10  # reaching counts (>=)
  assert metrics.first_step(HISTORY, "acc", 0.6, slice(0, 2)) == 20  # the mean of seeds 0 and 1
  assert metrics.first_step(HISTORY, "acc", 0.8) == 30  # all seeds by default
  assert metrics.first_step(HISTORY, "acc", 0.99) is None


def test_crossing_step_interpolates_between_logged_steps_and_reports_never():
  steps = np.array([0, 100, 200, 300])
  assert metrics.crossing_step(steps, np.array([4.0, 3.0, 1.0, 0.5]), 2.0) == 150.0
  assert metrics.crossing_step(steps, np.array([1.0, 0.5, 0.2, 0.1]), 2.0) == 0.0
  assert metrics.crossing_step(steps, np.array([4.0, 3.0, 2.0, 1.0]), 2.0) == 200.0  # at counts
  assert metrics.crossing_step(steps, np.array([4.0, 3.0, 2.5, 2.1]), 2.0) is None


def test_paired_shift_compares_seed_by_seed_where_both_are_known():
  shift = metrics.paired_shift([90.0, None, 130.0, 100.0], [100.0, 50.0, 100.0, None])
  np.testing.assert_array_equal(shift["per_seed"], [-10.0, 30.0])
  assert (shift["mean"], shift["seeds_compared"]) == (10.0, 2)
  assert shift["sd"] == pytest.approx(np.sqrt(800.0))
  assert (shift["earlier_in"], shift["later_in"]) == (1, 1)
  one = metrics.paired_shift([1.0], [2.0])
  assert one["sd"] is None and one["mean"] == -1.0
  assert metrics.paired_shift([None], [2.0])["mean"] is None
