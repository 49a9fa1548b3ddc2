"""The SGLD step's pieces (mechjax.slt.sgld), each against its formula written out by hand."""

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.slt import langevin
from mechjax.slt import params as params_lib


def _loss(w, batch):
  return 0.5 * jnp.mean((batch["x"] @ w["w"] - batch["y"]) ** 2)


def test_the_potential_is_the_tempered_localised_loss_and_its_gradient_is_masked():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(16, 3)), rng.normal(size=16)
  w, star = {"w": rng.normal(size=3)}, {"w": rng.normal(size=3)}
  mask = {"w": np.array([1.0, 0.0, 1.0])}
  u, loss, grad_u, grad_l = langevin.potential_and_grad(
    _loss, w, star, {"x": x, "y": y}, mask, nbeta=7.0, localization=3.0
  )
  r = x @ w["w"] - y
  want_loss = 0.5 * np.mean(r**2)
  d = w["w"] - star["w"]
  np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
  np.testing.assert_allclose(u, 7.0 * want_loss + 1.5 * d @ d, rtol=1e-6)
  g = x.T @ r / 16
  np.testing.assert_allclose(grad_l["w"], g * mask["w"], rtol=1e-6)
  np.testing.assert_allclose(grad_u["w"], (7.0 * g + 3.0 * d) * mask["w"], rtol=1e-6)


def test_the_rmsprop_preconditioner_and_plain_sgld():
  v, g = {"w": jnp.array([1.0, 4.0])}, {"w": jnp.array([2.0, 0.0])}
  same, ones = langevin.rmsprop_preconditioner(v, g, None, 1e-8)
  assert same is v and ones["w"].shape == () and float(ones["w"]) == 1.0
  v2, precond = langevin.rmsprop_preconditioner(v, g, 0.9, 0.5)
  np.testing.assert_allclose(v2["w"], [0.9 + 0.4, 3.6], rtol=1e-6)
  np.testing.assert_allclose(precond["w"], 1 / (np.sqrt([1.3, 3.6]) + 0.5), rtol=1e-6)


def test_the_langevin_step_drifts_down_the_gradient_and_adds_scaled_masked_noise():
  w, grad = {"w": jnp.array([1.0, 2.0, 3.0])}, {"w": jnp.array([4.0, -2.0, 1.0])}
  precond, mask = {"w": jnp.array([1.0, 0.25, 4.0])}, {"w": jnp.array([1.0, 1.0, 0.0])}
  z = {"w": jnp.array([0.5, -1.0, 2.0])}
  w_new, noise = langevin.langevin_step(w, grad, precond, z, mask, step_size=0.01)
  want_noise = np.sqrt(0.01 * np.array([1.0, 0.25, 4.0])) * np.array([0.5, -1.0, 0.0])
  np.testing.assert_allclose(noise["w"], want_noise, rtol=1e-6)
  drift = 0.005 * np.array([1.0, 0.25, 4.0]) * np.array([4.0, -2.0, 1.0])
  np.testing.assert_allclose(w_new["w"], np.array([1.0, 2.0, 3.0]) - drift + want_noise, rtol=1e-6)


def test_the_mala_acceptance_is_the_metropolis_hastings_ratio_of_the_langevin_proposal():
  # U(w) = w² / 2 in one dimension; the Langevin proposal is N(w − (ε/2) w, ε).
  eps, w, w_new = 0.3, 0.2, 1.5
  log_q = lambda to, frm: -((to - (frm - 0.5 * eps * frm)) ** 2) / (2 * eps)  # noqa: E731
  log_ratio = w**2 / 2 - w_new**2 / 2 + log_q(w, w_new) - log_q(w_new, w)
  want = min(1.0, np.exp(log_ratio))
  arr = lambda v: {"w": jnp.array([v])}  # noqa: E731
  got = langevin.mala_acceptance(
    w**2 / 2, w_new**2 / 2, arr(w), arr(w_new), arr(w), arr(w_new), arr(1.0), arr(1.0), eps
  )
  assert got.dtype == jnp.float32 and 0.05 < want < 0.95
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # The move back is accepted with probability one when the forward one is not.
  back = langevin.mala_acceptance(
    w_new**2 / 2, w**2 / 2, arr(w_new), arr(w), arr(w_new), arr(w), arr(1.0), arr(1.0), eps
  )
  assert float(back) == 1.0


def test_sampled_part_keeps_each_float_leaf_s_noise_slot():
  full = {"a": jnp.ones(2), "n": jnp.arange(3), "b": jnp.ones(4)}  # an integer leaf in between
  star, fixed, mask, (slots, num) = params_lib.sampled_part(full, None, (True, False, False))
  assert jax.tree.leaves(star)[0].shape == (2,) and num == 2 and list(slots) == [0]
  star, fixed, mask, (slots, num) = params_lib.sampled_part(full, None, None)
  assert list(slots) == [0, 1] and num == 2


def test_a_chain_step_s_acceptance_is_that_of_its_own_move():
  """``Chain.step`` with ``mala_every=1``: the acceptance it reports is the Metropolis–Hastings
  ratio of the move it made, from ``U`` and ``∇U`` at both ends on the step's batch (the chain
  hands ``∇L_B`` to the check, which forms ``∇U`` with the localisation itself)."""
  from mechjax.slt import chain as chain_lib
  from mechjax.slt import settings as settings_lib

  rng = np.random.default_rng(1)
  batch = {"x": jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)}
  batch["y"] = jnp.asarray(rng.normal(size=8), jnp.float32)
  star = {"w": jnp.asarray(rng.normal(size=3), jnp.float32)}
  s = settings_lib.SGLDSettings(
    step_size=0.3, localization=10.0, nbeta=4.0, batch_size=8, mala_every=1
  )
  chain = chain_lib.Chain(_loss, star, jax.random.key(2), s, data=batch)
  w, v, acc = chain.start()
  w = {"w": w["w"] + 0.3}  # away from w*, so that the localisation's gradient matters
  (w_new, _, _), out = chain.step((w, v, acc), jnp.asarray(1), batch)
  ones = {"w": jnp.ones(3)}
  u0, _, g0, _ = langevin.potential_and_grad(_loss, w, star, batch, ones, 4.0, 10.0)
  u1, _, g1, _ = langevin.potential_and_grad(_loss, w_new, star, batch, ones, 4.0, 10.0)
  want = langevin.mala_acceptance(u0, u1, w, w_new, g0, g1, ones, ones, 0.3)
  assert 0.01 < float(want) < 0.99
  np.testing.assert_allclose(out["acceptance"], want, rtol=1e-5)
