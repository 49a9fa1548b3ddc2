"""Modular addition pairs: one-hot inputs, labels and the split."""

import jax.numpy as jnp
import pytest

from mechjax.data import modular


def test_pairs_and_split():
  tr, te = modular.split(7, 0.3, seed=0)
  assert len(tr) == 15 and len(tr) + len(te) == 49 and not set(tr) & set(te)
  x, y = modular.pairs(7, jnp.array([3 * 7 + 5]))
  assert x.shape == (1, 14) and x[0, 3] == 1 and x[0, 7 + 5] == 1 and float(x.sum()) == 2
  assert int(y[0]) == 1  # (3 + 5) mod 7
  with pytest.raises(ValueError, match="train_fraction 0.01 leaves an empty training"):
    modular.split(7, 0.01, seed=0)
