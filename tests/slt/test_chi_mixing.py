"""The mixing diagnostics of a susceptibility (mechjax.slt.susceptibility.chi_mixing): from streamed
power sums, equal to the same statistics computed on the stored draws; a planted drift is flagged;
well-mixed independent draws are not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import mixing
from mechjax.slt import susceptibility as sus
from mechjax.slt.moments import SegmentedMoments


def _streamed(phi, dloss, segments, every=1):
  """Runs :class:`SegmentedMoments` over stored draws ``(chains, S, K)`` and ``(chains, S, M)``, as
  the sampler's scan would (two burn-in steps first), and returns its per-chain state."""
  chains, s = phi.shape[:2]
  acc = SegmentedMoments(lambda w, data: (w[0], w[1]), 2, s, segments, every)

  def chain(p, d):
    def body(state, t):
      i = jnp.maximum(t - 2, 0)
      return acc.update(state, (p[i], d[i]), t, None), None

    first = acc.init((p[0], d[0]), None)
    return jax.lax.scan(body, first, jnp.arange(s + 2))[0]

  return jax.vmap(chain)(jnp.asarray(phi, jnp.float32), jnp.asarray(dloss, jnp.float32))


def _by_hand(phi, dloss, segments):
  """R̂ of the half-centred products over split chains, and the replicated batch-means ESS, from
  the draws themselves (float64)."""
  chains, s, _ = phi.shape

  def products(p, d):  # (..., n, K), (..., n, M) → (..., n, K, M), centred on their own means
    p, d = p - p.mean(-2, keepdims=True), d - d.mean(-2, keepdims=True)
    return p[..., :, None] * d[..., None, :]

  h = s // 2
  halves = np.concatenate([products(phi[:, :h], dloss[:, :h]), products(phi[:, h:], dloss[:, h:])])
  rhat = mixing._rhat(np.moveaxis(halves, (0, 1), (-2, -1)))  # (K, M) from (2·chains, n/2) traces
  whole = products(phi, dloss)  # (chains, S, K, M)
  lam2 = whole.var(1).mean(0) + whole.mean(1).var(0, ddof=1)
  b = s // segments
  seg = products(phi.reshape(chains, segments, b, -1), dloss.reshape(chains, segments, b, -1)).mean(
    2
  )  # (chains, G, K, M)
  sigma2 = b * ((seg - seg.mean((0, 1))) ** 2).sum((0, 1)) / (chains * segments - 1)
  return rhat, chains * s * lam2 / sigma2


def _ar1(rho, shape, rng):
  x = np.empty(shape)
  x[:, 0] = rng.normal(size=(shape[0], shape[2]))
  for t in range(1, shape[1]):
    x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.normal(size=(shape[0], shape[2]))
  return x


def test_the_streamed_diagnostics_are_those_of_the_stored_draws():
  rng = np.random.default_rng(0)
  common = _ar1(0.7, (4, 400, 1), rng)  # shared by φ and ΔL: a non-zero covariance
  phi = 3.0 + common + 0.5 * _ar1(0.7, (4, 400, 2), rng)
  dloss = 0.1 - 2 * common + _ar1(0.5, (4, 400, 3), rng)
  got = sus.chi_mixing(_streamed(phi, dloss, 20).sums)
  rhat, ess = _by_hand(phi, dloss, 20)
  np.testing.assert_allclose(got["rhat"], rhat, rtol=1e-5)
  np.testing.assert_allclose(got["ess"], ess, rtol=1e-3)
  assert got["rhat"].shape == got["ess"].shape == (2, 3)


def test_thinned_moments_are_those_of_every_kth_draw():
  rng = np.random.default_rng(3)
  phi, dloss = _ar1(0.9, (2, 120, 1), rng), _ar1(0.9, (2, 120, 2), rng)
  thinned = _streamed(phi, dloss, 4, every=3)
  kept = _streamed(phi[:, ::3], dloss[:, ::3], 4)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6), thinned, kept)
  assert float(thinned.moments.count[0]) == 40
  every = _streamed(phi, dloss, 4)
  assert not np.allclose(every.moments.comoment, kept.moments.comoment)


def test_a_drift_in_the_first_half_is_flagged_and_independent_draws_are_not():
  rng = np.random.default_rng(1)
  phi, dloss = rng.normal(size=(4, 2000, 1)), rng.normal(size=(4, 2000, 1))
  dloss = dloss + 0.5 * phi  # covariance 0.5
  mixed = sus.chi_mixing(_streamed(phi, dloss, 20).sums)
  assert mixed["rhat"].item() < mixing.RHAT_MAX
  assert mixed["ess"].item() > mixing.ESS_PER_CHAIN_MIN * 4
  # The first half's covariance is five times the second's in two chains: the chains disagree.
  drift = dloss.copy()
  drift[:2, :1000] += 2.0 * phi[:2, :1000]
  stuck = sus.chi_mixing(_streamed(phi, drift, 20).sums)
  assert stuck["rhat"].item() > 1.05
  assert stuck["ess"].item() < mixed["ess"].item() / 4


def test_too_few_draws_give_nan():
  phi = np.ones((2, 6, 1)) + np.arange(6.0)[None, :, None]
  got = sus.chi_mixing(_streamed(phi, phi, 2).sums)
  assert np.isnan(got["rhat"]).all() and np.isnan(got["ess"]).all()


def test_one_warning_line_gives_the_share_of_failing_entries():
  rng = np.random.default_rng(2)
  phi, dloss = rng.normal(size=(4, 2000, 1)), rng.normal(size=(4, 2000, 2))
  dloss[:2, :1000, :1] += 2.0 * phi[:2, :1000]  # only the first entry drifts
  sums = _streamed(phi, dloss, 20).sums
  with pytest.warns(mixing.ChainsNotMixedWarning, match=r"50% of its 2 entries fail"):
    out = sus._checked_mixing(sums, 4, ("all",))
  assert out["chi_rhat"].shape == (1, 2)
