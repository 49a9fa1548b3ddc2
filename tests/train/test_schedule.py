"""The checkpoint schedules of mechjax.train.loop: the power schedule and the power-of-two pieces
that run its irregular chunks with few compiled programs."""

import pytest

from mechjax.train import schedule


def test_power_schedule():
  assert schedule.power_schedule(100, 4, 2.0) == [6, 25, 56, 100]
  assert schedule.power_schedule(10, 4, 1.0) == [2, 5, 8, 10]
  assert schedule.power_schedule(3, 10, 2.0) == [1, 2, 3]  # deduplicated, never step 0


@pytest.mark.parametrize("n, cap", [(250, 250), (1000, 250), (7, 100), (0, 8), (12345, 1000)])
def test_binary_pieces_sum_and_are_few_distinct_powers_of_two(n, cap):
  pieces = schedule.binary_pieces(n, cap)
  assert sum(pieces) == n
  assert all(p & (p - 1) == 0 and p <= cap for p in pieces)
  assert pieces == sorted(pieces, reverse=True)
