"""Modular addition ``(a + b) mod P``, the task on which networks grok (Power et al. 2022,
arXiv:2201.02177; Nanda et al. 2023): the ``P²`` pairs, indexed ``a·P + b``, as one-hot inputs
``[e_a; e_b] ∈ ℝ^{2P}``, and a fixed train/test split of them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def split(p: int, train_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Indices ``a·P + b`` of the training and test pairs, sorted: a fixed split by a permutation
  drawn from ``seed``, ``round(train_fraction · P²)`` of them for training."""
  perm = np.random.default_rng(seed).permutation(p**2)
  n_train = int(round(train_fraction * p**2))
  if not 0 < n_train < p**2:
    raise ValueError(
      f"train_fraction {train_fraction} leaves an empty training or test set for P = {p}"
    )
  return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def pairs(p: int, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
  """One-hot ``[e_a; e_b]`` and the label ``(a + b) mod P`` of pair indices ``idx = a·P + b``."""
  a, b = idx // p, idx % p
  x = jnp.concatenate([jax.nn.one_hot(a, p), jax.nn.one_hot(b, p)], axis=-1)
  return x, (a + b) % p
