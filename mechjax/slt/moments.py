"""Streamed first and cross moments of posterior draws, so a covariance needs memory ``K × M``
whatever the number of draws.

:class:`Moments` keeps the running means of ``φ`` (K observables) and ``ΔL`` (M loss changes) and
the cross-moment ``Σ (φ − φ̄)(ΔL − ΔL̄)ᵀ`` (Welford's update; Chan, Golub & LeVeque 1979 to merge
chains). :class:`StreamedMoments` is the accumulator that :func:`mechjax.slt.sgld.sample_chains`
carries through its scan: it observes every draw and adds it to the moments. This module depends on
nothing else in mechjax, so both the sampler's users and :mod:`mechjax.slt.susceptibility` can
import it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class Moments(NamedTuple):
  """Running first and cross moments of ``(φ, ΔL)`` draws. A pytree, so it can be carried through
  ``lax.scan`` and vmapped over chains.

  Attributes:
    count: ``()``, the number of draws.
    mean_phi: ``(K,)``, the mean of the observables φ.
    mean_dloss: ``(M,)``, the mean of the loss changes ΔL.
    comoment: ``(K, M)``, ``Σ (φ − φ̄)(ΔL − ΔL̄)ᵀ``.
  """

  count: jax.Array  # ()
  mean_phi: jax.Array  # (K,)
  mean_dloss: jax.Array  # (M,)
  comoment: jax.Array  # (K, M)


def moments_init(k: int, m: int, dtype=jnp.float32) -> Moments:
  return Moments(
    jnp.zeros((), dtype), jnp.zeros((k,), dtype), jnp.zeros((m,), dtype), jnp.zeros((k, m), dtype)
  )


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
  """The unbiased cross-covariance from streamed moments (equals the ``S − 1`` sample covariance of
  the same draws). Stacked moments (leading axes on every field, e.g. one per chain) give one
  covariance per entry."""
  return mom.comoment / (jnp.asarray(mom.count) - 1)[..., None, None]


@dataclasses.dataclass(frozen=True)
class StreamedMoments:
  """A sampler accumulator: :class:`Moments` of ``observe(w, data) -> (φ_K, ΔL_M)`` over the draws
  ``w`` of steps ``t ≥ start`` (burn-in excluded).

  It is hashable (a frozen dataclass of its function and an int), so a sampler program built for it
  is reused whenever an equal accumulator comes again; ``observe`` should itself be a module-level
  function or another hashable callable, not a fresh lambda per call.
  """

  observe: Callable[[Any, Any], tuple[jax.Array, jax.Array]]
  start: int = 0

  def init(self, params_star, data) -> Moments:
    phi, dloss = jax.eval_shape(self.observe, params_star, data)
    if phi.ndim != 1 or dloss.ndim != 1:
      raise ValueError(
        f"observe must return two vectors (phi_K, dloss_M); got shapes {phi.shape} and "
        f"{dloss.shape}"
      )
    return moments_init(phi.shape[0], dloss.shape[0], phi.dtype)

  def update(self, mom: Moments, w, step: jax.Array, data) -> Moments:
    """Adds the draw ``w`` of step ``step`` when ``step ≥ start``. ``observe`` runs only then: the
    predicate is the scan's step, the same for every vmapped chain, so it stays a ``lax.cond`` and
    burn-in steps cost no observation."""

    def add(mom):
      phi, dloss = self.observe(w, data)
      return moments_update(mom, phi.astype(mom.mean_phi.dtype), dloss.astype(mom.mean_dloss.dtype))

    if self.start <= 0:
      return add(mom)
    return jax.lax.cond(step >= self.start, add, lambda mom: mom, mom)
