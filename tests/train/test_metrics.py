"""Reading a run's metrics rows: the first step a metric reaches a threshold."""

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
