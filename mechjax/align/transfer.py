"""Moving dictionaries and steering vectors between models through a fitted rotation.

Conventions: ``R`` maps source activations to target activations, ``x_src @ R ≈ x_tgt`` (as returned
by :func:`mechjax.align.procrustes.orthogonal_procrustes`), so ``x_tgt @ Rᵀ`` expresses target
activations in the source frame.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def explained_variance(x: jax.Array, x_hat: jax.Array) -> jax.Array:
  """Per-column explained variance ``1 − Σ‖x − x̂‖² / Σ‖x − colmean(x)‖²`` over ``(..., n, d)``.

  This is the standard definition: each feature is measured against its own mean. Some published
  work divides by the variance of all entries around one global mean instead, which is larger
  whenever the columns have different means, so it reports a higher EV for the same reconstruction.
  Negative values mean the reconstruction is worse than predicting each column's mean.
  """
  if x.shape != x_hat.shape or x.ndim < 2:
    raise ValueError(
      f"x and x_hat must have the same shape (..., n, d); got {x.shape} and {x_hat.shape}"
    )
  resid = jnp.sum((x - x_hat) ** 2, axis=(-2, -1))
  total = jnp.sum((x - jnp.mean(x, axis=-2, keepdims=True)) ** 2, axis=(-2, -1))
  return 1.0 - resid / total


def transfer_reconstruct(
  reconstruct_src: Callable[[jax.Array], jax.Array], x_tgt: jax.Array, r: jax.Array, scale=1.0
) -> jax.Array:
  """Reconstructs target activations with a source-model dictionary: map into the source frame
  (``x_tgt @ Rᵀ / s``), encode and decode there, and map back (``s · … @ R``).

  ``scale`` is ``s`` of a similarity fit ``s · x_src @ R ≈ x_tgt`` (1 for a pure rotation).

  Args:
    reconstruct_src: the source-frame reconstruction, mapping ``(..., d)`` activations to their
      encoded-and-decoded approximation of the same shape (e.g. an SAE's ``x̂``).
    x_tgt: target-model activations, shape ``(..., d)``.
    r: the ``(d, d)`` rotation with ``x_src @ r ≈ x_tgt`` (a single matrix, not a batch).
    scale: the similarity scale ``s`` (a scalar); 1.0 for a pure rotation.

  Returns:
    The reconstruction of ``x_tgt``, in the target frame and of the same shape.
  """
  return scale * reconstruct_src(x_tgt @ r.T / scale) @ r


def rotate_vector(v_src: jax.Array, r: jax.Array) -> jax.Array:
  """A source-frame direction (a steering vector, a decoder column) expressed in the target frame:
  ``v @ R``."""
  return v_src @ r


def diff_of_means(acts: jax.Array, labels: jax.Array) -> jax.Array:
  """The steering vector ``mean(acts | label = 1) − mean(acts | label = 0)`` for ``acts_NxD`` and
  binary labels."""
  w = labels.astype(acts.dtype)[:, None]
  return jnp.sum(acts * w, axis=0) / jnp.sum(w) - jnp.sum(acts * (1 - w), axis=0) / jnp.sum(1 - w)
