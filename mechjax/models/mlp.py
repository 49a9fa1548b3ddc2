"""Small flax.linen models: a single neuron and a two-layer network.

Inputs are ``x_BxS``: a batch axis followed by any spatial shape, which is flattened to ``D =
prod(S)``. Params are plain pytrees (``{"params": {...}}`` dicts), so they scan, vmap and checkpoint
as they are.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

ACTIVATIONS = {
  "relu": nn.relu,
  "tanh": jnp.tanh,
  "gelu": nn.gelu,
  "sigmoid": nn.sigmoid,
  "linear": lambda h: h,
  "square": jnp.square,
}


def activation_fn(name: str):
  """The activation called ``name``; raises a ValueError that lists the choices."""
  try:
    return ACTIVATIONS[name]
  except KeyError:
    raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {name!r}") from None


def _flatten(x: jax.Array) -> jax.Array:
  if x.ndim < 2:
    raise ValueError(f"expected a batch of inputs of shape (B, *spatial); got shape {x.shape}")
  return x.reshape(x.shape[0], -1)


class SingleNeuron(nn.Module):
  """``f(x) = σ(w·x / √D)``; with ``spherical=True`` the weight is used as ``w/‖w‖·√D``, i.e. on the
  sphere.

  The spherical form is the single-index model of online-SGD analyses (Ben Arous, Gheissari &
  Jagannath 2021, arXiv:2003.10409): the gradient of ``f(w/‖w‖)`` is tangent to the sphere, and
  re-normalising ``w`` after each step is the retraction.
  """

  activation: str = "linear"
  spherical: bool = False

  @nn.compact
  def __call__(self, x_BxS: jax.Array) -> jax.Array:
    x_BxD = _flatten(x_BxS)
    dim = x_BxD.shape[-1]
    w_D = self.param("w", nn.initializers.normal(1.0), (dim,))
    if self.spherical:
      w_D = w_D / jnp.linalg.norm(w_D) * jnp.sqrt(dim)
    return activation_fn(self.activation)(x_BxD @ w_D / jnp.sqrt(dim))


class TwoLayer(nn.Module):
  """``f(x) = a·σ(W x + b) + c``: a two-layer network with a scalar output (a logit)."""

  width: int = 64
  activation: str = "relu"

  @nn.compact
  def __call__(self, x_BxS: jax.Array) -> jax.Array:
    act = activation_fn(self.activation)
    h_BxH = act(nn.Dense(self.width, name="hidden")(_flatten(x_BxS)))
    return nn.Dense(1, name="readout")(h_BxH)[:, 0]
