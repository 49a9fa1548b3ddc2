"""Models whose learning coefficient is known, with the sampler settings that estimate it.

Every case has noiseless targets, so ``w*`` (the true parameter) is an exact minimum of ``L_n`` and
the estimate measures the sampler against the closed form, not the ``O(1/n)`` fluctuation of an
empirical minimum (which ``nβ = n/ln n`` would turn into an error of ``O(1/ln n)``). Losses are
``½·mean‖y − f‖²``. Inputs are standard normal except for the normal crossings, whose ``x ~ N(0,
2²)`` follows devinterp's test model ``f = x·∏ w_j^{p_j}``.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any, Callable

import jax
import jax.numpy as jnp

from mechjax.slt import closed_forms as cf
from mechjax.slt import llc as llc_lib
from mechjax.slt.settings import default_nbeta


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  truth: tuple[Fraction, int]  # (λ, m)
  build: Callable[[int], tuple[Callable, Any, Any]]  # n -> (loss_fn, params_star, data)
  step_size: float
  num_draws: int
  tolerance: float | None  # relative, against λ; None: reported only
  crossing_power: int | None = None  # for f = x·w1·w2^p: the finite-nβ target is available


def _half_mse(pred, y):
  return (
    0.5 * jnp.mean(jnp.sum((pred - y) ** 2, axis=-1))
    if pred.ndim > 1
    else 0.5 * jnp.mean((pred - y) ** 2)
  )


def _regular(d):
  def build(n):
    x = jax.random.normal(jax.random.PRNGKey(0), (n, d))
    w0 = jnp.ones(d)
    return (lambda w, b: _half_mse(b["x"] @ w["w"], b["y"])), {"w": w0}, {"x": x, "y": x @ w0}

  return build


def _crossing(p):
  def build(n):
    x = 2.0 * jax.random.normal(jax.random.PRNGKey(0), (n,))
    loss = lambda w, b: _half_mse(b["x"] * w["w1"] * w["w2"] ** p, b["y"])
    return loss, {"w1": jnp.zeros(()), "w2": jnp.zeros(())}, {"x": x, "y": jnp.zeros(n)}

  return build


def _rrr(m, h, k):
  def build(n):
    x = jax.random.normal(jax.random.PRNGKey(0), (n, m))
    loss = lambda w, b: _half_mse(b["x"] @ w["A"] @ w["B"], b["y"])
    return loss, {"A": jnp.zeros((m, h)), "B": jnp.zeros((h, k))}, {"x": x, "y": jnp.zeros((n, k))}

  return build


def _dln_3333_rank1():
  """x ↦ x W1 W2 W3 with 3 × 3 layers and a rank-1 truth (x·v) u, factored through the first
  coordinate."""

  def build(n):
    x = jax.random.normal(jax.random.PRNGKey(0), (n, 3))
    u, v, e1 = jnp.array([1.0, 0.5, -0.5]), jnp.array([0.5, 1.0, 0.0]), jnp.array([1.0, 0.0, 0.0])
    w_star = {"W1": jnp.outer(v, e1), "W2": jnp.outer(e1, e1), "W3": jnp.outer(e1, u)}
    loss = lambda w, b: _half_mse(b["x"] @ w["W1"] @ w["W2"] @ w["W3"], b["y"])
    return loss, w_star, {"x": x, "y": x @ jnp.outer(v, u)}

  return build


CASES = (
  Case("regular linear regression, d = 10", cf.regular(10), _regular(10), 5e-6, 10_000, 0.05),
  Case(
    "normal crossing w1·w2²",
    cf.normal_crossing((1, 2)),
    _crossing(2),
    1e-4,
    20_000,
    0.20,
    crossing_power=2,
  ),
  Case(
    "normal crossing w1·w2³",
    cf.normal_crossing((1, 3)),
    _crossing(3),
    1e-4,
    20_000,
    None,
    crossing_power=3,
  ),
  Case(
    "normal crossing w1·w2",
    cf.normal_crossing((1, 1)),
    _crossing(1),
    1e-4,
    20_000,
    None,
    crossing_power=1,
  ),
  Case(
    "reduced-rank regression 5-3-5, rank 0",
    cf.reduced_rank_regression(5, 3, 5, 0),
    _rrr(5, 3, 5),
    3e-5,
    20_000,
    0.20,
  ),
  Case(
    "deep linear network 3-3-3-3, rank 1",
    cf.deep_linear_network((3, 3, 3, 3), 1),
    _dln_3333_rank1(),
    1e-5,
    20_000,
    None,
  ),
)


def estimate(
  case: Case,
  *,
  n: int = 100_000,
  num_chains: int = 8,
  num_draws: int | None = None,
  localization: float = 1.0,
  batch_size: int = 1000,
  seed: int = 1,
) -> dict:
  """Runs ``case`` at ``nβ = n/ln n``; returns the estimate, the truth, the relative error and
  diagnostics."""
  loss, w_star, data = case.build(n)
  nbeta = default_nbeta(n)
  draws = num_draws or case.num_draws
  res = llc_lib.estimate_llc(
    loss,
    w_star,
    data,
    key=jax.random.PRNGKey(seed),
    num_chains=num_chains,
    num_draws=draws,
    num_burnin=draws // 10,
    step_size=case.step_size,
    nbeta=nbeta,
    localization=localization,
    batch_size=batch_size,
  )
  lam = float(case.truth[0])
  out = {
    "name": case.name,
    "llc_mean": res.llc_mean,
    "llc_std": res.llc_std,
    "truth": lam,
    "multiplicity": case.truth[1],
    "relative_error": res.llc_mean / lam - 1,
    "n": n,
    "nbeta": nbeta,
    "step_size": case.step_size,
    "localization": localization,
    "batch_size": batch_size,
    "num_chains": num_chains,
    "num_draws": draws,
    "mala_acceptance": res.diagnostics["mala_acceptance"],
  }
  if case.crossing_power is not None:
    out["finite_nbeta_target"] = cf.crossing_expectation(
      case.crossing_power, nbeta, localization, scale=2.0
    )
  return out
