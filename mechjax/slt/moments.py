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
import numpy as np


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


class PowerSums(NamedTuple):
  """Power sums of the shifted draws ``x = φ − a`` and ``y = ΔL − b`` in ``G`` consecutive segments
  of a chain (leading axis ``G`` on every field), enough for the mean and the per-draw variance of
  the products ``(φ − φ̄)(ΔL − ΔL̄)`` whose mean is the covariance: the mixing diagnostics of a
  susceptibility (:func:`product_moments`). Segments of one chain share the shift, so they merge
  by addition."""

  count: jax.Array  # (G,)
  x: jax.Array  # (G, K)
  y: jax.Array  # (G, M)
  xx: jax.Array  # (G, K)
  yy: jax.Array  # (G, M)
  xy: jax.Array  # (G, K, M)
  xxy: jax.Array  # (G, K, M)
  xyy: jax.Array  # (G, K, M)
  xxyy: jax.Array  # (G, K, M)


class SegmentedState(NamedTuple):
  """The carry of :class:`SegmentedMoments`: the chain's :class:`Moments`, the shift ``(a, b)`` (its
  first draw) and the segments' :class:`PowerSums`."""

  moments: Moments
  shift_phi: jax.Array  # (K,)
  shift_dloss: jax.Array  # (M,)
  sums: PowerSums


_TRAILING = (0, 1, 1, 1, 1, 2, 2, 2, 2)  # PowerSums fields' axes after the segment axis


def over_segments(sums: PowerSums, fn: Callable) -> PowerSums:
  """``fn(field, axis)`` on every field of :class:`PowerSums`, ``axis`` its segment axis (the one
  before ``()``, ``(K,)``, ``(M,)`` or ``(K, M)``), e.g. ``lambda a, ax: a.sum(ax)`` to merge the
  segments."""
  return PowerSums(*(fn(a, np.ndim(a) - t - 1) for a, t in zip(sums, _TRAILING)))


def product_moments(sums: PowerSums) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(count, mean, variance)`` of the products ``p = (φ − φ̄)(ΔL − ΔL̄)`` in each segment of
  :class:`PowerSums` (merge segments first with :func:`over_segments` to get longer stretches),
  each centred on its own means: ``mean`` is the covariance with divisor ``count``, ``variance``
  is ``E[p²] − mean²`` (divisor ``count``). Shapes: ``count`` that of ``sums.count``, the others
  ``(…, K, M)``. On the host, in float64."""
  s = jax.tree.map(lambda a: np.asarray(a, np.float64), sums)
  n = np.maximum(s.count, 1.0)[..., None, None]
  a, b = (s.x / n[..., 0])[..., :, None], (s.y / n[..., 0])[..., None, :]  # E x, E y
  exx, eyy = (s.xx / n[..., 0])[..., :, None], (s.yy / n[..., 0])[..., None, :]
  exy = s.xy / n
  mean = exy - a * b
  # E[(x − a)²(y − b)²], expanded into the raw moments.
  p2 = (
    s.xxyy / n
    - 2 * b * s.xxy / n
    - 2 * a * s.xyy / n
    + b * b * exx
    + a * a * eyy
    + 4 * a * b * exy
    - 3 * a * a * b * b
  )
  return s.count, mean, p2 - mean * mean


@dataclasses.dataclass(frozen=True)
class SegmentedMoments:
  """:class:`StreamedMoments` that also keeps :class:`PowerSums` of the ``num_draws`` draws after
  ``start`` in ``num_segments`` equal consecutive segments, shifted by the chain's first draw (so
  the float32 sums lose little to cancellation). Memory: ``4·G·K·M`` more than the moments. With
  ``every`` > 1 only the draws ``start, start + every, …`` are observed (thinning: ``observe`` runs
  on those steps only)."""

  observe: Callable[[Any, Any], tuple[jax.Array, jax.Array]]
  start: int
  num_draws: int
  num_segments: int
  every: int = 1

  def init(self, params_star, data) -> SegmentedState:
    mom = StreamedMoments(self.observe, self.start).init(params_star, data)
    k, m, g, dt = mom.mean_phi.shape[0], mom.mean_dloss.shape[0], self.num_segments, mom.count.dtype
    z = lambda *shape: jnp.zeros(shape, dt)  # noqa: E731
    sums = PowerSums(z(g), z(g, k), z(g, m), z(g, k), z(g, m), *(z(g, k, m) for _ in range(4)))
    return SegmentedState(mom, z(k), z(m), sums)

  def update(self, state: SegmentedState, w, step: jax.Array, data) -> SegmentedState:
    def add(state):
      phi, dloss = self.observe(w, data)
      phi, dloss = phi.astype(state.shift_phi.dtype), dloss.astype(state.shift_dloss.dtype)
      first = state.moments.count == 0
      a = jnp.where(first, phi, state.shift_phi)
      b = jnp.where(first, dloss, state.shift_dloss)
      x, y = phi - a, dloss - b
      xy = jnp.outer(x, y)
      terms = PowerSums(
        jnp.ones((), x.dtype), x, y, x * x, y * y, xy, x[:, None] * xy, xy * y[None, :], xy * xy
      )
      g = jnp.clip(
        (step - self.start) * self.num_segments // self.num_draws, 0, self.num_segments - 1
      )
      sums = jax.tree.map(lambda s, t: s.at[g].add(t), state.sums, terms)
      return SegmentedState(moments_update(state.moments, phi, dloss), a, b, sums)

    if self.start <= 0 and self.every == 1:
      return add(state)
    observed = (step >= self.start) & ((step - self.start) % self.every == 0)
    return jax.lax.cond(observed, add, lambda s: s, state)
