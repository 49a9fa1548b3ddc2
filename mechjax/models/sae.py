"""Sparse autoencoders for residual-stream activations: ReLU + L1, or TopK.

``f = σ((x − b_dec) W_enc + b_enc)``, ``x̂ = f D + b_dec``, where the rows of ``D`` (one per latent)
have unit norm *by construction*: the stored decoder ``W_dec`` is normalised row-wise in the forward
pass, so no projection step is needed after an optimizer update and the L1 penalty cannot be dodged
by shrinking codes and growing decoder rows. ``σ`` is ReLU, or, with ``top_k``, ReLU followed by
keeping the ``k`` largest latents per input (Makhzani & Frey 2013; Gao et al. 2024).

:func:`sae_loss` is ``mean‖x − x̂‖² / d + l1 · mean‖f‖₁`` (``l1`` is ignored for TopK); it plugs
into :class:`mechjax.train.loop.Problem` like any other loss.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class SAE(nn.Module):
  """A sparse autoencoder (module docstring): ``x_NxD -> (x̂, f)``, the reconstruction and the
  latent codes.

  Attributes:
    num_latents: the dictionary size.
    top_k: keep the ``k`` largest latents per input (TopK SAE); None: ReLU codes with an L1 penalty.
  """

  num_latents: int
  top_k: int | None = None

  @nn.compact
  def __call__(self, x_NxD):
    if self.top_k is not None and not 0 < self.top_k <= self.num_latents:
      raise ValueError(f"top_k must be in [1, num_latents={self.num_latents}]; got {self.top_k}")
    d = x_NxD.shape[-1]
    w_enc = self.param("W_enc", nn.initializers.lecun_normal(), (d, self.num_latents))
    b_enc = self.param("b_enc", nn.initializers.zeros, (self.num_latents,))
    w_dec = self.param("W_dec", _decoder_init, (self.num_latents, d))
    b_dec = self.param("b_dec", nn.initializers.zeros, (d,))
    lead = tuple(range(x_NxD.ndim - 1))  # the batch axes, in front of the feature axis
    f = nn.relu((x_NxD - jnp.expand_dims(b_dec, lead)) @ w_enc + jnp.expand_dims(b_enc, lead))
    if self.top_k is not None:
      threshold = jax.lax.stop_gradient(kth_largest(f, self.top_k))
      f = jnp.where(f >= threshold, f, 0.0)
    x_hat = f @ unit_rows(w_dec) + jnp.expand_dims(b_dec, lead)
    return x_hat, f


ITERATIVE_TOP_K = 32


def kth_largest(f: jax.Array, k: int, iterative: bool | None = None) -> jax.Array:
  """The ``k``-th largest entry of each row of ``f`` (shape ``(..., 1)``), ties counted like
  ``lax.top_k``.

  ``iterative`` masks the row maximum ``k − 1`` times instead of calling ``lax.top_k``; the default
  uses it for ``k <= ITERATIVE_TOP_K``. On CPU, XLA's ``top_k`` sorts every row: at ``k = 8`` the
  iterative selection is several times faster (``python -m benchmarks.sae``).
  """
  if iterative is None:
    iterative = k <= ITERATIVE_TOP_K
  if not iterative:
    return jax.lax.top_k(f, k)[0][..., -1:]
  idx = jnp.arange(f.shape[-1]).reshape((1,) * (f.ndim - 1) + (-1,))
  for _ in range(k - 1):
    f = jnp.where(idx == jnp.argmax(f, axis=-1, keepdims=True), -jnp.inf, f)
  return jnp.max(f, axis=-1, keepdims=True)


def _decoder_init(key, shape):
  """Random decoder rows (their norm is irrelevant: the forward pass normalises them)."""
  return jax.random.normal(key, shape) / jnp.sqrt(shape[1])


def unit_rows(w):
  return w / jnp.maximum(jnp.linalg.norm(w, axis=-1, keepdims=True), 1e-8)


def decoder(params) -> jax.Array:
  """The effective decoder ``D`` (num_latents × d) with unit-norm rows."""
  return unit_rows(params["params"]["W_dec"])


def max_cosine(dec_a: jax.Array, dec_b: jax.Array, live_a: jax.Array, live_b: jax.Array):
  """The decoder "universality" score of two dictionaries: the mean over the live rows of
  ``dec_a`` of the largest ``|cos|`` with any live row of ``dec_b`` (both with unit rows,
  :func:`decoder`).

  Dead latents (``live`` False: never active on the data) keep their random initial rows, which
  would pull the score towards that of random directions, so they are left out on both sides.
  """
  cos = jnp.where(live_b[None, :], jnp.abs(dec_a @ dec_b.T), -1.0)
  best = jnp.max(cos, axis=1)
  return jnp.sum(jnp.where(live_a, best, 0.0)) / jnp.maximum(jnp.sum(live_a), 1)


def sae_loss(model: SAE, params, x_NxD, l1: float = 1e-3):
  """``(loss, metrics)``: ``mean‖x − x̂‖²/d + l1·mean‖f‖₁`` and the reconstruction MSE, L0 and
  L1.

  Args:
    model: the :class:`SAE` module; with ``top_k`` set the L1 term is dropped.
    params: its variables, as returned by ``model.init`` (``{"params": ...}``).
    x_NxD: activations to reconstruct, shape ``(N, d)`` (any leading batch axes).
    l1: weight of the L1 sparsity penalty on the codes (ignored for TopK).

  Returns:
    ``(loss, metrics)``: the scalar loss and ``{"mse", "l0", "l1"}``: the mean squared error per
    entry, the mean number of active latents per input and the mean ``‖f‖₁`` per input.
  """
  x_hat, f = model.apply(params, x_NxD)
  mse = jnp.mean((x_hat - x_NxD) ** 2)
  l1_term = jnp.mean(jnp.sum(jnp.abs(f), axis=-1))
  loss = mse + (0.0 if model.top_k is not None else l1 * l1_term)
  return loss, {"mse": mse, "l0": jnp.mean(jnp.sum(f > 0, axis=-1)), "l1": l1_term}
