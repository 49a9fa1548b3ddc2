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

:func:`normals` draws many arrays (a model's leaves, each from its own key) with one hash for all
the small ones, each position hashed under its own array's key: the same numbers, with the rounds
written into the compiled program once instead of once per leaf (docs/benchmarks.md).

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


def _box(shape, start, size) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """``(shape, size)`` as int tuples (``size`` the whole array when None), checked to have one
  start and size per axis."""
  shape = tuple(int(d) for d in shape)
  size = shape if size is None else tuple(int(s) for s in size)
  if len(size) != len(shape) or (start is not None and len(start) != len(shape)):
    raise ValueError(f"a box of an array of shape {shape} needs one start and size per axis")
  return shape, size


def _fast_key(key: jax.Array, shape: tuple[int, ...], dtype):
  """``(k1, k2)`` when the fast path computes ``jax.random.normal(key, shape, dtype)``'s numbers,
  else None (module docstring)."""
  kd = _threefry_key_data(key)
  if (
    kd is not None
    and jnp.dtype(dtype) == jnp.float32
    and math.prod(shape) < 2**32
    and jax.config.jax_threefry_partitionable
  ):
    return kd
  return None


def _normal_of_positions(k1, k2, lo):
  """Standard normals from the Threefry bits of the row-major positions ``lo`` (uint32) under the
  key ``(k1, k2)`` (scalars, or arrays shaped like ``lo``): ``jax.random.normal``'s transform."""
  b1, b2 = threefry2x32(k1, k2, jnp.zeros_like(lo), lo)  # the counter's high word is 0
  bits = b1 ^ b2
  # uniform in [nextafter(−1, 0), 1): 23 random mantissa bits under the exponent of 1.0, as in
  # jax.random.uniform, then √2·erfinv as in jax.random.normal.
  mantissa = (bits >> np.uint32(9)) | np.uint32(0x3F800000)
  one_to_two = lax.bitcast_convert_type(mantissa, jnp.float32)
  low = np.nextafter(np.float32(-1), np.float32(0))
  u = lax.max(low, (one_to_two - np.float32(1)) * (np.float32(1) - low) + low)
  return np.float32(np.sqrt(2)) * lax.erf_inv(u)


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
  shape, size = _box(shape, start, size)
  kd = _fast_key(key, shape, dtype)
  if kd is None:
    z = jax.random.normal(key, shape, dtype)
    if size == shape:
      return z
    return lax.dynamic_slice(z, [0] * len(shape) if start is None else list(start), size)
  with jax.named_scope(SCOPE):
    return _normal_of_positions(kd[0], kd[1], _flat_positions(shape, start, size))


# Requests to :func:`normals` of at most this many numbers share one hash.
PACK_MAX = 1 << 16


def normals(requests: Sequence[tuple]) -> list[jax.Array]:
  """``[normal(key, shape, dtype, start, size) for (key, shape, dtype, start, size) in requests]``,
  the same numbers, with every small request on the fast path (at most :data:`PACK_MAX` numbers)
  computed by one hash over all their positions, each position beside its own key.

  The Threefry rounds are written out once for all of them instead of once per request: a model's
  biases, norms and small matrices, drawn on every Langevin step, then add one copy of the rounds
  to the compiled program rather than one each, which shortens its compile time; the larger leaves
  keep a fused loop of their own, so no parameter-sized buffer is added."""
  out: list = [None] * len(requests)
  packed = []
  for i, (key, shape, dtype, start, size) in enumerate(requests):
    shape, size = _box(shape, start, size)
    kd = _fast_key(key, shape, dtype)
    if kd is None or math.prod(size) > PACK_MAX:
      out[i] = normal(key, shape, dtype, start, size)
    else:
      packed.append((i, kd, _flat_positions(shape, start, size).reshape(-1), size))
  if packed:
    with jax.named_scope(SCOPE):
      keys = [
        jnp.concatenate([jnp.broadcast_to(p[1][j], p[2].shape) for p in packed]) for j in (0, 1)
      ]
      z = _normal_of_positions(keys[0], keys[1], jnp.concatenate([p[2] for p in packed]))
      offset = 0
      for i, _, lo, size in packed:
        out[i] = z[offset : offset + lo.size].reshape(size)
        offset += lo.size
  return out
