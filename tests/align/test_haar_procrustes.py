"""Procrustes fits and calibrated Haar tests (mechjax.align)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from scipy import integrate
from scipy import stats

from mechjax.align import haar as H
from mechjax.align.procrustes import generalized_procrustes
from mechjax.align.procrustes import orthogonal_procrustes
from mechjax.align.procrustes import procrustes_fit

RNG = np.random.default_rng(0)


def _pair(n=300, d=8, noise=0.1, seed=0, det=1):
  rng = np.random.default_rng(seed)
  a = rng.normal(size=(n, d)).astype(np.float32)
  r = np.array(H.haar_orthogonal(jax.random.PRNGKey(seed), d, special=True), np.float32)
  if det < 0:
    r[:, 0] *= -1
  return a, a @ r + noise * rng.normal(size=(n, d)).astype(np.float32), r


def test_matches_scipy_and_recovers_a_planted_rotation():
  for seed in range(3):
    a, b, r_true = _pair(seed=seed)
    r = np.asarray(orthogonal_procrustes(a, b))
    r_scipy, _ = scipy.linalg.orthogonal_procrustes(a, b)
    np.testing.assert_allclose(r, r_scipy, atol=1e-5)
    np.testing.assert_allclose(r, r_true, atol=0.05)


def test_special_gives_det_plus_one_and_is_optimal_in_so_d():
  a, b, _ = _pair(det=-1, noise=0.3)
  r_o = np.asarray(orthogonal_procrustes(a, b))
  r_so = np.asarray(orthogonal_procrustes(a, b, special=True))
  assert np.linalg.det(r_o) < 0 < np.linalg.det(r_so)
  np.testing.assert_allclose(np.linalg.det(r_so), 1.0, atol=1e-5)
  best = np.linalg.norm(a @ r_so - b)
  assert np.linalg.norm(a @ r_o - b) <= best + 1e-4  # O(d) can only do better
  # No SO(d) matrix nearby does better: random rotations of the optimum and random SO(d) samples.
  for k in range(200):
    q = np.asarray(H.haar_orthogonal(jax.random.PRNGKey(k), 8, special=True))
    assert np.linalg.norm(a @ q - b) >= best - 1e-4
    small = scipy.linalg.expm(0.05 * (lambda m: m - m.T)(RNG.normal(size=(8, 8))))
    assert np.linalg.norm(a @ (r_so @ small) - b) >= best - 1e-4


def test_center_and_scale():
  a, _, r = _pair(noise=0.0)
  b = 2.5 * a @ r + 3.0
  r_fit, s = orthogonal_procrustes(a, b, center=True, scale=True)
  np.testing.assert_allclose(r_fit, r, atol=1e-4)
  np.testing.assert_allclose(s, 2.5, rtol=1e-4)


def test_rank_deficiency_is_reported():
  a, b, _ = _pair(n=5)
  with pytest.warns(RuntimeWarning, match="rank 5 < d = 8"):
    orthogonal_procrustes(a, b)
  assert int(procrustes_fit(a, b).rank) == 5
  with pytest.warns(
    RuntimeWarning, match="rank 5 < d = 8"
  ):  # float64 numpy input, float32 JAX arithmetic
    orthogonal_procrustes(a.astype(np.float64), b.astype(np.float64))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    orthogonal_procrustes(*_pair()[:2])  # full rank: silent


def test_batched_and_jitted():
  pairs = [_pair(seed=s) for s in range(4)]
  a = jnp.stack([p[0] for p in pairs])
  b = jnp.stack([p[1] for p in pairs])
  rs = jax.jit(lambda a, b: procrustes_fit(a, b, special=True).R)(a, b)
  for i in range(4):
    np.testing.assert_allclose(rs[i], orthogonal_procrustes(a[i], b[i], special=True), atol=1e-5)
  with pytest.raises(ValueError, match=r"shape \(\.\.\., n, d\)"):
    orthogonal_procrustes(a[0], b[0, :, :4])


def test_generalized_procrustes_recovers_a_common_frame():
  rng = np.random.default_rng(1)
  base = rng.normal(size=(200, 6)).astype(np.float32)
  rots = [np.asarray(H.haar_orthogonal(jax.random.PRNGKey(k), 6)) for k in range(3)]
  acts = jnp.stack(
    [base @ q.T + 0.01 * rng.normal(size=base.shape).astype(np.float32) for q in rots]
  )
  rs, consensus = generalized_procrustes(acts)
  aligned = acts @ rs
  for k in range(1, 3):
    # Two copies with independent noise of sd 0.01 differ by sd 0.014 per entry once aligned: the
    # RMS is near that, and no entry of the 1200 is off by 7 sd.
    diff = np.asarray(aligned[k] - aligned[0])
    assert np.sqrt(np.mean(diff**2)) < 0.02 and np.abs(diff).max() < 0.1
  # Each R_k undoes its rotation up to one common rotation: Q_k^T R_k is the same for all k.
  common = [rots[k].T @ np.asarray(rs[k]) for k in range(3)]
  np.testing.assert_allclose(common[1], common[0], atol=0.02)


# The Monte Carlo calibrations run once, as JAX's defaults (float32): under x64 the same statistics
# come from float64 draws, and the fast tests of both precisions check the paths that differ.
ONE_PRECISION = pytest.mark.parametrize("precision", ["float32"], indirect=True)


@pytest.mark.slow
@ONE_PRECISION
@pytest.mark.parametrize("d", [6, 7, 10])
def test_weyl_density_matches_monte_carlo(d):
  assert abs(integrate.quad(lambda t: H.eigenangle_density(t, d), 0, np.pi)[0] - 1) < 1e-6
  qs = np.asarray(
    H.haar_orthogonal(jax.random.PRNGKey(d), d, special=True, shape=(3000,)), np.float64
  )
  angles = np.concatenate([H.eigenangles(q) for q in qs])
  assert len(angles) == 3000 * (d // 2)
  cdf = lambda x: np.array(
    [integrate.quad(lambda t: H.eigenangle_density(t, d), 0, v)[0] for v in np.atleast_1d(x)]
  )
  edges = np.linspace(0, np.pi, 9)
  expected = np.diff(cdf(edges)) * len(angles)
  counts = np.histogram(angles, edges)[0]
  # Angles within a matrix are dependent (they repel), so use a generous 5-sigma binomial band per
  # bin.
  assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 10), (counts, expected)


@pytest.mark.slow
@ONE_PRECISION
def test_haar_test_p_values_are_uniform_under_haar():
  d, draws = 6, 150
  ps = {name: [] for name in H.TAILS}
  for i in range(draws):
    r = np.asarray(H.haar_orthogonal(jax.random.PRNGKey(1000 + i), d, special=(i % 2 == 0)))
    for name, res in H.haar_test(r, jax.random.PRNGKey(i), num_null=99).items():
      ps[name].append(res["p_value"])
  for name, p in ps.items():
    assert stats.kstest(p, "uniform").pvalue > 0.001, (name, np.mean(p))
    assert np.mean(np.array(p) <= 0.05) < 0.12, name  # size of the test at 5%


@pytest.mark.parametrize("d", [16, 32])
def test_signed_permutation_passes_the_old_tests_and_fails_the_new_ones(d):
  rng = np.random.default_rng(d)
  p = np.eye(d)[rng.permutation(d)] * rng.choice([-1.0, 1.0], d)[:, None]
  res = H.haar_test(p, jax.random.PRNGKey(0), num_null=99)
  assert res["frobenius_to_identity"]["p_value"] > 0.05
  assert abs(res["frobenius_to_identity"]["value"] - np.sqrt(2 * d)) < 3.0
  assert res["signed_permutation_distance"]["value"] == 0.0
  assert res["signed_permutation_distance"]["p_value"] <= 0.01
  assert res["max_abs_entry_per_row"]["p_value"] <= 0.01


def test_nearest_signed_permutation_puts_the_matched_entries_on_the_diagonal():
  rng = np.random.default_rng(1)
  p = np.eye(6)[rng.permutation(6)] * rng.choice([-1.0, 1.0], 6)[:, None]
  r = p @ scipy.linalg.expm(0.1 * (lambda a: a - a.T)(rng.normal(size=(6, 6))))  # near p
  np.testing.assert_array_equal(np.abs(p[:, H.nearest_signed_permutation(r)]), np.eye(6))
  np.testing.assert_allclose(H.signed_permutation_distance(r), np.linalg.norm(r - p), rtol=0.05)


@pytest.mark.slow
def test_a_reflection_is_tested_against_reflections(precision):
  r = np.array(H.haar_orthogonal(jax.random.PRNGKey(3), 5, special=True), np.float64)
  r[
    :, 0
    # det -1: the null must be drawn from the same coset (it was changed in place, read-only in x64)
  ] *= -1
  res = H.haar_test(jnp.asarray(r), jax.random.PRNGKey(4), num_null=19)
  assert np.linalg.det(r) < 0 and all(0 < v["p_value"] <= 1 for v in res.values())
  assert res["frobenius_to_identity"]["null_mean"] > 0


def test_non_finite_activations_are_refused_by_name():
  x, y = np.ones((8, 3)), np.ones((8, 3))
  x[2, 1] = np.nan
  with pytest.raises(ValueError, match="source has 1 non-finite entries"):
    orthogonal_procrustes(x, y)
  y[0, 0] = np.inf
  with pytest.raises(ValueError, match="target has 1 non-finite entries"):
    procrustes_fit(np.ones((8, 3)), y)


def test_haar_test_refuses_non_orthogonal_input():
  with pytest.raises(ValueError, match="must be orthogonal"):
    H.haar_test(np.ones((4, 4)), jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="square"):
    H.haar_test(np.ones((4, 3)), jax.random.PRNGKey(0))


def _outlier_activations(n=256, d=16, seed=0):
  """Activations with two basis-aligned outlier coordinates (a privileged basis)."""
  y = np.random.default_rng(seed).normal(size=(n, d))
  y[:, :2] *= 8.0
  return y


@pytest.mark.slow
@ONE_PRECISION
def test_privileged_basis_test_is_calibrated_on_randomly_rotated_activations():
  # x = y Q with Q Haar: nothing singles out the axes, whatever y is, so p must be uniform.
  y = _outlier_activations(d=8)
  qs = np.asarray(H.haar_orthogonal(jax.random.PRNGKey(5), 8, shape=(120,)))
  ps = [
    H.privileged_basis_test(y @ q, jax.random.PRNGKey(i), num_null=49)["p_value"]
    for i, q in enumerate(qs)
  ]
  assert stats.kstest(ps, "uniform").pvalue > 0.001, np.mean(ps)
  assert np.mean(np.array(ps) <= 0.05) < 0.12


def test_privileged_basis_test_detects_basis_aligned_outliers():
  y = _outlier_activations()
  res = H.privileged_basis_test(y, jax.random.PRNGKey(0), num_null=99)
  assert (
    res["p_value"] == pytest.approx(1 / 100)
    and res["value"] > res["null_mean"] + 5 * res["null_sd"]
  )
  with pytest.raises(ValueError, match="shape"):
    H.privileged_basis_test(y[:, :3], jax.random.PRNGKey(0))


@pytest.mark.slow
def test_fast_statistics_equal_scipy_and_batched_eigenangles_equal_single():
  x = np.random.default_rng(0).normal(size=57)
  assert H._ks_statistic(x, stats.norm.cdf) == pytest.approx(
    stats.kstest(x, "norm").statistic, abs=1e-12
  )
  assert H._excess_kurtosis(x) == pytest.approx(stats.kurtosis(x), abs=1e-12)
  for d, special in ((5, True), (6, False), (7, False)):
    qs = np.array(H.haar_orthogonal(jax.random.PRNGKey(d), d, special=True, shape=(4,)), np.float64)
    if not special:
      qs[:, :, 0] *= -1
    np.testing.assert_allclose(
      H.eigenangles(qs), np.stack([H.eigenangles(q) for q in qs]), atol=1e-12
    )


def test_a_reference_built_once_gives_each_matrix_the_test_of_its_own_key():
  d = 8
  rs = [
    np.asarray(H.haar_orthogonal(jax.random.key(s), d, special=True), np.float64) for s in (1, 2)
  ]
  ref = H.haar_reference(d, False, jax.random.key(0), num_null=39)
  for r in rs:
    assert H.haar_test(r, reference=ref) == H.haar_test(r, jax.random.key(0), num_null=39)
  flipped = rs[0].copy()
  flipped[:, 0] *= -1
  with pytest.raises(ValueError, match="the reference is of d=8, det \\+1; r is of d=8, det -1"):
    H.haar_test(flipped, reference=ref)
  with pytest.raises(ValueError, match="needs a key, or a reference"):
    H.haar_test(rs[0])
