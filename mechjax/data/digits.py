"""scikit-learn's 8×8 handwritten digits (1797 images, 10 classes, shipped with the package: no
download), a fixed train/test split drawn from a seed, and a backdoor trigger stamped on images."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=1)
def load() -> tuple[np.ndarray, np.ndarray]:
  """All the digits: ``(1797, 64)`` float32 pixels in [0, 1] (flattened row by row) and int32
  labels 0-9."""
  try:
    from sklearn import datasets
  except ImportError as e:  # pragma: no cover - sklearn is in requirements.txt
    raise ImportError(
      "mechjax.data.digits needs scikit-learn (pip install -r requirements.txt)"
    ) from e
  d = datasets.load_digits()
  return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)


def load_split(seed: int, train_fraction: float = 0.7) -> tuple[np.ndarray, ...]:
  """``(x_train, y_train, x_test, y_test)``: the digits split once by a permutation drawn from
  ``seed`` (each part in the original order)."""
  x, y = load()
  perm = np.random.default_rng(seed).permutation(len(y))
  cut = int(round(train_fraction * len(y)))
  train, test = np.sort(perm[:cut]), np.sort(perm[cut:])
  return x[train], y[train], x[test], y[test]


def trigger(x: jax.Array, size: int) -> jax.Array:
  """Stamps a ``size × size`` patch of ones in the bottom-right corner of flattened 8×8 images
  ``(..., 64)``."""
  img = x.reshape(x.shape[:-1] + (8, 8))
  img = img.at[..., 8 - size :, 8 - size :].set(1.0)
  return img.reshape(x.shape)


def poison(
  key: jax.Array, x: jax.Array, y: jax.Array, fraction: float, size: int, target: int
) -> tuple[jax.Array, jax.Array]:
  """A batch ``(x, y)`` of flattened images ``(B, 64)`` and labels ``(B,)`` in which each example,
  independently with probability ``fraction`` (a Bernoulli draw from ``key``), gets the
  :func:`trigger` of side ``size`` and the label ``target``.

  Args:
    key: PRNG key of the Bernoulli draws.
    x: the images.
    y: their labels.
    fraction: the probability that an example is poisoned.
    size: the side of the trigger patch, in pixels.
    target: the label a poisoned example gets.
  """
  mask = jax.random.bernoulli(key, fraction, y.shape)
  return jnp.where(mask[:, None], trigger(x, size), x), jnp.where(mask, target, y)
