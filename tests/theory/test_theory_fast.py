"""Fast versions of the theory checks: theory/phase_sample_complexity.py (no recovery without a
spike; its law check on planted laws; the law itself on simulated escapes is its fast version,
which .ci/run runs) and theory/llc_closed_forms.py (its regular and w1·w2² cases, fewer chains or
draws)."""

import numpy as np
import pytest

from mechjax.slt import toy_models
from tests.helpers import expect_unmixed
from theory import weak_recovery

DIMS = (12, 16, 24, 32)


def _samples(beta, dims=DIMS, max_factor=40.0, num_spikes=4, num_seeds=16):
  out = []
  for n in dims:
    setup = weak_recovery.RecoverySetup(shape=(n,), beta=beta)
    r = weak_recovery.samples_to_weak_recovery(
      setup,
      num_seeds=num_seeds,
      num_spikes=num_spikes,
      seed=1,
      max_samples=int(max_factor * n**3 * np.log(n) ** 2),
      chunk_steps=1000,
    )
    assert r["samples"].shape == (num_spikes, num_seeds)
    out.append(r["samples"])
  return out


@pytest.mark.slow
@pytest.mark.compute_bound
def test_no_spike_means_no_recovery():
  """Without a spike (beta = 0) the data are Gaussian: the same budget must not recover anything."""
  samples = _samples(beta=0.0, dims=(16,), max_factor=10.0, num_spikes=1, num_seeds=12)
  assert not np.isfinite(np.median(samples[0]))


def test_fit_exponent_recovers_a_known_power_law():
  dims = np.array([16.0, 32.0, 64.0])
  slope, pref = weak_recovery.fit_exponent(dims, 7.0 * dims**3 * np.log(dims) ** 2)
  np.testing.assert_allclose([slope, pref], [3.0, 7.0], rtol=1e-6)


def _synthetic(dims, law, spikes=4, seeds=16, seed=0):
  """Escape-time-like samples: ``law(N)`` times a heavy-tailed 1/χ²₁ factor per neuron."""
  r = np.random.default_rng(seed)
  return [law(n) / r.chisquare(1, size=(spikes, seeds)) for n in dims]


@pytest.mark.parametrize(
  ("law", "passes"),
  [
    (lambda n: n**3, True),
    (lambda n: n**3 * np.log(n) ** 2, True),
    (lambda n: n**2, False),
    (lambda n: n**4, False),
    (lambda n: n**3 * np.log(n) ** 6, False),
  ],
  ids=["N3", "N3log2", "N2", "N4", "N3log6"],
)
def test_check_law_fails_in_both_directions_on_planted_laws(law, passes):
  dims = (16, 24, 32, 48, 64, 96, 128, 192, 256)
  check = weak_recovery.check_law(
    dims, _synthetic(dims, law, spikes=8, seeds=32), num_resamples=400
  )
  assert not check["inconclusive"], check
  assert check["passed"] is passes, check


def test_check_law_is_inconclusive_when_the_error_bar_is_too_wide():
  dims = (16, 24, 32)
  check = weak_recovery.check_law(
    dims, _synthetic(dims, lambda n: n**3, spikes=1, seeds=5), num_resamples=400
  )
  assert check["inconclusive"] and not check["passed"], check


def test_law_band_carries_the_log_factor_of_the_grid():
  lo, hi = weak_recovery.law_band((16, 24, 32, 48, 64))
  assert lo == 3.0 and hi == pytest.approx(3 + 2 * 0.2914, abs=1e-3)
  dims = np.array([16.0, 24, 32, 48, 64])
  assert weak_recovery.fit_exponent(dims, dims**3 * np.log(dims) ** 2, 0)[0] == pytest.approx(
    hi, abs=1e-3
  )


@expect_unmixed
@pytest.mark.slow
def test_llc_of_a_regular_model_is_half_its_dimension():
  r = toy_models.estimate(toy_models.CASES[0], num_chains=4, num_draws=4000)
  # The full check uses 8 x 10k draws and 5%; 4 x 4k draws have about twice its Monte-Carlo error
  # (~2%).
  assert abs(r["relative_error"]) <= 0.07, r


@expect_unmixed
@pytest.mark.slow
@pytest.mark.compute_bound
def test_llc_of_the_w1_w2_squared_crossing():
  r = toy_models.estimate(toy_models.CASES[1])  # the full check's own settings (~7 s)
  # The theory tolerance is 20% against lambda = 1/4; the exact finite-nbeta value (0.238) bounds it
  # from above.
  assert abs(r["relative_error"]) <= 0.20 and r["llc_mean"] < r["finite_nbeta_target"] * 1.05, r
