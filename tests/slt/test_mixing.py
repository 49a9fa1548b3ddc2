"""R̂ and the effective sample sizes (mechjax.slt.mixing): by hand, against known autocorrelations,
against ArviZ when it is installed, on planted non-stationary chains, and in the LLC's result."""

import importlib.util
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from mechjax.slt import llc as llc_lib
from mechjax.slt import mixing


def _ar1(phi, chains, draws, seed=0):
  """Stationary AR(1) chains, ``x_t = φ x_{t−1} + √(1 − φ²) ε_t``: unit variance, autocorrelation
  ``φ^t``, so the integrated autocorrelation time is ``(1 + φ) / (1 − φ)``."""
  rng = np.random.default_rng(seed)
  x = np.empty((chains, draws))
  x[:, 0] = rng.normal(size=chains)
  noise = rng.normal(size=(chains, draws)) * np.sqrt(1 - phi**2)
  for t in range(1, draws):
    x[:, t] = phi * x[:, t - 1] + noise[:, t]
  return x


def test_the_variance_ratio_and_the_normal_scores_by_hand():
  # Chains [1, 2, 3, 4] and [2, 3, 4, 5]: W = 5/3 (each chain's variance), B/N = var(2.5, 3.5) =
  # 1/2, var⁺ = (3/4)(5/3) + 1/2 = 7/4, so R̂ = √((7/4) / (5/3)) (Vehtari et al. 2021, eqs. 2–4).
  x = np.array([[1.0, 2, 3, 4], [2, 3, 4, 5]])
  assert mixing._rhat(x) == pytest.approx(np.sqrt(1.75 / (5 / 3)), rel=1e-12)
  # Ranks 3, 1 / 4, 2 of S = 4 draws: z = Φ⁻¹((r − 3/8) / (S + 1/4)) (their eq. 14).
  z = mixing.rank_normalize(np.array([[30.0, 10], [40, 20]]))
  np.testing.assert_allclose(z, special.ndtri((np.array([[3, 1], [4, 2]]) - 0.375) / 4.25))
  # Split chains: halves as chains, the middle draw of an odd chain dropped.
  np.testing.assert_array_equal(
    mixing.split_chains(np.arange(10.0).reshape(2, 5)), [[0, 1], [5, 6], [3, 4], [8, 9]]
  )


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.8])
def test_the_bulk_ess_is_the_draws_over_the_autocorrelation_time(phi):
  """ESS = S (1 − φ)/(1 + φ) for AR(1) chains (the normal scores of a Gaussian chain keep its
  autocorrelation). The relative error of an autocorrelation time τ summed over a window of M lags
  is about √(2(2M + 1)/S) (Madras and Sokal 1988): with M ≈ 5τ and S = 80,000 draws, 5 % at φ = 0.8
  (τ = 9), 2 % at φ = 0.5. The tolerance is three of the former."""
  x = _ar1(phi, 4, 20_000)
  expected = x.size * (1 - phi) / (1 + phi)
  assert mixing.ess_bulk(x) == pytest.approx(expected, rel=0.15)
  assert mixing.rhat(x) < 1.005


def test_planted_drift_in_the_first_half_is_flagged_and_a_mixed_gaussian_is_not():
  rng = np.random.default_rng(1)
  mixed = rng.normal(size=(4, 1000))
  assert mixing.rhat(mixed) < mixing.RHAT_MAX
  assert mixing.warning("test", mixing.summary(mixed), 4) is None
  drift = rng.normal(size=(4, 1000))
  drift[:, :500] += np.linspace(2.0, 0.0, 500)[None]  # each chain settles halfway through
  stats = mixing.summary(drift)
  assert stats["rhat"] > 1.05
  line = mixing.warning("test", stats, 4)
  assert line.startswith("test: the chains have not mixed (R̂ = ") and "num_burnin" in line
  # Too few effective draws alone also warns, and names the ESS rule.
  slow = _ar1(0.99, 4, 400)
  line = mixing.warning("slow", mixing.summary(slow), 4)
  assert "bulk ESS" in line and "< 400 (100 per chain × 4)" in line


def test_entries_are_independent_quantities_and_bad_shapes_are_refused():
  x = np.stack([_ar1(0.5, 3, 200, seed=s) for s in range(3)])  # (3 quantities, 3 chains, 200)
  together = mixing.summary(x)
  for i in range(3):
    alone = mixing.summary(x[i])
    for name in together:
      assert together[name][i] == pytest.approx(alone[name], rel=1e-12)
  assert np.isnan(mixing.rhat(np.ones((2, 10))))  # no variance: no ratio
  with pytest.raises(ValueError, match=r"shaped \(..., chains, draws\), got shape \(10,\)"):
    mixing.rhat(np.ones(10))
  with pytest.raises(ValueError, match="at least 4 draws per chain, got 2"):
    mixing.ess_bulk(np.ones((2, 5)))


@pytest.mark.skipif(importlib.util.find_spec("arviz") is None, reason="needs arviz")
def test_against_arviz():
  import arviz as az

  rng = np.random.default_rng(2)
  cases = [
    rng.normal(size=(4, 1000)),
    _ar1(0.9, 4, 1000),
    _ar1(0.99, 4, 501),
    _ar1(-0.6, 3, 200),
    rng.standard_cauchy(size=(8, 300)),
    rng.normal(size=(2, 9)),
  ]
  for x in cases:
    ours = mixing.summary(x)
    assert ours["rhat"] == pytest.approx(float(az.rhat(x, method="rank")), rel=1e-6)
    assert ours["ess_bulk"] == pytest.approx(float(az.ess(x, method="bulk")), rel=1e-6)
    assert ours["ess_tail"] == pytest.approx(float(az.ess(x, method="tail")), rel=1e-6)


def _quadratic(params, batch):
  """A loss whose tempered, localized posterior is Gaussian: ``½‖w‖²`` (times a batch mean of
  ones, so that the sampler has data to draw)."""
  return 0.5 * jnp.mean(batch["x"]) * jnp.sum(params["w"] ** 2)


DATA = {"x": jnp.ones((64, 1))}


def test_the_llc_result_carries_its_trace_and_a_mixed_chain_set_passes():
  # nβ = 100, γ = 1: each step relaxes w by ε(nβ + γ)/2 ≈ 0.1, so 2,000 draws are ~200 relaxation
  # times per chain.
  with warnings.catch_warnings():
    warnings.simplefilter("error", llc_lib.ChainsNotMixedWarning)
    r = llc_lib.estimate_llc(
      _quadratic, {"w": jnp.zeros(2)}, DATA, key=jax.random.key(0), num_chains=4,
      num_draws=2000, num_burnin=100, step_size=2e-3, nbeta=100.0, localization=1.0,
      batch_size=8,
    )  # fmt: skip
  assert r.llc_trace.shape == (4, 2000)
  np.testing.assert_allclose(r.llc_trace.mean(axis=1), r.llc_per_chain, rtol=1e-12)
  np.testing.assert_allclose(r.llc_trace, 100.0 * (r.loss_trace - 0.0), rtol=1e-6)  # L(w*) = 0
  assert r.diagnostics["rhat"] < mixing.RHAT_MAX
  assert r.diagnostics["ess_bulk"] >= 400 and r.diagnostics["ess_tail"] > 0
  assert r.diagnostics["rhat"] == pytest.approx(float(mixing.rhat(r.llc_trace)))


def test_a_chain_still_drifting_from_w_star_warns():
  # w* = 3 is far from the minimum, and the step relaxes w by 1/300 of the way: the draws fall
  # toward the minimum through the first half of the chain.
  with pytest.warns(llc_lib.ChainsNotMixedWarning, match=r"estimate_llc \(the LLC\): .*R̂ = "):
    r = llc_lib.estimate_llc(
      _quadratic, {"w": jnp.full(2, 3.0)}, DATA, key=jax.random.key(0), num_chains=4,
      num_draws=1000, step_size=6.6e-5, nbeta=100.0, localization=1.0, batch_size=8,
    )  # fmt: skip
  assert r.diagnostics["rhat"] > 1.05
