"""Closed-form learning coefficients against the worked examples of their papers, and against each
other."""

import itertools
from fractions import Fraction

import pytest

from mechjax.slt import closed_forms as cf


@pytest.mark.parametrize(
  "dims,r,expected",
  [
    ((5, 3, 5), 0, (Fraction(13, 2), 2)),  # Aoyagi & Watanabe 2005
    ((10, 10, 10), 0, (Fraction(75, 2), 1)),
    ((10, 10, 10), 5, (Fraction(47), 2)),
    ((10, 10, 10), 10, (Fraction(50), 1)),
  ],
)
def test_reduced_rank_regression_worked_examples(dims, r, expected):
  assert cf.reduced_rank_regression(*dims, r) == expected


@pytest.mark.parametrize(
  "widths,r,expected",
  [
    ((10, 10, 10, 10), 3, (Fraction(42), 3)),  # Aoyagi 2024: four layers of width 10, rank 3
    ((3, 3, 3, 3, 3), 1, (Fraction(4), 5)),  # five layers of width 3, rank 1
  ],
)
def test_deep_linear_network_worked_examples(widths, r, expected):
  assert cf.deep_linear_network(widths, r) == expected


def test_two_layer_deep_linear_network_is_reduced_rank_regression():
  for m, h, n in itertools.product(range(1, 8), repeat=3):
    for r in range(0, min(m, h, n) + 1):
      assert cf.deep_linear_network((m, h, n), r) == cf.reduced_rank_regression(m, h, n, r), (
        m,
        h,
        n,
        r,
      )


def test_full_rank_regression_is_regular_on_its_manifold():
  # r = H <= min(M, N): the rank-H matrices BA form a manifold of dimension H(M + N - H), and lambda
  # is half of it.
  for m, h, n in itertools.product(range(1, 8), repeat=3):
    if h <= min(m, n):
      assert cf.reduced_rank_regression(m, h, n, h) == (Fraction(h * (m + n - h), 2), 1), (m, h, n)


def test_learning_coefficients_never_exceed_half_the_parameter_count():
  for widths in itertools.product(range(1, 6), repeat=4):
    d = sum(a * b for a, b in zip(widths, widths[1:]))
    for r in range(min(widths) + 1):
      lam, m = cf.deep_linear_network(widths, r)
      assert 0 <= lam <= Fraction(d, 2) and m >= 1, (widths, r)


def test_regular_and_normal_crossing():
  assert cf.regular(10) == (5, 1)
  assert cf.normal_crossing((1, 2)) == (Fraction(1, 4), 1)  # w1 w2^2
  assert cf.normal_crossing((1, 3)) == (Fraction(1, 6), 1)  # w1 w2^3
  assert cf.normal_crossing((1, 1)) == (Fraction(1, 2), 2)  # w1 w2
  assert cf.normal_crossing((2, 2, 1)) == (Fraction(1, 4), 2)


@pytest.mark.parametrize(
  "call,match",
  [
    (lambda: cf.regular(0), "d must be an integer >= 1"),
    (lambda: cf.normal_crossing(()), "at least one"),
    (lambda: cf.normal_crossing((1, 0)), "each power"),
    (lambda: cf.reduced_rank_regression(5, 3, 5, 4), "cannot exceed"),
    (lambda: cf.deep_linear_network((4,), 0), "input and output"),
    (lambda: cf.deep_linear_network((4, 2, 4), 3), "cannot exceed"),
    (lambda: cf.deep_linear_network((4, "x", 4), 1), "each width"),
  ],
)
def test_bad_input_is_refused_with_a_clear_message(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_crossing_expectation_approaches_lambda_from_below():
  for p in (1, 2, 3):
    lam = float(cf.normal_crossing((1, p))[0])
    values = [cf.crossing_expectation(p, t, scale=2.0) for t in (1e3, 1e5, 1e7, 1e9)]
    assert all(a < b for a, b in zip(values, values[1:])), (p, values)  # increasing in nβ
    assert all(v < lam for v in values) and values[-1] > 0.9 * lam, (p, values)


def test_crossing_expectation_matches_direct_two_dimensional_integration():
  import numpy as np

  p, t, gamma, scale = 2, 500.0, 1.0, 2.0
  w = np.linspace(
    -6.0, 6.0, 3001
  )  # spacing 0.004, against a narrowest w1-width of ~0.02 at |w2| ~ 1
  w1, w2 = np.meshgrid(w, w, indexing="ij")
  tk = t * scale * w1**2 * w2 ** (2 * p)
  dens = np.exp(-tk - gamma * (w1**2 + w2**2) / 2)
  direct = float(np.sum(tk * dens) / np.sum(dens))
  assert cf.crossing_expectation(p, t, gamma, scale) == pytest.approx(direct, rel=2e-3)
  with pytest.raises(ValueError, match="must be > 0"):
    cf.crossing_expectation(2, 0.0)
