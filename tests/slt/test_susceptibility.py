"""Susceptibilities: the covariance estimators, streamed moments, and the exact Gaussian linear
response."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import gaussian
from mechjax.slt import moments as mom_lib
from mechjax.slt import susceptibility as sus
from tests.helpers import expect_unmixed


def _draws(seed=0, s=500, k=3, m=4):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(s, 2))
  phi = np.c_[z[:, 0], z[:, 0] + z[:, 1], rng.normal(size=s)][:, :k]
  dloss = np.c_[z[:, 0], -z[:, 1], z[:, 0] * z[:, 1], rng.normal(size=s)][:, :m]
  return phi.astype(np.float32), dloss.astype(np.float32)


def test_linear_response_is_minus_nbeta_times_the_sample_covariance():
  phi, dloss = _draws()
  expected = -7.0 * np.cov(phi.T, dloss.T)[:3, 3:]
  np.testing.assert_allclose(sus.linear_response(phi, dloss, 7.0), expected, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(sus.susceptibility(phi, dloss), expected / 7.0, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_streamed_moments_equal_stored_draws_and_merge_across_chains():
  phi, dloss = _draws(s=300)
  step = jax.jit(mom_lib.moments_update)
  chains = []
  for part in np.array_split(np.arange(300), 3):  # three "chains" of unequal length (100 each here)
    mom = mom_lib.moments_init(3, 4)
    for i in part:
      mom = step(mom, phi[i], dloss[i])
    chains.append(mom)
  merged = mom_lib.moments_reduce(jax.tree.map(lambda *a: jnp.stack(a), *chains))
  np.testing.assert_allclose(
    mom_lib.moments_covariance(merged), sus.covariance(phi, dloss), rtol=1e-4, atol=1e-6
  )
  np.testing.assert_allclose(
    mom_lib.moments_covariance(chains[0]),
    sus.covariance(phi[:100], dloss[:100]),
    rtol=1e-4,
    atol=1e-6,
  )
  # A zero weight (burn-in inside a scan) changes nothing.
  same = mom_lib.moments_update(chains[0], phi[0] + 100, dloss[0], 0.0)
  jax.tree.map(np.testing.assert_array_equal, same, chains[0])


def test_bad_draws_are_refused():
  with pytest.raises(ValueError, match="same draws"):
    sus.covariance(np.zeros((5, 2)), np.zeros((4, 3)))
  with pytest.raises(ValueError, match="nbeta"):
    sus.linear_response(np.zeros((5, 2)), np.zeros((5, 3)), 0.0)


@pytest.mark.slow
def test_exact_gaussian_response_matches_exact_posterior_draws():
  """The fast version of theory/linear_response.py's first check: every entry within 3 standard
  errors, and an estimator missing the factor nβ (or with the wrong sign) is caught."""
  p = gaussian.make_problem()
  exact = gaussian.exact_response(p)
  phi, dloss = gaussian.exact_draws(p, 20_000)
  est = np.asarray(sus.linear_response(phi, dloss, p.nbeta))
  err = p.nbeta * np.asarray(sus.standard_error(phi, dloss))
  assert np.all(np.abs(est - exact) <= 3 * err), (est, exact, err)
  # The check has power: the wrong sign, or a response without the factor nβ, is far outside.
  assert not np.all(np.abs(-est - exact) <= 3 * err)
  assert not np.all(np.abs(est / p.nbeta - exact) <= 3 * err)


@pytest.mark.slow
def test_sgld_streamed_response_is_close_to_exact():
  p = gaussian.make_problem()
  exact = gaussian.exact_response(p)
  mom = gaussian.sgld_moments(p, num_chains=8, num_draws=4000, num_burnin=500, step_size=2e-4)
  est = p.nbeta * -np.asarray(mom_lib.moments_covariance(mom_lib.moments_reduce(mom)))
  per_chain = p.nbeta * -np.asarray(mom_lib.moments_covariance(mom))
  err = per_chain.std(0, ddof=1) / np.sqrt(8)
  assert np.all(np.abs(est - exact) <= 3 * err + 0.05 * np.abs(exact)), (est, exact, err)


def _gaussian_setup():
  p = gaussian.make_problem()
  data = {"x": jnp.asarray(p.x, jnp.float32), "y": jnp.asarray(p.y, jnp.float32)}
  per_sample = lambda w, b: gaussian.per_sample_loss(w["w"], b["x"], b["y"])
  return p, data, per_sample


@expect_unmixed
@pytest.mark.slow
def test_estimate_susceptibilities_matches_the_exact_response_of_the_training_loss():
  """With every sample in the evaluation subset, φ = L(w) − L(w*) and the probes toward samples 0
  and 1 are the exact problem's third observable and first two shifts."""
  p, data, per_sample = _gaussian_setup()
  probes = {"x": data["x"][:2], "y": data["y"][:2]}
  frozen = {"w": jnp.zeros(3)}
  res = sus.estimate_susceptibilities(
    per_sample,
    {"w": jnp.asarray(p.center, jnp.float32)},
    data,
    probes,
    key=jax.random.PRNGKey(0),
    components={"all": None, "none": frozen},
    num_chains=8,
    num_draws=4000,
    num_burnin=500,
    step_size=2e-4,
    nbeta=p.nbeta,
    localization=p.localization,
    batch_size=p.n,
    observable=lambda w, _: w["w"][:1],
  )  # w_0, the exact problem's first
  exact = gaussian.exact_response(p)[[2, 0], :2]  # (loss, w_0) × (toward sample 0, toward sample 1)
  assert (
    res.chi.shape == (2, 2, 2) and res.components == ("all", "none") and res.probe_shape == (2,)
  )
  err = res.standard_error[0] * p.nbeta
  assert np.all(np.abs(res.response[0] - exact) <= 3 * err + 0.05 * np.abs(exact)), (
    res.response[0],
    exact,
    err,
  )
  # The posterior of L(w) − L(w*) is d/2 · (nβ s / (nβ s + γ)) in expectation: just under 1.5 here.
  assert 1.3 < res.llc[0] < 1.6, res.llc
  np.testing.assert_array_equal(res.chi[1], 0.0)  # a component with no free weight does not move
  assert abs(res.llc[1]) < 1e-5  # L(w*) inside and outside the program differ by rounding only


@expect_unmixed
@pytest.mark.slow
def test_a_chunked_evaluation_subset_gives_the_same_susceptibilities():
  """``eval_chunk`` evaluates L in pieces (three of 3 samples and a rest of 2 here): the same χ and
  LLC to rounding; ``eval_every`` observes fewer draws, so χ changes but stays finite."""
  p, data, per_sample = _gaussian_setup()
  probes = {"x": data["x"][:2], "y": data["y"][:2]}
  run = lambda **kw: sus.estimate_susceptibilities(  # noqa: E731
    per_sample, {"w": jnp.asarray(p.center, jnp.float32)}, data, probes, key=jax.random.key(0),
    num_chains=2, num_draws=40, step_size=2e-4, nbeta=p.nbeta, localization=p.localization,
    batch_size=8, eval_size=11, **kw,
  )  # fmt: skip
  whole, chunked, thinned = run(), run(eval_chunk=3), run(eval_every=4)
  np.testing.assert_allclose(chunked.chi, whole.chi, rtol=1e-4, atol=1e-9)
  np.testing.assert_allclose(chunked.llc, whole.llc, rtol=1e-4)
  assert np.all(np.isfinite(thinned.chi)) and not np.allclose(thinned.chi, whole.chi)
  with pytest.raises(ValueError, match="eval_chunk must be None or an int of at least 1; got 0"):
    run(eval_chunk=0)


def test_principal_directions_recover_a_planted_rank_one_structure():
  rng = np.random.default_rng(0)
  u, v = rng.normal(size=4), rng.normal(size=50)
  v -= v.mean()
  pd = sus.principal_directions(np.outer(u, v) + 0.01 * rng.normal(size=(4, 50)))
  assert pd["explained_variance"][0] > 0.99
  assert abs(abs(pd["Vt"][0] @ v) / np.linalg.norm(v) - 1) < 1e-3


@pytest.mark.slow
def test_bif_matches_the_covariance_of_exact_posterior_draws():
  p, data, per_sample = _gaussian_setup()
  queries = {"x": data["x"][:2], "y": data["y"][:2]}
  train = {"x": data["x"][2:5], "y": data["y"][2:5]}
  got = sus.bif(
    per_sample,
    {"w": jnp.asarray(p.center, jnp.float32)},
    data,
    queries,
    train,
    key=jax.random.PRNGKey(1),
    num_chains=8,
    num_draws=4000,
    num_burnin=500,
    step_size=2e-4,
    nbeta=p.nbeta,
    localization=p.localization,
    batch_size=p.n,
  )
  with jax.enable_x64(True):
    mean, cov = gaussian.posterior(p, jnp.full(p.n, 1.0 / p.n))
    w = np.random.default_rng(0).multivariate_normal(
      np.asarray(mean), np.asarray(cov), size=200_000
    )
  losses = 0.5 * (p.y[:5] - w @ p.x[:5].T) ** 2  # (draws, 5)
  exact = -np.cov(losses.T)[:2, 2:]
  assert got.shape == (2, 3)
  np.testing.assert_allclose(got, exact, rtol=0.15, atol=0.1 * np.abs(exact).max())


@expect_unmixed
@pytest.mark.slow
def test_llc_response_adds_the_explicit_term_and_matches_the_exact_derivative():
  """Noise-free regression: every per-sample loss has its minimum at w*, so λ(q) = (nβ/2)·tr(S_q
  Σ_q) with S_q = Σ q_i x_i x_iᵀ and Σ_q = (nβ S_q + γI)⁻¹. Toward sample i (B_i = x_i x_iᵀ − S) its
  derivative is (nβ/2)·[tr(B_i Σ) − nβ·tr(S Σ B_i Σ)]: the explicit and implicit terms nearly
  cancel (λ ≈ d/2 whatever the weights), while the implicit term alone is of order d."""
  p = gaussian.make_problem(n=64, noise=0.0, localization=1.0)
  data = {"x": jnp.asarray(p.x, jnp.float32), "y": jnp.asarray(p.y, jnp.float32)}
  per_sample = lambda w, b: gaussian.per_sample_loss(w["w"], b["x"], b["y"])
  probes = {"x": data["x"][:6], "y": data["y"][:6]}
  res = sus.estimate_susceptibilities(
    per_sample,
    {"w": jnp.asarray(p.center, jnp.float32)},
    data,
    probes,
    key=jax.random.PRNGKey(1),
    num_chains=8,
    num_draws=8000,
    num_burnin=500,
    step_size=5e-4,
    nbeta=p.nbeta,
    localization=p.localization,
    batch_size=p.n,
    eval_size=p.n,
  )
  got = sus.llc_response(res)
  err = p.nbeta * p.nbeta * res.standard_error[0, 0]  # the implicit term's Monte-Carlo error
  s = p.x.T @ p.x / p.n
  cov = np.linalg.inv(p.nbeta * s + p.localization * np.eye(3))
  exact_implicit, exact_total = [], []
  for i in range(6):
    b = np.outer(p.x[i], p.x[i]) - s
    exact_implicit.append(-(p.nbeta**2) / 2 * np.trace(s @ cov @ b @ cov))
    exact_total.append(p.nbeta / 2 * np.trace(b @ cov) + exact_implicit[-1])
  exact_implicit, exact_total = np.array(exact_implicit), np.array(exact_total)
  scale = np.abs(exact_implicit).max()
  assert scale > 1.0  # the implicit term alone is far from the answer
  assert got["total"].shape == (1, 6)
  assert np.all(np.abs(got["implicit"][0] - exact_implicit) <= 3 * err + 0.05 * scale), (
    got["implicit"],
    exact_implicit,
    err,
  )
  # The total's error is the implicit term's less what the explicit term shares with it.
  assert np.all(np.abs(got["total"][0] - exact_total) <= 3 * err + 0.05 * scale), (
    got["total"],
    exact_total,
    err,
  )
  assert np.abs(exact_total).max() < 0.1 * scale
  np.testing.assert_allclose(got["total"], got["implicit"] + got["explicit"], rtol=1e-6)


def test_analyze_compiles_without_evaluating_the_loss():
  """``analyze=True`` only compiles: not one loss is evaluated, not even ``L(w*)`` on the
  evaluation subset (at a pretrained model's size that forward pass alone can exceed the device)."""
  p, data, per_sample = _gaussian_setup()
  evaluated = []

  def counted(w, b):
    jax.debug.callback(lambda: evaluated.append(1))
    return per_sample(w, b)

  probes = {"x": data["x"][:2], "y": data["y"][:2]}
  mem = sus.estimate_susceptibilities(
    counted, {"w": jnp.asarray(p.center, jnp.float32)}, data, probes, key=jax.random.key(0),
    num_chains=2, num_draws=4, step_size=2e-4, nbeta=p.nbeta, localization=p.localization,
    batch_size=8, eval_size=11, eval_chunk=3,
    analyze=True,
  )  # fmt: skip
  jax.effects_barrier()
  assert mem.temp_size_in_bytes >= 0 and mem.argument_size_in_bytes > 0
  assert evaluated == []
