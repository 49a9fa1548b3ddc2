"""Susceptibilities: the linear response of posterior expectations to a shift of the data distribution.

Shift the data distribution ``q → q + h(q′ − q)``. The average training loss becomes ``L_h = L + h·ΔL``
with ``ΔL = L_{q′} − L_q``, and the tempered posterior ``p_h(w) ∝ exp(−nβ·L_h(w)) φ(w)`` (prior or
localization ``φ``) moves. Differentiating ``E_h[φ] = ∫ φ p_h / ∫ p_h`` at ``h = 0`` gives, exactly,

    d E[φ] / dh = −nβ · Cov(φ, ΔL)                       (Wang & Murfet 2026, arXiv:2601.13548)

the covariance over the posterior at ``h = 0``. The Timaeus convention calls ``χ = −Cov(φ, ΔL)`` the
susceptibility, so the Jacobian is ``nβ·χ``. For a shift toward probe sample ``i`` (``q′ = δ_i``),
``ΔL(w) = ℓ_i(w) − L(w)``; per-token susceptibilities take ``q′`` at one token.

The estimates here take posterior draws, either stored (``S × K`` observables and ``S × M`` loss changes)
or streamed: :class:`Moments` keeps running means and the cross-moment ``Σ (φ − φ̄)(ΔL − ΔL̄)ᵀ`` (Welford's
update, with Chan et al.'s rule to merge chains), so that memory is ``K × M`` whatever the number of
draws. Both give the unbiased (``S − 1``) sample covariance.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def _as_draws(name: str, a) -> jax.Array:
  a = jnp.asarray(a)
  if a.ndim == 1:
    a = a[:, None]
  if a.ndim != 2:
    raise ValueError(f"{name} must be (draws, columns) or (draws,); got shape {a.shape}")
  return a


def covariance(phi_SxK, dloss_SxM) -> jax.Array:
  """The unbiased sample cross-covariance ``Cov_S(φ, ΔL)``, ``K × M``."""
  phi, d = _as_draws("phi_SxK", phi_SxK), _as_draws("dloss_SxM", dloss_SxM)
  if phi.shape[0] != d.shape[0]:
    raise ValueError(f"phi_SxK and dloss_SxM must hold the same draws; got {phi.shape[0]} and {d.shape[0]} rows")
  if phi.shape[0] < 2:
    raise ValueError(f"a covariance needs at least 2 draws; got {phi.shape[0]}")
  phi_c, d_c = phi - phi.mean(0), d - d.mean(0)
  return phi_c.T @ d_c / (phi.shape[0] - 1)


def susceptibility(phi_SxK, dloss_SxM) -> jax.Array:
  """``χ = −Cov_S(φ, ΔL)``, ``K × M`` (the Timaeus convention; the Jacobian ``dE[φ]/dh`` is ``nβ·χ``)."""
  return -covariance(phi_SxK, dloss_SxM)


def linear_response(phi_SxK, dloss_SxM, nbeta: float) -> jax.Array:
  """``J = dE[φ]/dh = −nβ·Cov_S(φ, ΔL)``, ``K × M``: the response of K observables to M data shifts.

  Args:
    phi_SxK: the K observables at S posterior draws.
    dloss_SxM: for each of M data shifts, the change of the average training loss per unit shift at the
      same draws; for a shift toward probe sample ``i`` this is ``ℓ_i(w) − L(w)``.
    nbeta: the inverse temperature times n of the posterior the draws come from.
  """
  if not nbeta > 0:
    raise ValueError(f"nbeta must be > 0; got {nbeta!r}")
  return nbeta * susceptibility(phi_SxK, dloss_SxM)


def standard_error(phi_SxK, dloss_SxM) -> jax.Array:
  """Monte-Carlo standard error of each entry of :func:`covariance` for *independent* draws: the standard
  deviation of the centred products over ``√S``. Correlated draws (SGLD) need more: see :func:`batch_means_error`."""
  phi, d = _as_draws("phi_SxK", phi_SxK), _as_draws("dloss_SxM", dloss_SxM)
  prod = (phi - phi.mean(0))[:, :, None] * (d - d.mean(0))[:, None, :]
  return prod.std(0, ddof=1) / np.sqrt(phi.shape[0])


def batch_means_error(phi_SxK, dloss_SxM, num_batches: int = 20) -> jax.Array:
  """Standard error of :func:`covariance` for a correlated chain, by batch means: the spread of the
  covariance over ``num_batches`` contiguous blocks of draws, over ``√num_batches``."""
  phi, d = _as_draws("phi_SxK", phi_SxK), _as_draws("dloss_SxM", dloss_SxM)
  size = phi.shape[0] // num_batches
  if size < 2:
    raise ValueError(f"{phi.shape[0]} draws are too few for {num_batches} batches of at least 2")
  # Centre on the global means, so that each block's mean product estimates the same covariance.
  prod = (phi - phi.mean(0))[:, :, None] * (d - d.mean(0))[:, None, :]
  blocks = prod[: size * num_batches].reshape(num_batches, size, *prod.shape[1:]).mean(1)
  return blocks.std(0, ddof=1) / np.sqrt(num_batches)


class Moments(NamedTuple):
  """Running first and cross moments of ``(φ, ΔL)`` draws: ``count``, the means, and the cross-moment
  ``Σ (φ − φ̄)(ΔL − ΔL̄)ᵀ``. A pytree, so it can be carried through ``lax.scan`` and vmapped over chains."""

  count: jax.Array  # ()
  mean_phi: jax.Array  # (K,)
  mean_dloss: jax.Array  # (M,)
  comoment: jax.Array  # (K, M)


def moments_init(k: int, m: int, dtype=jnp.float32) -> Moments:
  return Moments(jnp.zeros((), dtype), jnp.zeros((k,), dtype), jnp.zeros((m,), dtype), jnp.zeros((k, m), dtype))


def moments_update(mom: Moments, phi_K, dloss_M, weight=1.0) -> Moments:
  """Adds one draw with ``weight`` 1 (or 0: nothing changes, e.g. during burn-in inside a scan)."""
  count = mom.count + weight
  safe = jnp.where(count > 0, count, 1.0)
  d_phi = phi_K - mom.mean_phi
  mean_phi = mom.mean_phi + weight * d_phi / safe
  mean_dloss = mom.mean_dloss + weight * (dloss_M - mom.mean_dloss) / safe
  comoment = mom.comoment + weight * jnp.outer(d_phi, dloss_M - mean_dloss)
  return Moments(count, mean_phi, mean_dloss, comoment)


def moments_merge(a: Moments, b: Moments) -> Moments:
  """The moments of the union of two sets of draws (Chan, Golub & LeVeque 1979)."""
  count = a.count + b.count
  safe = jnp.where(count > 0, count, 1.0)
  d_phi, d_dloss = b.mean_phi - a.mean_phi, b.mean_dloss - a.mean_dloss
  mean_phi = a.mean_phi + d_phi * b.count / safe
  mean_dloss = a.mean_dloss + d_dloss * b.count / safe
  comoment = a.comoment + b.comoment + jnp.outer(d_phi, d_dloss) * (a.count * b.count / safe)
  return Moments(count, mean_phi, mean_dloss, comoment)


def moments_reduce(stacked: Moments) -> Moments:
  """Merges moments stacked along a leading axis (e.g. one per chain) into one."""
  n = stacked.count.shape[0]
  out = jax.tree.map(lambda a: a[0], stacked)
  for i in range(1, n):
    out = moments_merge(out, jax.tree.map(lambda a, i=i: a[i], stacked))
  return out


def moments_covariance(mom: Moments) -> jax.Array:
  """The unbiased cross-covariance from streamed moments (equals :func:`covariance` on the same draws)."""
  return mom.comoment / (mom.count - 1)
