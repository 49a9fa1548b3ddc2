"""Patterning: the data re-weighting that moves posterior expectations where we want them (Wang &
Murfet 2026, arXiv:2601.13548), and training on the re-weighted distribution.

To first order a change ``dh`` of the weights of M probe samples (or groups) moves K observables by
``dμ = J·dh`` with ``J = nβ·χ`` (:mod:`mechjax.slt.susceptibility`). Inverting it gives the smallest
re-weighting that produces a target change:

    dh = J⁺·dμ_target        (minimum norm; with ridge ρ: Jᵀ(JJᵀ + ρI)⁻¹·dμ_target).

A re-weighting is applied to a *distribution* over the M probes, ``p = u + dh`` with ``u`` the base
distribution (uniform by default), so the constrained version keeps ``p`` on the simplex (``p ≥ 0``,
``Σp = 1``): it minimises ``‖J(p − u) − dμ‖² + ρ‖p − u‖²`` over the simplex by accelerated projected
gradient (FISTA) with the exact Euclidean projection onto the simplex.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.slt import susceptibility
from mechjax.train import loop


def _check(response, target_delta) -> tuple[np.ndarray, np.ndarray]:
  j = np.asarray(response, np.float64)
  if j.ndim == 1:
    j = j[None]
  t = np.atleast_1d(np.asarray(target_delta, np.float64))
  if j.ndim != 2 or t.shape != (j.shape[0],):
    raise ValueError(
      f"response must be (K observables, M probes) and target_delta (K,); got {j.shape} and "
      f"{t.shape}"
    )
  if not (np.all(np.isfinite(j)) and np.all(np.isfinite(t))):
    raise ValueError("response and target_delta must be finite")
  return j, t


def patterning_weights(
  response,
  target_delta,
  *,
  ridge: float = 0.0,
  simplex: bool = False,
  base=None,
  iterations: int = 5000,
) -> np.ndarray:
  """The re-weighting ``dh`` (M,) that moves the K observables by ``target_delta`` to first order.

  Args:
    response: ``J = dE[φ]/dh``, ``(K, M)``: :attr:`SusceptibilityResult.response` (``nβ·χ``).
      Passing ``χ`` instead gives ``nβ`` times the re-weighting.
    target_delta: ``(K,)``, the wanted change of each observable.
    ridge: ``ρ ≥ 0``; damps directions of small response (and makes an ill-posed inverse
    well-posed). simplex: keep ``base + dh`` a probability distribution (non-negative, summing to
    1). The target is then
      met only as far as the simplex allows, in least squares.
    base: the base distribution over the M probes (default uniform); used with ``simplex``.
    iterations: projected-gradient iterations for ``simplex``.

  Returns:
    ``dh``; with ``simplex`` the new distribution is ``base + dh``.
  """
  j, t = _check(response, target_delta)
  if not ridge >= 0:
    raise ValueError(f"ridge must be >= 0; got {ridge!r}")
  m = j.shape[1]
  if not simplex:
    gram = j @ j.T + ridge * np.eye(j.shape[0])
    return j.T @ (np.linalg.pinv(gram) @ t) if ridge == 0 else j.T @ np.linalg.solve(gram, t)
  u = np.full(m, 1.0 / m) if base is None else np.asarray(base, np.float64)
  if u.shape != (m,) or np.any(u < 0) or abs(u.sum() - 1) > 1e-6:
    raise ValueError(
      f"base must be a distribution over the {m} probes (non-negative, summing to 1)"
    )
  # FISTA on f(p) = ½‖J(p − u) − t‖² + ½ρ‖p − u‖², step 1/Lipschitz.
  lipschitz = np.linalg.norm(j, 2) ** 2 + ridge
  step = 1.0 / max(lipschitz, 1e-30)
  p = y = u.copy()
  s = 1.0
  for _ in range(iterations):
    grad = j.T @ (j @ (y - u) - t) + ridge * (y - u)
    p_next = project_simplex(y - step * grad)
    s_next = (1 + np.sqrt(1 + 4 * s * s)) / 2
    y = p_next + (s - 1) / s_next * (p_next - p)
    if np.max(np.abs(p_next - p)) < 1e-12:
      p = p_next
      break
    p, s = p_next, s_next
  return p - u


def project_simplex(v) -> np.ndarray:
  """The Euclidean projection of ``v`` onto the probability simplex (Held, Wolfe & Crowder 1974)."""
  v = np.asarray(v, np.float64)
  srt = np.sort(v)[::-1]
  css = np.cumsum(srt) - 1.0
  k = np.arange(1, v.size + 1)
  rho = np.nonzero(srt - css / k > 0)[0][-1]
  return np.maximum(v - css[rho] / (rho + 1), 0.0)


def weighted_problem(
  init: Callable[[jax.Array], Any],
  per_sample_loss: Callable[[Any, Any], jax.Array],
  data,
  weights,
  batch_size: int,
  evaluate=None,
) -> loop.Problem:
  """A :class:`mechjax.train.loop.Problem` that trains on ``data`` resampled with probabilities
  ``weights``.

  Each step draws ``batch_size`` samples with replacement from ``Categorical(weights)`` (from the
  step's key, so runs stay reproducible and resumable) and minimises their mean ``per_sample_loss``;
  its expectation is the re-weighted loss ``Σ_i weights_i ℓ_i``.

  Args:
    init: ``init(key) -> params``.
    per_sample_loss: ``per_sample_loss(params, batch) -> (B,)`` or per-token ``(B, T)`` losses
      (averaged).
    data: the training samples, a pytree of arrays with the samples first (n of them).
    weights: ``(n,)`` non-negative sampling weights with a positive sum (normalised here), e.g. from
      :func:`sample_weights`.
    batch_size: samples drawn per step.
    evaluate: the problem's ``evaluate(params, key) -> metrics``, or None.
  """
  w = np.asarray(weights, np.float64)
  n = jax.tree.leaves(data)[0].shape[0]
  if w.shape != (n,) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
    raise ValueError(
      f"weights must be {n} non-negative finite numbers with a positive sum; got shape {w.shape}"
    )
  logits = jnp.asarray(np.log(np.where(w > 0, w / w.sum(), 1e-300)), jnp.float32)

  def loss(params, key):
    idx = jax.random.categorical(key, logits, shape=(batch_size,))
    return jnp.mean(per_sample_loss(params, jax.tree.map(lambda a: a[idx], data))), {}

  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def group_response(response, group_ids, num_groups: int | None = None) -> np.ndarray:
  """The response to shifting weight toward each *group* of probes: the mean of its members'
  columns. Exact, because the response is linear in the target distribution ``q′``, and the group's
  ``q′`` is the uniform mixture of its members' point masses.

  Args:
    response: ``(K, M)`` (or ``(M,)``) responses of K observables to M probes.
    group_ids: ``(M,)`` non-negative group index of each probe column.
    num_groups: G; by default one more than the largest id.

  Returns:
    ``(K, G)``; a group with no member gets a NaN column.
  """
  j = np.asarray(response, np.float64)
  j = j[None] if j.ndim == 1 else j
  g = np.asarray(group_ids)
  if g.shape != (j.shape[1],) or (g.size and g.min() < 0):
    raise ValueError(
      f"group_ids must hold one non-negative group per probe column ({j.shape[1]}); got {g.shape}"
    )
  num_groups = int(g.max()) + 1 if num_groups is None else num_groups
  sums = np.zeros((j.shape[0], num_groups))
  np.add.at(sums.T, g, j.T)
  counts = np.bincount(g, minlength=num_groups)
  with np.errstate(invalid="ignore", divide="ignore"):
    return sums / np.where(counts > 0, counts, np.nan)


def group_response_se(standard_error, group_ids, num_groups: int | None = None) -> np.ndarray:
  """The standard error of each group's response (:func:`group_response`, the mean of its members'
  columns) from its members' standard errors, taken as independent: ``sqrt(Σ_{i∈g} se_i²) / |g|``.

  Args:
    standard_error: ``(K, M)`` (or ``(M,)``) standard errors of the responses of K observables to M
      probes.
    group_ids: ``(M,)`` non-negative group index of each probe column.
    num_groups: G; by default one more than the largest id.

  Returns:
    ``(K, G)``; a group with no member gets a NaN column.
  """
  g = np.asarray(group_ids)
  num_groups = int(g.max()) + 1 if num_groups is None else num_groups
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.sqrt(
      group_response(standard_error**2, g, num_groups) / np.bincount(g, minlength=num_groups)
    )


def sample_weights(group_distribution, group_ids) -> np.ndarray:
  """Per-sample probabilities from a distribution over groups: each group's mass spread evenly over
  its samples (``p_i = P(g_i) / |g_i|``). Mass on a group with no sample is refused."""
  p = np.asarray(group_distribution, np.float64)
  g = np.asarray(group_ids)
  counts = np.bincount(g, minlength=len(p))
  if len(counts) != len(p):
    raise ValueError(f"group_ids name {len(counts)} groups but the distribution has {len(p)}")
  if np.any((counts == 0) & (p > 0)):
    raise ValueError(
      f"groups {np.nonzero((counts == 0) & (p > 0))[0].tolist()} have mass but no sample"
    )
  return p[g] / counts[g]


def principal_group_change(chi, groups, target_groups, num_groups: int, top: int) -> dict:
  """The re-weighting along a principal direction of ``χ`` (Wang & Murfet 2026): of the ``top``
  leading right singular vectors ``v_k`` of ``χ``
  (:func:`mechjax.slt.susceptibility.principal_directions`), the one whose probe loadings correlate
  most, in absolute value, with the indicator of ``target_groups``. Shifting weight along ``v_k``
  is the minimum-norm way to move the components along the matching ``u_k`` (``χ⁺u_k = v_k / s_k``).

  Args:
    chi: ``(components, probes)``.
    groups: ``(probes,)`` group of each probe column.
    target_groups: the groups the change should favour.
    num_groups: G.
    top: how many leading directions to choose from.

  Returns:
    ``{"component": k, "correlations": (all directions,), "explained_variance": (…,),
    "component_loadings": u_k, "direction": (G,)}``, the direction being ``v_k``'s loadings averaged
    per group, centred (so the total weight does not change) and signed so that the target groups
    gain on average.
  """
  pcs = susceptibility.principal_directions(chi)
  indicator = np.isin(groups, target_groups).astype(float)
  corr = np.array([np.corrcoef(v, indicator)[0, 1] for v in pcs["Vt"]])
  k = int(np.nanargmax(np.abs(corr[:top])))
  loading = group_response(pcs["Vt"][k], groups, num_groups)[0]
  direction = loading - loading.mean()
  if direction[target_groups].mean() < direction.mean():
    direction = -direction
  return {
    "component": k,
    "correlations": corr,
    "explained_variance": pcs["explained_variance"],
    "component_loadings": pcs["U"][:, k],
    "direction": direction,
  }


def step_limit(base, change) -> float:
  """The largest ``s`` with ``base + s · change ≥ 0`` everywhere (inf when nothing decreases)."""
  falling = change < 0
  return np.min(base[falling] / -change[falling]) if np.any(falling) else np.inf


def random_change(base, size: float, generator: np.random.Generator, strength: float) -> np.ndarray:
  """A control for a re-weighting: a centred Gaussian change of ``base`` with ``Σ|change| = size``,
  shrunk to ``strength`` times :func:`step_limit` when that size would make a weight negative (the
  control then moves less, which its total variation shows)."""
  r = generator.normal(size=np.shape(base))
  r = r - r.mean()
  r = r * size / np.abs(r).sum()
  if np.any(base + r < 0):
    r = r * strength * step_limit(base, r)
  return r
