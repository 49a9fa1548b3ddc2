"""Fast versions of the theory checks: theory/phase_sample_complexity.py (small N, few seeds, loose
tolerance) and theory/llc_closed_forms.py (its regular and w1·w2² cases, fewer chains or draws)."""

import numpy as np
import pytest

from mechjax.slt import toy_models
from mechjax.studies import sample_complexity as sc

DIMS = (12, 16, 24)


def _median_samples(beta, dims=DIMS, max_factor=40.0):
  out = []
  for n in dims:
    setup = sc.RecoverySetup(shape=(n,), beta=beta)
    r = sc.samples_to_weak_recovery(
      setup,
      num_seeds=12,
      seed=1,
      max_samples=int(max_factor * n**3 * np.log(n) ** 2),
      chunk_steps=1000,
    )
    out.append(r["median"])
  return np.array(out)


@pytest.mark.slow
def test_weak_recovery_exponent_is_near_three():
  medians = _median_samples(beta=5.0)
  assert np.all(np.isfinite(medians)), medians
  exponent, _ = sc.fit_exponent(np.array(DIMS), medians)
  # The full check (N = 16..64, 16 seeds) uses [2.5, 3.7]; at N <= 24 with 12 seeds the median's
  # Monte-Carlo error (~25% per point over a factor 2 in N) widens this to +-1.2 around 3.
  assert 1.8 <= exponent <= 4.2, (exponent, medians)


@pytest.mark.slow
def test_no_spike_means_no_recovery():
  """Without a spike (beta = 0) the data are Gaussian: the same budget must not recover anything."""
  medians = _median_samples(beta=0.0, dims=(16,), max_factor=10.0)
  assert not np.isfinite(medians[0])


def test_fit_exponent_recovers_a_known_power_law():
  dims = np.array([16.0, 32.0, 64.0])
  slope, pref = sc.fit_exponent(dims, 7.0 * dims**3 * np.log(dims) ** 2)
  np.testing.assert_allclose([slope, pref], [3.0, 7.0], rtol=1e-6)


@pytest.mark.slow
def test_llc_of_a_regular_model_is_half_its_dimension():
  r = toy_models.estimate(toy_models.CASES[0], num_chains=4, num_draws=4000)
  # The full check uses 8 x 10k draws and 5%; 4 x 4k draws have about twice its Monte-Carlo error
  # (~2%).
  assert abs(r["relative_error"]) <= 0.07, r


@pytest.mark.slow
def test_llc_of_the_w1_w2_squared_crossing():
  r = toy_models.estimate(toy_models.CASES[1])  # the full check's own settings (~7 s)
  # The theory tolerance is 20% against lambda = 1/4; the exact finite-nbeta value (0.238) bounds it
  # from above.
  assert abs(r["relative_error"]) <= 0.20 and r["llc_mean"] < r["finite_nbeta_target"] * 1.05, r
