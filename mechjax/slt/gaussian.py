"""Bayesian linear regression: a tempered posterior that is exactly Gaussian, and its exact response
to a re-weighting of the data, for checking susceptibility estimates
(:mod:`mechjax.slt.susceptibility`).

With per-sample losses ``ℓ_i(w) = ½(y_i − x_i·w)²``, data weights ``q`` (uniform ``1/n`` by default)
and a Gaussian localization (prior) ``(γ/2)‖w − c‖²``, the posterior ``p_q(w) ∝ exp(−nβ Σ_i q_i
ℓ_i(w) − (γ/2)‖w − c‖²)`` is ``N(μ_q, A_q⁻¹)`` with

    A_q = nβ Σ_i q_i x_i x_iᵀ + γ I,      μ_q = A_q⁻¹ (nβ Σ_i q_i y_i x_i + γ c).

A shift ``q → q + h(q′ − q)`` changes the expectation of any observable smoothly in ``h``; its
derivative at ``h = 0`` is computed here by forward-mode differentiation of the closed-form
expectation, in float64, independently of the covariance identity ``dE[φ]/dh = −nβ·Cov(φ, ΔL)`` that
the estimators rely on. The observables are a weight coordinate ``w_0``, a prediction ``x_test·w``
and the (unweighted) training loss ``L(w)``, whose expectation is ``L(μ) + ½ tr(S A⁻¹)`` with ``S =
XᵀX/n``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.slt import sgld
from mechjax.slt.moments import StreamedMoments
from mechjax.slt.settings import SGLDSettings

OBSERVABLES = ("w_0", "prediction x_test·w", "training loss L(w)")


@dataclasses.dataclass(frozen=True)
class Problem:
  x: np.ndarray  # (n, d)
  y: np.ndarray  # (n,)
  x_test: np.ndarray  # (d,)
  center: np.ndarray  # (d,): the localization centre c, and where SGLD starts
  shifts: np.ndarray  # (M, n): each row a target distribution q′ over the samples
  shift_names: tuple[str, ...]
  nbeta: float
  localization: float

  @property
  def n(self) -> int:
    return self.x.shape[0]


def make_problem(
  n: int = 200,
  d: int = 3,
  noise: float = 0.5,
  nbeta: float | None = None,
  localization: float = 1.0,
  group: int = 20,
  seed: int = 0,
) -> Problem:
  """``x ~ N(0, I)``, ``y = x·w₀ + noise``; shifts toward sample 0, toward sample 1 and toward the
  group of the first ``group`` samples; the localization is centred at the least-squares fit, so the
  posterior sits around the point SGLD starts from. ``nβ`` defaults to ``n`` (β = 1)."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d))
  w0 = rng.normal(size=d)
  y = x @ w0 + noise * rng.normal(size=n)
  center = np.linalg.lstsq(x, y, rcond=None)[0]
  shifts = np.zeros((3, n))
  shifts[0, 0] = 1.0
  shifts[1, 1] = 1.0
  shifts[2, :group] = 1.0 / group
  return Problem(
    x=x,
    y=y,
    x_test=rng.normal(size=d),
    center=center,
    shifts=shifts,
    shift_names=("toward sample 0", "toward sample 1", f"toward samples 0–{group - 1}"),
    nbeta=float(n if nbeta is None else nbeta),
    localization=float(localization),
  )


def per_sample_loss(w, x, y):
  return 0.5 * (y - x @ w) ** 2


def posterior(p: Problem, q) -> tuple[jax.Array, jax.Array]:
  """Mean and covariance of the posterior with data weights ``q``."""
  x, y = jnp.asarray(p.x), jnp.asarray(p.y)
  precision = p.nbeta * (x.T * q[None, :]) @ x + p.localization * jnp.eye(x.shape[1])
  cov = jnp.linalg.inv(precision)
  return cov @ (p.nbeta * x.T @ (q * y) + p.localization * jnp.asarray(p.center)), cov


def observables(p: Problem, w) -> jax.Array:
  """``(w_0, x_test·w, L(w))`` at one parameter vector."""
  return jnp.stack(
    [
      w[0],
      jnp.asarray(p.x_test) @ w,
      jnp.mean(per_sample_loss(w, jnp.asarray(p.x), jnp.asarray(p.y))),
    ]
  )


def loss_changes(p: Problem, w) -> jax.Array:
  """``ΔL_m(w) = Σ_i (q′_m,i − 1/n) ℓ_i(w)``, one per shift: the change of the average loss per unit
  shift."""
  losses = per_sample_loss(w, jnp.asarray(p.x), jnp.asarray(p.y))
  return (jnp.asarray(p.shifts) - 1.0 / losses.shape[0]) @ losses


def exact_expectation(p: Problem, q) -> jax.Array:
  mean, cov = posterior(p, q)
  x = jnp.asarray(p.x)
  second = x.T @ x / p.n
  loss = jnp.mean(per_sample_loss(mean, x, jnp.asarray(p.y))) + 0.5 * jnp.trace(second @ cov)
  return jnp.stack([mean[0], jnp.asarray(p.x_test) @ mean, loss])


def exact_response(p: Problem) -> np.ndarray:
  """``dE[φ_k]/dh`` for each observable ``k`` and shift ``m`` (``K × M``), by forward-mode autodiff
  in float64."""
  with jax.enable_x64(True):
    uniform = jnp.full(p.n, 1.0 / p.n)
    tangent = lambda direction: jax.jvp(
      lambda h: exact_expectation(p, uniform + h * direction), (0.0,), (1.0,)
    )[1]
    cols = jax.jit(jax.vmap(tangent))(jnp.asarray(p.shifts) - uniform[None, :])  # (M, K)
    return np.asarray(cols.T)


def exact_draws(p: Problem, num_draws: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """``num_draws`` independent posterior draws; returns ``(phi_SxK, dloss_SxM)`` in float64."""
  with jax.enable_x64(True):
    mean, cov = posterior(p, jnp.full(p.n, 1.0 / p.n))
    w = np.random.default_rng(seed).multivariate_normal(
      np.asarray(mean), np.asarray(cov), size=num_draws
    )
    w = jnp.asarray(w)
    return (
      np.asarray(jax.vmap(lambda v: observables(p, v))(w)),
      np.asarray(jax.vmap(lambda v: loss_changes(p, v))(w)),
    )


def sgld_moments(
  p: Problem,
  *,
  num_chains: int,
  num_draws: int,
  num_burnin: int,
  step_size: float,
  batch_size: int | None = None,
  seed: int = 0,
):
  """Streams ``(φ, ΔL)`` moments over SGLD draws from this posterior with :mod:`mechjax.slt.sgld`
  (the localization ``γ`` at the chain's start ``c`` is exactly the Gaussian prior); one
  :class:`Moments` per chain, stacked. The default minibatch is ``n`` samples drawn with
  replacement."""
  data = {"x": jnp.asarray(p.x, jnp.float32), "y": jnp.asarray(p.y, jnp.float32)}
  arrays = _Arrays(*(jnp.asarray(a, jnp.float32) for a in (p.x, p.y, p.x_test, p.shifts)))
  settings = SGLDSettings(
    step_size=step_size,
    nbeta=p.nbeta,
    localization=p.localization,
    batch_size=batch_size or p.n,
    num_chains=num_chains,
    num_draws=num_draws,
    num_burnin=num_burnin,
    mala=False,
  )
  traces = sgld.sample_chains(
    _sgld_loss,
    {"w": jnp.asarray(p.center, jnp.float32)},
    data,
    jax.random.PRNGKey(seed),
    settings,
    accumulator=StreamedMoments(_observe, start=num_burnin),
    accumulator_data=arrays,
  )
  return traces["accumulated"]


class _Arrays(NamedTuple):
  """The arrays :func:`observables` and :func:`loss_changes` read, as a pytree the sampler can
  carry."""

  x: jax.Array
  y: jax.Array
  x_test: jax.Array
  shifts: jax.Array


def _sgld_loss(w, batch):
  return jnp.mean(per_sample_loss(w["w"], batch["x"], batch["y"]))


def _observe(w, arrays: _Arrays):
  return observables(arrays, w["w"]), loss_changes(arrays, w["w"])
