"""Training sparse autoencoders with the training core: many SAEs, one per buffer of activations, in
one vmapped program (:mod:`mechjax.models.sae` holds the model and its loss).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from mechjax.models.sae import SAE
from mechjax.models.sae import sae_loss
from mechjax.train import loop


def train_saes(
  model: SAE, buffers_MxNxD: jax.Array, key: jax.Array, *, steps: int, batch_size: int, lr: float
):
  """``M`` SAEs, one per buffer of activations, trained together in one vmapped program with the
  training core's step and scan (:mod:`mechjax.train.loop`) and :func:`sae_loss`: Adam, each step
  on ``batch_size`` rows of its buffer drawn with replacement.

  Args:
    model: the :class:`SAE` every buffer gets.
    buffers_MxNxD: ``M`` buffers of ``N`` activations of width ``D``.
    key: PRNG key, split into one per SAE (its init and its batches).
    steps: optimizer steps.
    batch_size: rows per step.
    lr: Adam's step size.

  Returns:
    ``(params_M, mse_M)``: the params with a leading ``M`` axis, and each SAE's reconstruction MSE
    averaged over the last tenth of the steps.
  """
  optimizer = optax.adam(lr)

  def one(buffer_NxD, k):
    def loss(params, kk):
      idx = jax.random.randint(kk, (batch_size,), 0, buffer_NxD.shape[0])
      return sae_loss(model, params, buffer_NxD[idx])

    problem = loop.Problem(init=lambda kk: model.init(kk, buffer_NxD[:1]), loss=loss)
    state = loop.init_state(problem, optimizer, k)
    state, per_step = loop.scan_steps(loop.make_train_step(problem, optimizer), state, steps)
    return state["params"], jnp.mean(per_step["mse"][-max(steps // 10, 1) :])

  keys = jax.random.split(key, buffers_MxNxD.shape[0])
  return jax.jit(jax.vmap(one))(buffers_MxNxD, keys)


def train_unit_rms_saes(
  model: SAE, buffers_MxNxD: jax.Array, key: jax.Array, *, steps: int, batch_size: int, lr: float
) -> tuple[list[tuple[dict, jax.Array]], jax.Array]:
  """:func:`train_saes` on each buffer divided by its root-mean-square entry, so that one learning
  rate suits buffers of any scale.

  Args:
    model: the :class:`SAE` every buffer gets.
    buffers_MxNxD: ``M`` buffers of ``N`` activations of width ``D``, each at its own scale.
    key: PRNG key, as for :func:`train_saes`.
    steps: optimizer steps.
    batch_size: rows per step.
    lr: Adam's step size.

  Returns:
    ``(saes, mse_M)``: per buffer, on the host, the pair ``(params, norm)`` of its SAE and the RMS
    its inputs are divided by (the form :func:`mechjax.align.transfer.sae_transfer` takes), and each
    SAE's MSE as :func:`train_saes` gives it (on the scaled buffer).
  """
  norms_M = jnp.sqrt(jnp.mean(buffers_MxNxD**2, axis=(-2, -1)))
  params_M, mse_M = train_saes(
    model, buffers_MxNxD / norms_M[:, None, None], key, steps=steps, batch_size=batch_size, lr=lr
  )
  params_M, norms_M = jax.device_get((params_M, norms_M))  # on the host: indexing compiles nothing
  return [(jax.tree.map(lambda a: a[m], params_M), norms_M[m]) for m in range(len(norms_M))], mse_M
