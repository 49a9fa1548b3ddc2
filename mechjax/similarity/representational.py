"""Activation-space similarity: linear CKA, the Procrustes shape distance and mean canonical
correlation.

Activations are ``x_NxD`` and ``y_NxE`` (the same ``N`` inputs, any feature counts). Everything is
computed in feature space (``D × E`` cross-covariances), never with an ``N × N`` Gram matrix, so
``N`` can be large.

* Linear CKA (Kornblith et al. 2019): ``‖X̄ᵀȲ‖²_F / (‖X̄ᵀX̄‖_F ‖ȲᵀȲ‖_F)`` after centring the
  columns. Invariant to orthogonal maps and isotropic scaling of either side, not to general
  invertible maps. The biased estimator is large even for independent wide data (``D ≫ N``);
  ``debiased=True`` uses the unbiased HSIC estimator (Song et al. 2012), written in feature space,
  which can be negative.
* Procrustes (angular shape) distance (Williams et al. 2021):
  ``arccos(‖X̄ᵀȲ‖_* / (‖X̄‖_F ‖Ȳ‖_F))`` — a metric on shapes modulo rotation, translation and scale.
* Mean CCA: the mean of the canonical correlations, the singular values of ``Q_xᵀ Q_y`` for
  orthonormal bases of the centred column spaces.

And of one representation, :func:`participation_ratio`: its effective dimension.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _center(x):
  return x - jnp.mean(x, axis=-2, keepdims=True)


def _check(x, y):
  if x.ndim < 2 or y.ndim < 2 or x.shape[-2] != y.shape[-2]:
    raise ValueError(
      f"x and y must have shapes (..., n, d) and (..., n, e) with the same n; got {x.shape} and "
      f"{y.shape}"
    )


def _hsic_unbiased_feature_space(x, y):
  """Song et al.'s unbiased HSIC with linear kernels K = XXᵀ, L = YYᵀ, without forming N × N
  matrices.

  HSIC₁ = [tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1 / ((n−1)(n−2)) − 2/(n−2)·1ᵀK̃L̃1] / (n(n−3)), with K̃, L̃ the
  Grams with zeroed diagonals. Each term reduces to feature-space products and the row norms.
  """
  n = x.shape[-2]
  kd = jnp.sum(x * x, axis=-1)  # diag K
  ld = jnp.sum(y * y, axis=-1)
  sx, sy = jnp.sum(x, axis=-2), jnp.sum(y, axis=-2)  # Xᵀ1, Yᵀ1
  xty = jnp.swapaxes(x, -1, -2) @ y
  tr_kl = jnp.sum(xty**2, axis=(-2, -1)) - jnp.sum(kd * ld, axis=-1)  # tr(K̃L̃)
  sum_k = jnp.sum(sx**2, axis=-1) - jnp.sum(kd, axis=-1)  # 1ᵀK̃1
  sum_l = jnp.sum(sy**2, axis=-1) - jnp.sum(ld, axis=-1)
  k1 = x @ sx[..., None] - kd[..., None]  # K̃1, shape (..., n, 1)
  l1 = y @ sy[..., None] - ld[..., None]
  cross = jnp.sum(k1 * l1, axis=(-2, -1))  # 1ᵀK̃L̃1
  return (tr_kl + sum_k * sum_l / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * cross) / (n * (n - 3))


def linear_cka(x: jax.Array, y: jax.Array, debiased: bool = False) -> jax.Array:
  """Linear CKA between ``x_NxD`` and ``y_NxE`` (feature-space formulas; batched over leading
  axes).

  Args:
    x: activations of shape ``(..., n, d)``.
    y: activations of the same inputs, shape ``(..., n, e)``.
    debiased: use the unbiased HSIC estimator (Song et al. 2012); needs ``n ≥ 4`` and can be
      negative.

  Returns:
    ``(...,)`` CKA values (in ``[0, 1]`` for the biased estimator).
  """
  _check(x, y)
  if debiased:
    if x.shape[-2] < 4:
      raise ValueError(f"debiased CKA needs n >= 4 samples; got {x.shape[-2]}")
    xy = _hsic_unbiased_feature_space(x, y)
    xx = _hsic_unbiased_feature_space(x, x)
    yy = _hsic_unbiased_feature_space(y, y)
    return xy / jnp.sqrt(jnp.maximum(xx * yy, jnp.finfo(x.dtype).tiny))
  x, y = _center(x), _center(y)
  t = lambda a, b: jnp.swapaxes(a, -1, -2) @ b
  num = jnp.sum(t(x, y) ** 2, axis=(-2, -1))
  return num / (jnp.linalg.norm(t(x, x), axis=(-2, -1)) * jnp.linalg.norm(t(y, y), axis=(-2, -1)))


def procrustes_distance(x: jax.Array, y: jax.Array) -> jax.Array:
  """Angular Procrustes distance ``arccos(‖X̄ᵀȲ‖_* / (‖X̄‖_F ‖Ȳ‖_F))`` in radians, in ``[0,
  π/2]``."""
  _check(x, y)
  x, y = _center(x), _center(y)
  nuc = jnp.sum(jnp.linalg.svd(jnp.swapaxes(x, -1, -2) @ y, compute_uv=False), axis=-1)
  cos = nuc / (jnp.linalg.norm(x, axis=(-2, -1)) * jnp.linalg.norm(y, axis=(-2, -1)))
  return jnp.arccos(jnp.clip(cos, -1.0, 1.0))


def mean_cca(x: jax.Array, y: jax.Array, rtol: float = 1e-6) -> jax.Array:
  """Mean canonical correlation between the centred column spaces of ``x`` and ``y`` (directions
  with singular value below ``rtol · σ_max`` are dropped as rank-deficient).

  Args:
    x: activations of shape ``(..., n, d)``.
    y: activations of the same inputs, shape ``(..., n, e)``.
    rtol: relative cut-off on the singular values of each centred matrix for its column-space
      basis.

  Returns:
    ``(...,)``: the sum of the canonical correlations divided by the smaller of the two ranks.
  """
  _check(x, y)

  def basis(a):
    u, s, _ = jnp.linalg.svd(_center(a), full_matrices=False)
    keep = s > rtol * s[..., :1]
    return u * keep[..., None, :], jnp.sum(keep, axis=-1)

  qx, rx = basis(x)
  qy, ry = basis(y)
  rho = jnp.linalg.svd(jnp.swapaxes(qx, -1, -2) @ qy, compute_uv=False)
  return jnp.sum(jnp.clip(rho, 0.0, 1.0), axis=-1) / jnp.minimum(rx, ry)


def participation_ratio(x_NxD) -> float:
  """The effective dimension ``(Σλ)² / Σλ²`` of activations ``x_NxD``, for ``λ`` the eigenvalues
  of their covariance: from 1 (one direction carries all the variance) to ``d`` (isotropic).
  Computed in float64 with NumPy."""
  xc = np.asarray(x_NxD, np.float64)
  xc = xc - xc.mean(axis=0)
  lam = np.linalg.eigvalsh(xc.T @ xc)
  return float(lam.sum() ** 2 / np.sum(lam**2))
