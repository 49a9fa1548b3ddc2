"""Named random streams (mechjax.rng): stable, distinct, and never a training seed's key."""

import hashlib

import jax
import numpy as np
import pytest

from mechjax import rng
from mechjax.train import loop


def test_a_name_is_a_stable_hash():
  # Fixed values: a stream must not move between versions, platforms or processes.
  assert rng.stream_id("spike") == 3545400697
  assert rng.stream_id("llc") == 2411688277
  digest = int.from_bytes(hashlib.sha256(b"teacher").digest()[:4], "little")
  assert rng.stream_id("teacher") == digest | 0x80000000


def test_streams_are_distinct_and_never_a_seed_key():
  names = [
    "spike",
    "teacher",
    "data",
    "llc",
    "susceptibility",
    "probe-strings",
    "eval-subset",
    "init-loss",
  ]
  keys = np.stack([np.asarray(rng.key(0, n)) for n in names])
  assert len({tuple(k) for k in keys}) == len(names)
  seeds = np.asarray(loop.seed_keys(0, 64))
  assert not any((seeds == k).all(axis=1).any() for k in keys)
  # Indices fold in after the name: (name, i) differs from (name, j) and from another name.
  assert not np.array_equal(rng.key(0, "llc", 0), rng.key(0, "llc", 1))
  np.testing.assert_array_equal(rng.key(3, "llc", 1), jax.random.fold_in(rng.key(3, "llc"), 1))
  np.testing.assert_array_equal(rng.fold(jax.random.PRNGKey(3), "llc"), rng.key(3, "llc"))


def test_the_numpy_counterpart_is_deterministic_per_seed_and_name():
  a = rng.numpy(0, "probe-choice").permutation(100)
  np.testing.assert_array_equal(a, rng.numpy(0, "probe-choice").permutation(100))
  assert not np.array_equal(a, rng.numpy(1, "probe-choice").permutation(100))
  assert not np.array_equal(a, rng.numpy(0, "other").permutation(100))
  assert not np.array_equal(a, rng.numpy(0, "probe-choice", 1).permutation(100))


def test_an_empty_name_is_refused():
  with pytest.raises(ValueError, match="non-empty string"):
    rng.stream_id("")
