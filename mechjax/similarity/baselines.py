"""Baselines beside tensor similarity: the cosine of the weights (not symmetry-invariant), of the
outputs (behaviour), pairwise cosines of rows, and linear CKA between activation sets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import bilinear as bl


def weight_cosine(a, b) -> jax.Array:
  """Cosine between the two networks' flattened weights (layer by layer, in order). Depends on the
  basis: a hidden-unit permutation alone changes it."""
  a, b = bl.validate(a), bl.validate(b)
  fa = [jnp.ravel(jnp.asarray(v)) for layer in a for _, v in sorted(layer.items())]
  fb = [jnp.ravel(jnp.asarray(v)) for layer in b for _, v in sorted(layer.items())]
  if [x.shape for x in fa] != [x.shape for x in fb]:
    raise ValueError(
      "weight cosine needs networks of identical shapes; got "
      f"{[x.shape for x in fa]} and {[x.shape for x in fb]}"
    )
  va, vb = jnp.concatenate(fa), jnp.concatenate(fb)
  return va @ vb / (jnp.linalg.norm(va) * jnp.linalg.norm(vb))


def output_cosine(ya: jax.Array, yb: jax.Array, *, center: bool = False) -> jax.Array:
  """Behavioural similarity: cosine between two networks' outputs ``(N, o)`` on the same inputs,
  flattened.

  ``center=True`` subtracts each input's mean logit first (softmax ignores that shift).

  Args:
    ya: the first network's outputs, shape ``(N, o)``.
    yb: the second network's outputs on the same inputs, same shape.
    center: subtract each row's mean over the last axis from both before comparing.

  Returns:
    The scalar cosine of the flattened outputs.
  """
  if ya.shape != yb.shape:
    raise ValueError(f"outputs must have the same shape (N, o); got {ya.shape} and {yb.shape}")
  if center:
    ya = ya - ya.mean(-1, keepdims=True)
    yb = yb - yb.mean(-1, keepdims=True)
  ya, yb = ya.reshape(-1), yb.reshape(-1)
  return ya @ yb / (jnp.linalg.norm(ya) * jnp.linalg.norm(yb))


def cosine_matrix(vectors_KxN: jax.Array) -> np.ndarray:
  """Pairwise cosines of the rows (``(K, N)``, any ``N``), ``(K, K)``: weight or output cosine of
  many checkpoints at once."""
  v = jnp.asarray(vectors_KxN).reshape(vectors_KxN.shape[0], -1)
  v = v / jnp.linalg.norm(v, axis=1, keepdims=True)
  return np.asarray(v @ v.T)


def cka_matrix(acts_KxNxD: jax.Array) -> np.ndarray:
  """Linear CKA (:func:`mechjax.similarity.representational.linear_cka`) between every pair of ``K``
  activation sets on the same ``N`` inputs, ``(K, K)``.

  All pairs come from one ``(K·D) × (K·D)`` cross-covariance of the centred activations, so the cost
  is one matrix product, not ``K²`` of them.
  """
  acts = jnp.asarray(acts_KxNxD)
  if acts.ndim != 3:
    raise ValueError(f"activations must be (K, N, D); got shape {acts.shape}")
  return np.asarray(_cka_matrix(acts))


@jax.jit
def _cka_matrix(acts):
  k, n, d = acts.shape
  x = acts - acts.mean(axis=1, keepdims=True)
  x = jnp.transpose(x, (1, 0, 2)).reshape(n, k * d)
  c = (x.T @ x).reshape(k, d, k, d)
  hsic = jnp.sum(c**2, axis=(1, 3))  # ‖X̄_iᵀX̄_j‖²_F
  norms = jnp.sqrt(jnp.diag(hsic))
  return hsic / jnp.outer(norms, norms)
