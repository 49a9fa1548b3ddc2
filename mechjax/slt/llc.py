"""The local learning coefficient (LLC) estimated from SGLD draws (Lau et al. 2023,
arXiv:2308.12108).

    λ̂(w*) = nβ · (E_w[L_n(w)] − L_n(w*)),

the expectation over the localized tempered posterior of :mod:`mechjax.slt.sgld`. Each chain
estimates it by ``nβ · mean_t [L_{B_t}(w_t) − L_{B_t}(w*)]`` over the draws after burn-in: the loss
*difference* on each step's own minibatch. Because the batch is drawn independently of ``w_t``, the
difference is an unbiased estimate of ``L_n(w_t) − L_n(w*)``; near ``w*`` the two minibatch losses
share almost all of their sampling noise, so it is far less noisy than ``L_{B_t}(w_t) − L_n(w*)``
(devinterp's estimator), whose minibatch noise is multiplied by ``nβ``. The price is one extra
forward pass per step.

``init_loss`` (``L_n(w*)``, reported and used for the fraction of draws below it) is the mean loss
over the whole dataset when it has at most ``FULL_INIT_LOSS_MAX`` samples, otherwise over
``INIT_LOSS_BATCHES`` batches of ``batch_size`` samples drawn from the key's stream ``"init-loss"``
(:func:`mechjax.rng.fold`), never from a single minibatch.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import rng
from mechjax.slt import sgld
from mechjax.train import loop

FULL_INIT_LOSS_MAX = 65_536
INIT_LOSS_BATCHES = 64


class ChainDivergedError(FloatingPointError):
  """A chain's loss became NaN or infinite; the message names the chain, the draw and the step
  size."""


@dataclasses.dataclass
class LLCResult:
  """What :func:`estimate_llc` returns.

  Attributes:
    llc_mean: the LLC estimate ``λ̂ = nβ·(E[L_B(w)] − E[L_B(w*)])``, averaged over chains.
    llc_std: the standard deviation of the per-chain estimates.
    llc_per_chain: ``(num_chains,)`` per-chain estimates.
    loss_trace: ``(num_chains, num_draws)`` minibatch losses at the draws, burn-in excluded.
    init_loss: ``L_n(w*)``.
    diagnostics: sampler health, averaged over the draws: ``mala_acceptance`` (with MALA on),
      ``drift_norm_mean``, ``noise_norm_mean``, ``distance_mean`` and ``distance_final`` from
      ``w*``, ``fraction_below_init_loss``, and the ``nbeta`` used.
  """

  llc_mean: float
  llc_std: float
  llc_per_chain: np.ndarray  # (num_chains,)
  loss_trace: np.ndarray  # (num_chains, num_draws), burn-in excluded
  init_loss: float
  diagnostics: dict[str, Any]


def init_loss(loss_fn: Callable, params, data, key: jax.Array, batch_size: int) -> float:
  """``L_n(w*)``: over all of ``data`` when it is small, else over ``INIT_LOSS_BATCHES`` seeded
  batches (of a sampler ``sample_batch(key) -> batch``, always the latter)."""
  if sgld.is_sampler(data):
    return float(_sampled_loss(loss_fn, data)(params, rng.fold(key, "init-loss")))
  n = jax.tree.leaves(data)[0].shape[0]
  if n <= FULL_INIT_LOSS_MAX:
    return float(_jitted(loss_fn)(params, data))
  return float(_batched_loss(loss_fn, batch_size)(params, data, rng.fold(key, "init-loss")))


@functools.lru_cache(maxsize=sgld.PROGRAM_CACHE_SIZE)
def _jitted(loss_fn):
  return jax.jit(loss_fn)


@functools.lru_cache(maxsize=sgld.PROGRAM_CACHE_SIZE)
def _sampled_loss(loss_fn, sample_batch):
  @jax.jit
  def mean_over_batches(params, key):
    one = lambda k: loss_fn(params, sample_batch(k))  # noqa: E731
    return jnp.mean(jax.lax.map(one, jax.random.split(key, INIT_LOSS_BATCHES)))

  return mean_over_batches


@functools.lru_cache(maxsize=sgld.PROGRAM_CACHE_SIZE)
def _batched_loss(loss_fn, batch_size: int):
  @jax.jit
  def mean_over_batches(params, data, key):
    n = jax.tree.leaves(data)[0].shape[0]

    def one(k):
      idx = jax.random.randint(k, (batch_size,), 0, n)
      return loss_fn(params, jax.tree.map(lambda a: a[idx], data))

    return jnp.mean(jax.lax.map(one, jax.random.split(key, INIT_LOSS_BATCHES)))

  return mean_over_batches


def estimate_llc(
  loss_fn: Callable[[Any, Any], jax.Array],
  params,
  data,
  *,
  key: jax.Array,
  num_chains: int | None = None,
  num_draws: int | None = None,
  num_burnin: int | None = None,
  step_size: float | None = None,
  nbeta: float | None = None,
  localization: float | None = None,
  batch_size: int | None = None,
  param_mask=None,
  rmsprop: float | None = None,
  mala: bool | None = None,
  settings: sgld.SGLDSettings | None = None,
) -> LLCResult:
  """Estimates the LLC at ``params`` (= w*) with ``num_chains`` vmapped SGLD chains.

  Args:
    loss_fn: ``loss_fn(params, batch)``, the mean loss over the batch. Pass the same function on
      every call (not a new lambda) so that the compiled sampler is reused
      (:mod:`mechjax.slt.sgld`).
    params: the point w* (a pytree). Non-float leaves (integer or boolean arrays) are held fixed;
      only the float leaves are sampled.
    data: a pytree of arrays whose leading axis is the sample axis (n samples); or a device-side
      sampler ``sample_batch(key) -> batch`` of ``batch_size`` samples, for data generated on the
      fly or too large to hold. With a sampler every SGLD step sees a fresh batch from the data
      distribution, so the estimate is of the population LLC at sample size ``n`` where
      ``nbeta`` (required then) is ``n / ln n``, and ``L(w*)`` is averaged over
      ``INIT_LOSS_BATCHES`` batches. Pass the same sampler function on every call.
    key: every random choice (minibatches, noise, the init-loss batches) derives from it; the same
      key gives the same result bit for bit.
    num_chains, num_draws, num_burnin: each chain takes ``num_burnin + num_draws`` steps; the first
      ``num_burnin`` are discarded (defaults 4, 200 and 0).
    step_size, nbeta, localization, batch_size, rmsprop, mala: see
      :class:`mechjax.slt.sgld.SGLDSettings`; ``nbeta`` unset means ``n / ln n``.
    param_mask: 0/1 pytree like ``params``; only the 1s are sampled (the weight-refined LLC).
    settings: all of the above but ``param_mask`` in one :class:`mechjax.slt.sgld.SGLDSettings`,
      instead of the keywords (not together with them).

  Raises:
    ChainDivergedError: a chain's loss became non-finite; names the chain and the draw.
    mechjax.config.ConfigError: a non-positive step size, nβ, batch size or count (a ValueError).
  """
  s = sgld.settings_from(
    settings,
    num_chains=num_chains,
    num_draws=num_draws,
    num_burnin=num_burnin,
    step_size=step_size,
    nbeta=nbeta,
    localization=localization,
    batch_size=batch_size,
    rmsprop=rmsprop,
    mala=mala,
  )
  if param_mask is not None and jax.tree.structure(param_mask) != jax.tree.structure(params):
    raise ValueError("param_mask must be a pytree with the same structure as params (0/1 arrays)")
  s, _ = sgld.resolve_data(s, data)
  traces = jax.device_get(sgld.sample_chains(loss_fn, params, data, key, s, param_mask=param_mask))
  loss_all = np.asarray(traces["loss"], np.float64)
  first = loop.first_nonfinite(loss_all)
  if first is not None:
    chain, step = first
    raise ChainDivergedError(
      f"chain {chain} became non-finite at step {step} (draw {step - s.num_burnin} after "
      f"{s.num_burnin} burn-in steps) with step_size={s.step_size:g}; try a smaller step_size or a "
      "larger localization"
    )
  l0 = init_loss(loss_fn, params, data, key, s.batch_size)
  keep = lambda name: np.asarray(traces[name], np.float64)[:, s.num_burnin :]
  loss_trace = loss_all[:, s.num_burnin :]
  delta = loss_trace - keep("loss_at_star")
  per_chain = s.nbeta * delta.mean(axis=1)
  diagnostics = {
    "fraction_below_init_loss": float(np.mean(delta < 0)),  # below w*'s loss on the same minibatch
    "distance_final": keep("distance")[:, -1],
    "distance_mean": float(keep("distance").mean()),
    "drift_norm_mean": float(keep("drift_norm").mean()),
    "noise_norm_mean": float(keep("noise_norm").mean()),
    "nbeta": s.nbeta,
  }
  if s.mala:
    diagnostics["mala_acceptance"] = float(keep("acceptance").mean())
  return LLCResult(
    llc_mean=float(per_chain.mean()),
    llc_std=float(per_chain.std()),
    llc_per_chain=per_chain,
    loss_trace=loss_trace,
    init_loss=l0,
    diagnostics=diagnostics,
  )
