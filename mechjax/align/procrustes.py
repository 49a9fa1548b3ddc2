"""Orthogonal Procrustes: the rotation that best maps one set of activations onto another.

``orthogonal_procrustes(A, B)`` solves ``min_{R ∈ O(d)} ‖A R − B‖_F`` (Schönemann 1966), scipy's
convention: with ``M = Aᵀ B = U Σ Vᵀ`` the minimiser is ``R = U Vᵀ``. ``special=True`` restricts to
SO(d) with the Kabsch correction ``R = U diag(1, …, 1, det(U Vᵀ)) Vᵀ`` (Kabsch 1976), the optimum
within SO(d). ``scale=True`` also fits the isotropic scale ``s = tr(Σ D) / ‖A‖²_F`` of ``s A R ≈
B``.

When ``M`` is rank-deficient (fewer samples than dimensions, or dead directions), the part of ``R``
that acts on the null space of ``M`` is arbitrary: any rotation there fits equally well. The rank is
returned, and a warning names it whenever a concrete (non-traced) fit is deficient, because a
"rotation" reported from such a fit is partly a free choice of the SVD routine.

Activations are ``x_NxD`` (samples × features); every function takes extra leading batch axes and
works under ``jit`` and ``vmap``.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class ProcrustesFit(NamedTuple):
  """The result of :func:`procrustes_fit`, batched over the inputs' leading axes.

  Attributes:
    R: ``(..., d, d)`` the fitted orthogonal map, ``source @ R ≈ target`` (in SO(d) with
      ``special``).
    scale: ``(...,)`` the fitted isotropic scale ``s`` of ``s · source @ R ≈ target``; ones unless
      fitted with ``scale=True``.
    singular_values: ``(..., d)`` singular values of the cross-covariance ``M = Aᵀ B``, descending,
      before any Kabsch sign flip.
    rank: ``(...,)`` numerical rank of ``M``: the number of singular values above ``rtol · σ_max``.
  """

  R: jax.Array  # (..., D, D)
  scale: jax.Array  # (...,) the fitted isotropic scale (1 unless scale=True)
  singular_values: jax.Array  # (..., D) of the cross-covariance M = Aᵀ B
  rank: jax.Array  # (...,) numerical rank of M


def _check_pair(source, target):
  if source.ndim < 2 or source.shape != target.shape:
    raise ValueError(
      f"source and target must both have shape (..., n, d) and match; got {source.shape} and "
      f"{target.shape}"
    )
  for name, x in (("source", source), ("target", target)):
    if isinstance(x, jax.core.Tracer):
      continue  # inside jit the values are unknown; a concrete call is checked
    bad = int(np.size(x) - np.count_nonzero(np.isfinite(np.asarray(x))))
    if bad:
      raise ValueError(
        f"{name} has {bad} non-finite entries (NaN or inf) of {np.size(x)}; the fit needs finite "
        "activations"
      )


def procrustes_fit(
  source: jax.Array,
  target: jax.Array,
  *,
  center: bool = False,
  special: bool = False,
  scale: bool = False,
  rtol: float | None = None,
) -> ProcrustesFit:
  """The full fit: ``R``, the scale, the singular values and the numerical rank of ``Aᵀ B``.

  Args:
    source: ``A``, shape ``(..., n, d)``.
    target: ``B``, same shape.
    center: subtract each column's mean first (the mean offset is then not part of the map).
    special: restrict ``R`` to SO(d) (det +1).
    scale: fit an isotropic scale ``s`` with ``s A R ≈ B``.
    rtol: singular values below ``rtol · σ_max`` count as zero for the rank; default ``max(n, d) ·
    eps``.
  """
  _check_pair(source, target)
  a, b = source, target
  if center:
    a = a - jnp.mean(a, axis=-2, keepdims=True)
    b = b - jnp.mean(b, axis=-2, keepdims=True)
  m = jnp.swapaxes(a, -1, -2) @ b
  u, sv, vt = jnp.linalg.svd(m, full_matrices=False)
  if special:
    det = jnp.linalg.det(u @ vt)
    flip = (
      jnp.ones(sv.shape, sv.dtype).at[..., -1].set(jnp.sign(det))
    )  # smallest singular value flips
    u = u * flip[..., None, :]
    sv_used = sv * flip
  else:
    sv_used = sv
  r = u @ vt
  n, d = a.shape[-2], a.shape[-1]
  tol = (max(n, d) * jnp.finfo(sv.dtype).eps if rtol is None else rtol) * sv[..., :1]
  rank = jnp.sum(sv > tol, axis=-1)
  s = (
    (jnp.sum(sv_used, axis=-1) / jnp.sum(a**2, axis=(-2, -1)))
    if scale
    else jnp.ones(sv.shape[:-1], sv.dtype)
  )
  return ProcrustesFit(r, s, sv, rank)


def orthogonal_procrustes(
  source: jax.Array,
  target: jax.Array,
  *,
  center: bool = False,
  special: bool = False,
  scale: bool = False,
):
  """``R`` with ``source @ R ≈ target`` (in O(d), or SO(d) with ``special``); ``(R, s)`` when
  ``scale``.

  Warns when the cross-covariance is rank-deficient (for concrete inputs): see the module docstring.

  Args:
    source: ``A``, shape ``(..., n, d)``: the activations to be rotated.
    target: ``B``, same shape: the activations to match.
    center: subtract each column's mean from both first (the mean offset is then not part of the
      map).
    special: restrict ``R`` to SO(d) (det +1) with the Kabsch correction.
    scale: also fit an isotropic scale ``s`` with ``s A R ≈ B``, and return it.

  Returns:
    ``R`` of shape ``(..., d, d)``, or ``(R, s)`` with ``s`` of shape ``(...,)`` when ``scale``.
  """
  fit = procrustes_fit(source, target, center=center, special=special, scale=scale)
  if not isinstance(fit.rank, jax.core.Tracer):
    d = source.shape[-1]
    worst = int(jnp.min(fit.rank))
    if worst < d:
      warnings.warn(
        f"orthogonal_procrustes: the cross-covariance has rank {worst} < d = {d}; the rotation is "
        f"arbitrary on a {d - worst}-dimensional subspace",
        RuntimeWarning,
        stacklevel=2,
      )
  return (fit.R, fit.scale) if scale else fit.R


def generalized_procrustes(
  acts: jax.Array, *, num_iters: int = 20, center: bool = False, special: bool = False
) -> tuple[jax.Array, jax.Array]:
  """Aligns K models to a common frame: ``R_k`` with ``acts[k] @ R_k ≈ mean_j acts[j] @ R_j``.

  Alternates between fitting each ``R_k`` to the current consensus and recomputing the consensus
  (Gower 1975), starting from model 0's frame, for ``num_iters`` rounds.

  Args:
    acts: ``(K, n, d)`` activations of the same ``n`` inputs in ``K`` models.

  Returns:
    ``(R_KxDxD, consensus_NxD)``.
  """
  if acts.ndim != 3:
    raise ValueError(f"acts must have shape (K, n, d); got {acts.shape}")
  if center:
    acts = acts - jnp.mean(acts, axis=1, keepdims=True)

  def body(_, consensus):
    rs = procrustes_fit(acts, jnp.broadcast_to(consensus, acts.shape), special=special).R
    return jnp.mean(acts @ rs, axis=0)

  consensus = jax.lax.fori_loop(0, num_iters, body, acts[0])
  rs = procrustes_fit(acts, jnp.broadcast_to(consensus, acts.shape), special=special).R
  return rs, consensus


def split_half_agreement(source: jax.Array, target: jax.Array, **fit_kwargs) -> jax.Array:
  """How far the data determine the rotation: ``tr(R₁ᵀ R₂) / d`` for ``R₁`` and ``R₂`` fitted
  (:func:`procrustes_fit` with ``fit_kwargs``) on the first and the second half of the rows.

  1 when both halves give the same ``R``; near 0 when the fit is a free choice (two independent
  Haar rotations have ``E tr(R₁ᵀ R₂) = 0``). Where the cross-covariance is rank-deficient, the part
  of ``R`` on its null space differs between the halves and lowers the agreement. Order the rows so
  that the halves hold different inputs (sequence-major activations, say). ``source`` and
  ``target`` are ``(n, d)``.
  """
  half = source.shape[0] // 2
  r_first = procrustes_fit(source[:half], target[:half], **fit_kwargs).R
  r_second = procrustes_fit(source[half:], target[half:], **fit_kwargs).R
  return jnp.trace(r_first.T @ r_second) / source.shape[1]
