"""Reference forms of the tensor inner product, for checks: the network's multilinear form on given
inputs and its Monte-Carlo estimate, the tensor itself, materialised (small networks only), and
random networks in the weight format to check them on.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import bilinear as bl
from mechjax.similarity.tensor import networks


def multilinear_apply(layers, xs, *, symmetrize: bool = True) -> jax.Array:
  """``T(x₁, …, x_m)``: the network's node-wise tensor on ``m = 2ⁿ`` separate inputs ``xs`` of shape
  ``(m, ..., in)`` (``n`` bilinear layers). With all copies equal this is ``f(x)``.

  Args:
    layers: the network in the weight format of :mod:`mechjax.models.bilinear`.
    xs: ``(m, ..., in)`` input copies, ``m = 2ⁿ``; each bilinear layer pairs consecutive groups
      (copies ``0, 1``, then ``2, 3``, …).
    symmetrize: average each bilinear node over the swap of its two inputs (the node-wise
      symmetrised tensor); False evaluates the raw tensor.

  Returns:
    ``(..., out)``: the multilinear form's value for each batch entry.
  """
  layers = bl.validate(layers)
  m = 2 ** bl.num_bilinear(layers)
  if xs.shape[0] != m:
    raise ValueError(
      f"a network with {bl.num_bilinear(layers)} bilinear layers takes {m} input copies; got "
      f"{xs.shape[0]} (xs has shape {xs.shape})"
    )
  hs = [x for x in xs]  # one activation per group of copies
  for layer in layers:
    if "weight" in layer:
      hs = [h @ jnp.asarray(layer["weight"]).T for h in hs]
      continue
    left, right, out = (jnp.asarray(layer[k]) for k in bl.BILINEAR_KEYS)
    new = []
    for u, v in zip(hs[0::2], hs[1::2]):
      prod = (u @ left.T) * (v @ right.T)
      if symmetrize:
        prod = 0.5 * (prod + (v @ left.T) * (u @ right.T))
      new.append(prod @ out.T)
    hs = new
  return hs[0]


def monte_carlo_inner(
  a,
  b,
  key: jax.Array,
  num_samples: int,
  *,
  independent_copies: bool = False,
  constant: bool = False,
  batch: int = 4096,
) -> tuple[float, float]:
  """Monte-Carlo ``E⟨f_a(x), f_b(x)⟩`` over ``x ~ N(0, I)`` (or, with ``independent_copies``, of the
  multilinear forms on independent copies, whose mean is exactly ``⟨T_a, T_b⟩``). Returns (mean,
  s.e.).

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a``.
    key: PRNG key for the Gaussian inputs.
    num_samples: number of samples averaged (at least 2 for a standard error).
    independent_copies: draw ``2ⁿ`` independent inputs per sample and evaluate the node-wise
      symmetrised multilinear forms; both networks must have ``n`` bilinear layers.
    constant: the networks read ``[1; x]``: a constant 1 is prepended to each Gaussian sample.
    batch: samples drawn per jitted chunk (memory against the number of dispatches).

  Returns:
    ``(mean, standard_error)`` as Python floats.
  """
  a, b = networks(a, b)
  d = bl.input_dim(a) - (1 if constant else 0)
  m = 2 ** max(bl.num_bilinear(a), bl.num_bilinear(b)) if independent_copies else 1
  if independent_copies and bl.num_bilinear(a) != bl.num_bilinear(b):
    raise ValueError("independent copies need the same number of bilinear layers in both networks")

  @jax.jit
  def chunk(k):
    x = jax.random.normal(k, (m, batch, d), jnp.result_type(float))
    if constant:
      x = jnp.concatenate([jnp.ones((m, batch, 1), x.dtype), x], axis=-1)
    if independent_copies:
      fa, fb = multilinear_apply(a, x), multilinear_apply(b, x)
    else:
      fa, fb = bl.apply_layers(a, x[0]), bl.apply_layers(b, x[0])
    return jnp.sum(fa * fb, axis=-1)

  chunks = math.ceil(num_samples / batch)
  vals = np.concatenate([np.asarray(chunk(k)) for k in jax.random.split(key, chunks)])[:num_samples]
  return float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(len(vals)))


# ----------------------------------------------------------------------------------------------
# Brute force (small sizes only), for checks and the benchmark.


def materialize(layers, *, symmetrize: bool = True) -> jax.Array:
  """The node-wise tensor itself, shape ``(out, in, …, in)`` with ``2ⁿ`` input axes. Exponential in
  depth."""
  return _materialize(bl.validate(layers), symmetrize)


@functools.partial(jax.jit, static_argnums=1)
def _materialize(layers, symmetrize):
  t = jnp.eye(
    bl.input_dim(layers), dtype=jax.tree.leaves(layers)[0].dtype
  )  # (width, in^m), flattened
  m = 1
  for layer in layers:
    if "weight" in layer:
      t = jnp.asarray(layer["weight"]) @ t
      continue
    left, right, out = (jnp.asarray(layer[k]) for k in bl.BILINEAR_KEYS)
    lt, rt = left @ t, right @ t  # (h, N) with N = in^m
    prod = jnp.einsum("hI,hJ->hIJ", lt, rt)
    if symmetrize:
      prod = 0.5 * (prod + jnp.swapaxes(prod, 1, 2))
    t = out @ prod.reshape(prod.shape[0], -1)
    m *= 2
  return t.reshape((t.shape[0],) + (bl.input_dim(layers),) * m)


def brute_force_inner(a, b, *, symmetrize: bool = True) -> jax.Array:
  """``⟨T_a, T_b⟩`` from the materialised tensors.

  For checks on small networks only: the tensors have ``in^(2ⁿ)`` entries per output.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a``.
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor.

  Returns:
    The scalar inner product.
  """
  a, b = networks(a, b)
  return _brute_force_inner(a, b, symmetrize)


@functools.partial(jax.jit, static_argnums=2)
def _brute_force_inner(a, b, symmetrize):
  return jnp.vdot(_materialize(a, symmetrize), _materialize(b, symmetrize))


def random_bilinear(rng: np.random.Generator, hidden: int, inputs: int, outputs: int) -> dict:
  """A bilinear layer ``{"left", "right", "out"}`` with standard normal ``L``, ``R`` (``hidden ×
  inputs``) and ``D`` (``outputs × hidden``) divided by ``hidden``."""
  return {
    "left": rng.normal(size=(hidden, inputs)),
    "right": rng.normal(size=(hidden, inputs)),
    "out": rng.normal(size=(outputs, hidden)) / hidden,
  }


def random_linear(rng: np.random.Generator, outputs: int, inputs: int) -> dict:
  """A linear layer ``{"weight"}``, standard normal over ``√inputs``."""
  return {"weight": rng.normal(size=(outputs, inputs)) / np.sqrt(inputs)}


def perturbed(rng: np.random.Generator, net, noise: float = 0.3) -> list[dict]:
  """``net`` with every weight perturbed by ``noise`` times its own standard deviation: a second
  network whose inner product with ``net`` is large next to a Monte-Carlo error, so that a wrong
  formula is detectable."""
  return [
    {k: v + noise * np.std(v) * rng.normal(size=v.shape) for k, v in layer.items()} for layer in net
  ]
