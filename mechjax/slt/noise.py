"""Standard normal noise for the Langevin step: ``jax.random.normal``'s numbers, computed in one
fused pass over memory, and any box of them without the rest.

``jax.random.normal(key, shape)`` with a threefry key (JAX's default) hashes each element's
position, its row-major index as a 64-bit counter ``(hi, lo)``, with Threefry-2x32 (20 rounds;
Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3", SC'11), takes the XOR of the two
output words as 32 random bits, maps their top 23 bits to a float in ``(−1, 1)`` and returns
``√2·erfinv(u)``. On a CPU, JAX lowers the hash as a rolled loop of five iterations, each a pass
over the whole array in memory; :func:`normal` writes the same rounds out as array ops, which XLA
fuses into one loop: the same bits, in about a third of the time for a parameter-sized array
(docs/benchmarks.md).

Because each number is a function of its position only, :func:`normal` can also compute the numbers
of a box of the array (``start``, ``size``) without the rest: a chain restricted to a box draws the
unrestricted chain's noise there at the box's cost
(:meth:`mechjax.slt.restriction.Restriction.noise`).

Keys of another implementation, other dtypes, JAX's non-partitionable threefry mode and arrays of
2³² elements or more go to ``jax.random.normal`` (and ``jax.random.normal`` then a slice for a box),
whose numbers these are by definition.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Threefry-2x32's rotation constants, alternating between the two groups of four rounds, and the
# key schedule's parity constant (Salmon et al. 2011, table 4; as in JAX's threefry2x32).
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
KEY_PARITY = 0x1BD11BDA
# The name scope of the fast path's ops, by which benchmarks/llc_step_profile.py finds them.
SCOPE = "langevin_noise"


def _rotate_left(x, d: int):
  return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def threefry2x32(k1, k2, x1, x2):
  """Threefry-2x32 with 20 rounds of the counters ``(x1, x2)`` under the key ``(k1, k2)``, as array
  ops (all uint32, broadcasting): the hash of JAX's ``threefry2x32_p``, unrolled."""
  ks = (k1, k2, k1 ^ k2 ^ np.uint32(KEY_PARITY))
  x1, x2 = x1 + ks[0], x2 + ks[1]
  for i in range(5):
    for r in ROTATIONS[i % 2]:
      x1 = x1 + x2
      x2 = x1 ^ _rotate_left(x2, r)
    x1 = x1 + ks[(i + 1) % 3]
    x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
  return x1, x2


def _threefry_key_data(key: jax.Array):
  """``(k1, k2)`` of a threefry key (typed or raw uint32[2]), or None for any other key."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    if jax.random.key_impl(key) != "threefry2x32":
      return None
    data = jax.random.key_data(key)
  elif key.dtype == jnp.uint32 and key.shape == (2,):
    if jax.config.jax_default_prng_impl != "threefry2x32":
      return None
    data = key
  else:
    return None
  return data[0], data[1]


def _flat_positions(shape: Sequence[int], start, size: Sequence[int]):
  """uint32 row-major indices in ``shape`` of the box ``start`` (per axis), ``size``."""
  strides = np.cumprod((1,) + tuple(shape[:0:-1]))[::-1]
  pos = jnp.zeros(tuple(size), jnp.uint32)
  for axis, (stride, s) in enumerate(zip(strides, size)):
    offset = lax.broadcasted_iota(jnp.uint32, tuple(size), axis)
    if start is not None:
      offset = offset + jnp.asarray(start[axis]).astype(jnp.uint32)
    pos = pos + offset * np.uint32(stride)
  return pos


def normal(
  key: jax.Array,
  shape: Sequence[int],
  dtype=jnp.float32,
  start: Sequence | None = None,
  size: Sequence[int] | None = None,
) -> jax.Array:
  """``jax.random.normal(key, shape, dtype)``, bit for bit, or its box ``[start, start + size)``
  (``start`` one index per axis, static or traced; ``size`` static) without the rest (module
  docstring)."""
  shape = tuple(int(d) for d in shape)
  size = shape if size is None else tuple(int(s) for s in size)
  if len(size) != len(shape) or (start is not None and len(start) != len(shape)):
    raise ValueError(f"a box of an array of shape {shape} needs one start and size per axis")
  kd = _threefry_key_data(key)
  fast = (
    kd is not None
    and jnp.dtype(dtype) == jnp.float32
    and math.prod(shape) < 2**32
    and jax.config.jax_threefry_partitionable
  )
  if not fast:
    z = jax.random.normal(key, shape, dtype)
    if size == shape:
      return z
    return lax.dynamic_slice(z, [0] * len(shape) if start is None else list(start), size)
  with jax.named_scope(SCOPE):
    lo = _flat_positions(shape, start, size)
    b1, b2 = threefry2x32(kd[0], kd[1], jnp.zeros_like(lo), lo)  # the counter's high word is 0
    bits = b1 ^ b2
    # uniform in [nextafter(−1, 0), 1): 23 random mantissa bits under the exponent of 1.0, as in
    # jax.random.uniform, then √2·erfinv as in jax.random.normal.
    mantissa = (bits >> np.uint32(9)) | np.uint32(0x3F800000)
    one_to_two = lax.bitcast_convert_type(mantissa, jnp.float32)
    low = np.nextafter(np.float32(-1), np.float32(0))
    u = lax.max(low, (one_to_two - np.float32(1)) * (np.float32(1) - low) + low)
    return np.float32(np.sqrt(2)) * lax.erf_inv(u)
