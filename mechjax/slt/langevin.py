"""The Langevin kernel: the tempered, localised potential and one (preconditioned) SGLD step, each a
pure function of arrays, knowing nothing of chains, devices or data.

The target is ``p(w) ∝ exp(−nβ·L_n(w) − (γ/2)‖w − w*‖²)`` (Lau et al. 2023, arXiv:2308.12108), where
``L_n`` is the mean loss over the ``n`` samples, ``nβ`` the inverse temperature times ``n`` and
``γ`` the strength of the localization at ``w*``. One step, in devinterp's convention, is

    Δw = −(ε/2)·[nβ·∇L_B(w) + γ·(w − w*)] + √ε·ξ,      ξ ~ N(0, I),

with ``L_B`` the mean loss on a minibatch ``B``. ``nβ`` multiplies the *mean* minibatch loss, so it
plays the role of ``n·β`` whatever the batch size (:func:`mechjax.slt.settings.default_nbeta`).

With an RMSProp decay ``α`` the step is preconditioned as in pSGLD (Li et al. 2016, without the Γ
correction term): ``V ← αV + (1 − α)(∇L_B)²``, ``G = 1/(√V + δ)``, ``Δw = −(ε/2)·G⊙[…] +
√ε·√G⊙ξ``. A 0/1 ``mask`` like ``w`` holds the coordinates where it is 0 at ``w*``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from mechjax.slt import noise as noise_lib

Params = Any


@dataclasses.dataclass(frozen=True)
class MeanLoss:
  """``loss(params, batch) = mean(per_sample_loss(params, batch))``, hashable by its function:
  samplers built from equal ``MeanLoss`` objects share one compiled program."""

  per_sample_loss: Callable[[Params, Any], jax.Array]

  def __call__(self, params, batch):
    return jnp.mean(self.per_sample_loss(params, batch))


def tree_dot(a, b):
  """``Σ_leaves ⟨a, b⟩``: the inner product of two trees of the same structure."""
  return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _pieces(batch, microbatch: int):
  """``batch``'s leaves as ``(batch_size / microbatch, microbatch, ...)``: consecutive pieces."""
  return jax.tree.map(lambda a: a.reshape((-1, microbatch) + a.shape[1:]), batch)


def batch_value_and_grad(loss_fn, w, batch, microbatch: int | None = None):
  """``(L_B(w), ∇L_B(w))``. With ``microbatch``, the batch in consecutive pieces of that many
  samples under a ``lax.scan``, the pieces' losses and gradients averaged: the whole batch's, to
  rounding, when the loss is a mean over samples, with only one piece's activations live at a
  time."""
  if microbatch is None:
    return jax.value_and_grad(loss_fn)(w, batch)
  pieces = _pieces(batch, microbatch)
  num = jax.tree.leaves(pieces)[0].shape[0]
  first = jax.eval_shape(loss_fn, w, jax.tree.map(lambda a: a[0], pieces))
  zero = (jnp.zeros(first.shape, first.dtype), jax.tree.map(jnp.zeros_like, w))

  def add(total, piece):
    return jax.tree.map(jnp.add, total, jax.value_and_grad(loss_fn)(w, piece)), None

  total, _ = jax.lax.scan(add, zero, pieces)
  return jax.tree.map(lambda x: x / num, total)


def batch_loss(loss_fn, w, batch, microbatch: int | None = None) -> jax.Array:
  """``L_B(w)``, by pieces of ``microbatch`` samples under a ``lax.scan`` when it is set (the mean
  of the pieces' losses, as :func:`batch_value_and_grad`)."""
  if microbatch is None:
    return loss_fn(w, batch)
  losses = jax.lax.map(lambda piece: loss_fn(w, piece), _pieces(batch, microbatch))
  return jnp.mean(losses)


def potential_and_grad(
  loss_fn, w, w_star, batch, mask, nbeta: float, localization: float, microbatch=None
):
  """``(U, L_B, ∇U, ∇L_B)`` at ``w`` with ``U = nβ·L_B(w) + (γ/2)‖w − w*‖²``, the tempered,
  localised potential whose Gibbs measure ``exp(−U)`` SGLD samples (Lau et al. 2023, eq. 4); both
  gradients are multiplied by ``mask`` (0 on the coordinates held at ``w*``). ``microbatch``: see
  :func:`batch_value_and_grad`."""
  loss, loss_grad = batch_value_and_grad(loss_fn, w, batch, microbatch)
  diff = jax.tree.map(lambda a, b: a - b, w, w_star)
  value = nbeta * loss + 0.5 * localization * tree_dot(diff, diff)
  loss_grad = jax.tree.map(lambda g, m: g * m, loss_grad, mask)
  grad_u = grad_potential(loss_grad, w, w_star, mask, nbeta, localization)
  return value, loss, grad_u, loss_grad


def grad_potential(loss_grad, w, w_star, mask, nbeta: float, localization: float):
  """``∇U = nβ·∇L_B + γ·(w − w*)·mask`` from the masked ``∇L_B`` (:func:`potential_and_grad`)."""
  return jax.tree.map(
    lambda g, a, b, m: nbeta * g + localization * (a - b) * m, loss_grad, w, w_star, mask
  )


def rmsprop_preconditioner(v, loss_grad, decay: float | None, eps: float):
  """``(v', G)``: pSGLD's running mean square ``v' = α v + (1 − α) (∇L_B)²`` and the diagonal
  preconditioner ``G = 1 / (√v' + δ)`` (Li et al. 2016, eqs. 4–5); with ``decay`` None, plain
  SGLD: ``v`` unchanged and ``G = 1``, a scalar per leaf (it broadcasts; an array of ones would be
  a parameter-sized buffer on every step wherever it is an operand, as of the MALA check's
  ``lax.cond``)."""
  if decay is None:
    return v, jax.tree.map(lambda g: jnp.ones((), g.dtype), loss_grad)
  v = jax.tree.map(lambda v_, g: decay * v_ + (1 - decay) * g**2, v, loss_grad)
  return v, jax.tree.map(lambda v_: 1.0 / (jnp.sqrt(v_) + eps), v)


def langevin_step(w, grad_u, precond, standard_noise, mask, step_size: float):
  """``(w', ξ)``: ``w' = w − (ε/2) G ∇U + ξ`` with ``ξ = √(ε G) · z · mask`` for standard normal
  ``z`` (Welling & Teh 2011, eq. 4, with pSGLD's ``G``)."""
  noise = scaled_noise(standard_noise, precond, mask, step_size)
  w_new = jax.tree.map(
    lambda w_, p, g, z: w_ - 0.5 * step_size * p * g + z, w, precond, grad_u, noise
  )
  return w_new, noise


def scaled_noise(standard_noise, precond, mask, step_size: float):
  """``ξ = √(ε G) · z · mask``: :func:`langevin_step`'s noise from its standard normals ``z``."""
  return jax.tree.map(
    lambda z, p, m: jnp.sqrt(step_size * p) * z * m, standard_noise, precond, mask
  )


def log_proposal(w_to, w_from, grad_from, precond, mask, step_size: float):
  """``log N(w_to; w_from − (ε/2) G ∇U(w_from), ε G)`` up to a constant that cancels in the
  Metropolis–Hastings ratio."""
  mean = jax.tree.map(lambda w, g, p: w - 0.5 * step_size * p * g, w_from, grad_from, precond)
  resid = jax.tree.map(lambda a, b, p, m: (a - b) * m / jnp.sqrt(p), w_to, mean, precond, mask)
  return -tree_dot(resid, resid) / (2 * step_size)


def mala_acceptance(u_w, u_new, w, w_new, grad_u, grad_new, precond, mask, step_size: float):
  """The MALA acceptance probability of the move ``w → w'``, ``min(1, exp(U(w) − U(w') + log q(w |
  w') − log q(w' | w)))`` (Roberts & Tweedie 1996), as float32."""
  log_ratio = (
    u_w
    - u_new
    + log_proposal(w, w_new, grad_new, precond, mask, step_size)
    - log_proposal(w_new, w, grad_u, precond, mask, step_size)
  )
  return jnp.minimum(1.0, jnp.exp(jnp.minimum(log_ratio, 0.0))).astype(jnp.float32)


def noise_keys(key: jax.Array, noise_slots, impl: str = "threefry") -> jax.Array:
  """The keys of the moved leaves' noise: ``split(key, number of float leaves)`` taken at each moved
  leaf's slot (:func:`mechjax.slt.params.noise_slots`). With ``impl`` other than threefry they are
  split from a key of that implementation whose data are 128 bits of ``key``."""
  if impl != "threefry":
    key = jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl=impl)
  slots, num_float = noise_slots
  return jax.random.split(key, num_float)[slots]


def normal_noise(key: jax.Array, w: Params, noise_slots, impl: str = "threefry") -> Params:
  """Standard normal noise ``ξ`` shaped like ``w``, each leaf from its own slot's key
  (:func:`noise_keys`), so that a restricted chain draws the unrestricted one's noise; the numbers
  of ``jax.random.normal``, computed by :func:`mechjax.slt.noise.normals`."""
  leaves, treedef = jax.tree.flatten(w)
  keys = noise_keys(key, noise_slots, impl)
  requests = [(k, x.shape, x.dtype, None, None) for k, x in zip(keys, leaves)]
  return jax.tree.unflatten(treedef, noise_lib.normals(requests))
