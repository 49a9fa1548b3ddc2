"""Named random streams: a key, or a NumPy generator, derived from a seed (or a key) and a name.

Every random choice of a study that is not a training seed's has a stream of its own: the teacher,
the data set, the probes, the SGLD chains. Naming the stream instead of numbering it by hand means a
new stream cannot collide with an old one by accident, and adding one does not shift any other::

    teacher_key = rng.key(cfg.run.seed, "teacher")
    chains_key = rng.key(cfg.run.seed, "llc", seed_index)
    rows = rng.numpy(cfg.run.seed, "probe-choice").permutation(n)

A name is folded in as a stable 32-bit hash of its UTF-8 bytes (SHA-256), forced into ``[2³¹,
2³²)``: training seeds are ``fold_in(PRNGKey(seed), i)`` with small ``i``
(:func:`mechjax.train.loop.seed_keys`), so no stream ever equals a seed's key.
"""

from __future__ import annotations

import functools
import hashlib

import jax
import numpy as np


@functools.lru_cache(maxsize=None)
def stream_id(name: str) -> int:
  """The 32-bit integer that stands for ``name`` (stable across processes, platforms and
  versions)."""
  if not isinstance(name, str) or not name:
    raise ValueError(f"a stream name must be a non-empty string; got {name!r}")
  digest = hashlib.sha256(name.encode("utf-8")).digest()
  return int.from_bytes(digest[:4], "little") | 0x80000000


def fold(key: jax.Array, name: str, *indices: int) -> jax.Array:
  """``key`` with the stream ``name`` folded in, then each of ``indices`` (e.g. a seed or chain
  number)."""
  out = jax.random.fold_in(key, stream_id(name))
  for i in indices:
    out = jax.random.fold_in(out, int(i))
  return out


def key(seed: int, name: str, *indices: int) -> jax.Array:
  """The key of stream ``name`` of integer ``seed``: :func:`fold` of ``PRNGKey(seed)``."""
  return fold(jax.random.PRNGKey(int(seed)), name, *indices)


def numpy(seed: int, name: str, *indices: int) -> np.random.Generator:
  """The NumPy counterpart of :func:`key`: a generator seeded by ``(seed, stream_id(name),
  *indices)``."""
  return np.random.default_rng(
    np.random.SeedSequence([int(seed), stream_id(name), *map(int, indices)])
  )
