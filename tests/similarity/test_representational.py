"""Representational similarity (mechjax.similarity.representational)."""

import jax
import numpy as np
import pytest

from mechjax.similarity.representational import linear_cka
from mechjax.similarity.representational import mean_cca
from mechjax.similarity.representational import participation_ratio
from mechjax.similarity.representational import procrustes_distance

RNG = np.random.default_rng(0)


def _orthogonal(d, seed):
  return np.asarray(jax.random.orthogonal(jax.random.PRNGKey(seed), d))


@pytest.mark.parametrize("debiased", [False, True])
def test_cka_invariances(debiased):
  x = RNG.normal(size=(200, 12)).astype(np.float32)
  q = _orthogonal(12, 1)
  assert abs(float(linear_cka(x, 3.7 * x @ q, debiased=debiased)) - 1.0) < 1e-5
  general = RNG.normal(size=(12, 12)) + np.diag(
    np.linspace(0.1, 5, 12)
  )  # invertible, not orthogonal
  assert float(linear_cka(x, x @ general.astype(np.float32), debiased=debiased)) < 0.95


def test_debiased_cka_matches_the_gram_formula_and_fixes_wide_data():
  def hsic_u(k, l):
    n = k.shape[0]
    k, l = k.copy(), l.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(l, 0)
    one = np.ones(n)
    return (
      np.trace(k @ l)
      + one @ k @ one * (one @ l @ one) / ((n - 1) * (n - 2))
      - 2 / (n - 2) * one @ k @ l @ one
    ) / (n * (n - 3))

  x = RNG.normal(size=(40, 6))
  y = x @ RNG.normal(size=(6, 5)) + RNG.normal(size=(40, 5))
  kx, ly = x @ x.T, y @ y.T
  ref = hsic_u(kx, ly) / np.sqrt(hsic_u(kx, kx) * hsic_u(ly, ly))
  np.testing.assert_allclose(float(linear_cka(x, y, debiased=True)), ref, rtol=1e-5)
  a, b = RNG.normal(size=(100, 1000)), RNG.normal(size=(100, 1000))  # independent and wide
  assert float(linear_cka(a, b)) > 0.85  # the biased estimator is fooled
  assert abs(float(linear_cka(a, b, debiased=True))) < 0.05


def test_procrustes_distance_is_a_shape_metric():
  x = RNG.normal(size=(50, 8))
  assert float(procrustes_distance(x, 2.0 * x @ _orthogonal(8, 3) + 5.0)) < 1e-3
  assert float(procrustes_distance(x, RNG.normal(size=(50, 8)))) > 0.5
  violations = 0
  for _ in range(300):
    a, b, c = (RNG.normal(size=(20, 4)) @ RNG.normal(size=(4, 4)) for _ in range(3))
    dab, dbc, dac = (float(procrustes_distance(p, q)) for p, q in ((a, b), (b, c), (a, c)))
    violations += dac > dab + dbc + 1e-5
  assert violations == 0


def test_mean_cca_is_invariant_to_invertible_maps():
  x = RNG.normal(size=(100, 6))
  assert abs(float(mean_cca(x, x @ RNG.normal(size=(6, 6)) + 1.0)) - 1.0) < 1e-5
  assert float(mean_cca(x, RNG.normal(size=(100, 6)))) < 0.5


def test_shape_errors():
  with pytest.raises(ValueError, match="same n"):
    linear_cka(np.ones((5, 3)), np.ones((6, 3)))


def test_participation_ratio_counts_the_directions_that_carry_variance():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(20000, 6))
  assert abs(participation_ratio(x) - 6) < 0.1  # isotropic: every direction
  assert abs(participation_ratio(x * [1, 1, 1, 0, 0, 0]) - 3) < 0.05
  assert abs(participation_ratio(np.outer(rng.normal(size=500), rng.normal(size=6))) - 1) < 1e-9
  q = np.linalg.qr(rng.normal(size=(6, 6)))[0]
  z = x * [3, 2, 1, 1, 0.5, 0.1]  # (Σλ)²/Σλ² of the variances, and rotation- and scale-invariant
  lam = np.array([9, 4, 1, 1, 0.25, 0.01])
  assert abs(participation_ratio(z) - lam.sum() ** 2 / np.sum(lam**2)) < 0.05
  np.testing.assert_allclose(participation_ratio(5 * z @ q), participation_ratio(z), rtol=1e-9)
