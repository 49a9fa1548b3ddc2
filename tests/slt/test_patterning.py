"""Patterning: minimum-norm and simplex-constrained re-weightings, and training on re-weighted
data."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import gaussian
from mechjax.slt import patterning


def test_minimum_norm_reweighting_hits_the_target_and_has_the_smallest_norm():
  rng = np.random.default_rng(0)
  j, t = rng.normal(size=(3, 40)), rng.normal(size=3)
  dh = patterning.patterning_weights(j, t)
  np.testing.assert_allclose(j @ dh, t, atol=1e-10)
  np.testing.assert_allclose(
    dh, np.linalg.lstsq(j, t, rcond=None)[0], atol=1e-10
  )  # lstsq's is the min-norm one
  ridged = patterning.patterning_weights(j, t, ridge=0.5)
  np.testing.assert_allclose(
    ridged, j.T @ np.linalg.solve(j @ j.T + 0.5 * np.eye(3), t), atol=1e-10
  )
  assert np.linalg.norm(ridged) < np.linalg.norm(dh)


def test_simplex_reweighting_stays_a_distribution():
  rng = np.random.default_rng(1)
  j = rng.normal(size=(2, 30))
  small = 0.05 * (j @ (rng.dirichlet(np.ones(30)) - 1 / 30))  # reachable inside the simplex
  dh = patterning.patterning_weights(j, small, simplex=True)
  p = 1 / 30 + dh
  assert np.all(p >= 0) and abs(p.sum() - 1) < 1e-9
  np.testing.assert_allclose(j @ dh, small, atol=1e-6)
  big = 100 * np.ones(2)  # far outside: met as well as the simplex allows
  p = 1 / 30 + patterning.patterning_weights(j, big, simplex=True)
  assert np.all(p >= 0) and abs(p.sum() - 1) < 1e-9
  assert np.linalg.norm(j @ (p - 1 / 30) - big) < np.linalg.norm(big)


def test_project_simplex():
  np.testing.assert_allclose(patterning.project_simplex([0.2, 0.3, 0.5]), [0.2, 0.3, 0.5])
  np.testing.assert_allclose(patterning.project_simplex([2.0, 0.0, -1.0]), [1.0, 0.0, 0.0])
  np.testing.assert_allclose(patterning.project_simplex([0.5, 0.5, 0.5]), [1 / 3] * 3)


def test_bad_shapes_are_refused():
  with pytest.raises(ValueError, match="target_delta"):
    patterning.patterning_weights(np.ones((2, 5)), np.ones(3))
  with pytest.raises(ValueError, match="base"):
    patterning.patterning_weights(np.ones((1, 3)), [1.0], simplex=True, base=[0.5, 0.5, 0.5])


@pytest.mark.slow
def test_patterning_moves_the_exact_gaussian_posterior_as_asked():
  """Closed loop on Bayesian linear regression: the response to every single-sample shift is exact,
  the re-weighting asks E[w_0] to rise by 0.02 and the prediction to stay put, and the exact
  posterior under the new weights does that, to first order (the second-order error is a few percent
  of the target)."""
  p = gaussian.make_problem()
  p = dataclasses.replace(p, shifts=np.eye(p.n))
  j = gaussian.exact_response(p)[:2]  # (w_0, prediction) × n
  target = np.array([0.02, 0.0])
  dh = patterning.patterning_weights(j, target, simplex=True)
  uniform = np.full(p.n, 1 / p.n)
  with jax.enable_x64(True):
    moved = np.asarray(
      gaussian.exact_expectation(p, jnp.asarray(uniform + dh))
      - gaussian.exact_expectation(p, jnp.asarray(uniform))
    )[:2]
  np.testing.assert_allclose(moved, target, atol=0.002)


def test_weighted_problem_samples_by_weight():
  weights = np.zeros(10)
  weights[3], weights[7] = 3.0, 1.0
  data = {"i": jnp.arange(10)}
  problem = patterning.weighted_problem(
    lambda k: {},
    lambda params, b: (b["i"] == 3).astype(jnp.float32),
    data,
    weights,
    batch_size=4000,
  )
  share, _ = jax.jit(problem.loss)({}, jax.random.PRNGKey(0))
  assert abs(float(share) - 0.75) < 0.03  # sd of the share: sqrt(0.75 · 0.25 / 4000) = 0.007
  with pytest.raises(ValueError, match="non-negative"):
    patterning.weighted_problem(lambda k: {}, None, data, -weights, batch_size=4)


def test_group_response_is_the_exact_response_to_a_group_shift():
  """Shifting toward samples 0–19 as a group (the exact problem's third shift) is the mean of the 20
  single-sample responses: the response is linear in the target distribution."""
  p = gaussian.make_problem()
  singles = gaussian.exact_response(dataclasses.replace(p, shifts=np.eye(p.n)[:20]))
  group = gaussian.exact_response(p)[:, 2]
  np.testing.assert_allclose(
    patterning.group_response(singles, np.zeros(20, int))[:, 0], group, rtol=1e-8
  )


def test_group_response_se_is_the_error_of_a_mean_of_independent_members():
  # Group 0 holds three members with errors 1, 2, 2 (sqrt(9) / 3 = 1), group 1 one with error 5,
  # group 2 none (NaN).
  se = np.array([[1.0, 2.0, 5.0, 2.0], [2.0, 4.0, 10.0, 4.0]])
  out = patterning.group_response_se(se, np.array([0, 0, 1, 0]), num_groups=3)
  np.testing.assert_allclose(out[:, :2], [[1.0, 5.0], [2.0, 10.0]])
  assert np.all(np.isnan(out[:, 2]))
  # Matches the spread of group means of independent draws with those errors.
  draws = np.random.default_rng(0).normal(0, se[0], size=(40000, 4))
  means = [draws[:, [0, 1, 3]].mean(1), draws[:, 2]]
  np.testing.assert_allclose([m.std() for m in means], [1.0, 5.0], rtol=0.02)


def test_sample_weights_spread_group_mass_evenly():
  ids = np.array([0, 0, 1, 2, 2, 2])
  w = patterning.sample_weights([0.5, 0.2, 0.3], ids)
  np.testing.assert_allclose(w, [0.25, 0.25, 0.2, 0.1, 0.1, 0.1])
  with pytest.raises(ValueError, match="no sample"):
    patterning.sample_weights([0.5, 0.2, 0.2, 0.1], ids)


def test_step_limit_and_the_random_control_keep_weights_non_negative():
  base = np.array([0.1, 0.2, 0.3, 0.4])
  change = np.array([-0.05, -0.2, 0.1, 0.15])
  assert patterning.step_limit(base, change) == pytest.approx(1.0)  # the second weight hits 0
  assert patterning.step_limit(base, np.abs(change)) == np.inf
  gen = np.random.default_rng(0)
  small = patterning.random_change(base, 0.1, gen, strength=0.5)
  assert abs(small.sum()) < 1e-12 and np.abs(small).sum() == pytest.approx(0.1)
  big = patterning.random_change(base, 10.0, gen, strength=0.5)  # shrunk to half the limit
  assert abs(big.sum()) < 1e-12 and np.all(base + big >= 0)
  assert patterning.step_limit(base, big) == pytest.approx(2.0)
