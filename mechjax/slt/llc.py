"""The local learning coefficient (LLC) estimated from SGLD draws (Lau et al. 2023,
arXiv:2308.12108).

    λ̂(w*) = nβ · (E_w[L_n(w)] − L_n(w*)),

the expectation over the localized tempered posterior of :mod:`mechjax.slt.sgld`. Each chain
estimates it by ``nβ · mean_t [L_{B_t}(w_t) − L_{B_t}(w*)]`` over the draws after burn-in: the loss
*difference* on each step's own minibatch. Because the batch is drawn independently of ``w_t``, the
difference is an unbiased estimate of ``L_n(w_t) − L_n(w*)``; near ``w*`` the two minibatch losses
share almost all of their sampling noise, so it is far less noisy than ``L_{B_t}(w_t) − L_n(w*)``
(devinterp's estimator), whose minibatch noise is multiplied by ``nβ``. When the loss is a mean over
samples, ``L_{B_t}(w*)`` is the mean of the batch's per-sample losses at ``w*``, computed once for
every sample before the chains start (``star_loss="per_sample"``, :func:`star_loss_path`);
otherwise it costs one extra forward pass per step (``"per_step"``). The diagnostics say which ran.

``init_loss`` (``L_n(w*)``, reported) is the mean of the per-sample losses on the per-sample
path; otherwise the mean loss over the whole dataset when it has at most ``FULL_INIT_LOSS_MAX``
samples, else over ``INIT_LOSS_BATCHES`` batches of ``batch_size`` samples drawn from the key's
stream ``"init-loss"`` (:func:`mechjax.rng.fold`), never from a single minibatch.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from mechjax import rng
from mechjax import sharding
from mechjax.slt import inputs
from mechjax.slt import mixing
from mechjax.slt import placement
from mechjax.slt import restriction as restriction_lib
from mechjax.slt import sgld
from mechjax.slt import stream
from mechjax.slt.inputs import Streamed
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import settings_from
from mechjax.train import loop

FULL_INIT_LOSS_MAX = 65_536
INIT_LOSS_BATCHES = 64


class ChainDivergedError(FloatingPointError):
  """A chain's loss became NaN or infinite; the message names the chain, the draw and the step
  size."""


ChainsNotMixedWarning = mixing.ChainsNotMixedWarning


@dataclasses.dataclass
class LLCResult:
  """What :func:`estimate_llc` returns.

  From :func:`estimate_llc_batch` every field but ``diagnostics["nbeta"]`` and the path names has
  a leading axis of points: ``llc_mean`` is ``(B,)``, ``loss_trace`` ``(B, num_chains,
  num_draws)``, and so on.

  Attributes:
    llc_mean: the LLC estimate ``λ̂ = nβ·(E[L_B(w)] − E[L_B(w*)])``, averaged over chains.
    llc_std: the standard deviation of the per-chain estimates.
    llc_per_chain: ``(num_chains,)`` per-chain estimates.
    loss_trace: ``(num_chains, num_draws)`` minibatch losses at the draws, burn-in excluded.
    llc_trace: ``(num_chains, num_draws)`` the terms whose mean over the draws is a chain's
      estimate, ``nβ·(L_{B_t}(w_t) − L_{B_t}(w*))``.
    init_loss: ``L_n(w*)``.
    diagnostics: whether the chains mixed, from ``llc_trace`` (:mod:`mechjax.slt.mixing`, Vehtari
      et al. 2021): ``rhat`` (rank-normalised split-R̂; trust the draws below 1.01), ``ess_bulk``
      and ``ess_tail`` (effective sample sizes of all the draws; Vehtari et al. ask for 100 per
      chain), NaN with fewer than 8 draws. A :class:`ChainsNotMixedWarning` says when either rule
      fails. Then sampler health, averaged over the draws: ``mala_acceptance`` (with MALA on; the
      mean over the ``mala_steps`` draws on which it was evaluated, every ``mala_every``-th step),
      ``drift_norm_mean``, ``noise_norm_mean`` and ``distance_mean`` from ``w*`` (means over the
      draws on every ``norms_every``-th step and the last), ``distance_final`` (after the last
      step), ``fraction_below_init_loss``, the ``nbeta`` used, and ``star_loss`` (the path that
      computed ``L_B(w*)``: ``"per_sample"`` or ``"per_step"``) with ``star_loss_reason``.
  """

  llc_mean: float | np.ndarray  # a float; (B,) from estimate_llc_batch
  llc_std: float | np.ndarray  # a float; (B,)
  llc_per_chain: np.ndarray  # (num_chains,); (B, num_chains)
  loss_trace: np.ndarray  # (num_chains, num_draws), burn-in excluded; (B, num_chains, num_draws)
  llc_trace: np.ndarray  # (num_chains, num_draws); (B, num_chains, num_draws)
  init_loss: float | np.ndarray  # a float; (B,)
  diagnostics: dict[str, Any]  # floats and path names; (B,) arrays but nbeta and the path names


def init_loss(loss_fn: Callable, params, data, key: jax.Array, batch_size: int) -> float:
  """``L_n(w*)``: over all of ``data`` when it is small, else over ``INIT_LOSS_BATCHES`` seeded
  batches (of a sampler ``sample_batch(key) -> batch``, always the latter)."""
  if inputs.is_sampler(data):
    return float(_sampled_loss(loss_fn, data)(params, rng.fold(key, "init-loss")))
  if isinstance(data, Streamed):
    return _streamed_loss(loss_fn, params, data, key, batch_size)
  n = jax.tree.leaves(data)[0].shape[0]
  if n <= FULL_INIT_LOSS_MAX:
    return float(_jitted(loss_fn)(params, data))
  return float(_batched_loss(loss_fn, batch_size)(params, data, rng.fold(key, "init-loss")))


def _streamed_loss(loss_fn, params, data: Streamed, key, batch_size: int) -> float:
  """:func:`init_loss` of streamed data: every row when there are at most ``FULL_INIT_LOSS_MAX``,
  else the same seeded batches as in memory, gathered on the host."""
  if data.num_samples <= FULL_INIT_LOSS_MAX:
    return float(_jitted(loss_fn)(params, data.gather(np.arange(data.num_samples))))
  keys = jax.random.split(rng.fold(key, "init-loss"), INIT_LOSS_BATCHES)
  idx = jax.vmap(lambda k: jax.random.randint(k, (batch_size,), 0, data.num_samples))(keys)
  losses = [_jitted(loss_fn)(params, data.gather(rows)) for rows in np.asarray(idx)]
  return float(jnp.mean(jnp.stack(losses)))


def _streamed_star_check(loss_fn, params, data: Streamed, key, s: SGLDSettings):
  """:func:`_star_check` for streamed data: the per-sample losses streamed through once, and the two
  check batches (the same indices as in memory) gathered on the host."""
  star = stream.star_losses(loss_fn, params, data)
  idx = np.asarray(
    jax.vmap(lambda k: jax.random.randint(k, (s.batch_size,), 0, data.num_samples))(
      jax.random.split(key, 2)
    )
  )
  batch_losses = [_jitted(loss_fn)(params, data.gather(rows)) for rows in idx]
  return star, np.asarray(batch_losses), np.asarray([jnp.mean(star[rows]) for rows in idx])


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _star_check(loss_fn, batch_size: int):
  """One program for :func:`star_loss_path`: every sample's loss at ``w*``
  (:func:`mechjax.slt.sgld.per_sample_star_losses`), and on two batches drawn from ``key`` the
  batch's loss next to the mean of its samples' losses."""

  @jax.jit
  def run(params, data, key):
    star = placement.per_sample_program(loss_fn, 256)(params, data)
    n = jax.tree.leaves(data)[0].shape[0]

    def check(k):
      idx = jax.random.randint(k, (batch_size,), 0, n)
      return loss_fn(params, jax.tree.map(lambda a: a[idx], data)), jnp.mean(star[idx])

    batch_losses, mean_losses = jax.lax.map(check, jax.random.split(key, 2))
    return star, batch_losses, mean_losses

  return run


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _jitted(loss_fn):
  return jax.jit(loss_fn)


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _sampled_loss(loss_fn, sample_batch):
  @jax.jit
  def mean_over_batches(params, key):
    one = lambda k: loss_fn(params, sample_batch(k))  # noqa: E731
    return jnp.mean(jax.lax.map(one, jax.random.split(key, INIT_LOSS_BATCHES)))

  return mean_over_batches


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _batched_loss(loss_fn, batch_size: int):
  @jax.jit
  def mean_over_batches(params, data, key):
    n = jax.tree.leaves(data)[0].shape[0]

    def one(k):
      idx = jax.random.randint(k, (batch_size,), 0, n)
      return loss_fn(params, jax.tree.map(lambda a: a[idx], data))

    return jnp.mean(jax.lax.map(one, jax.random.split(key, INIT_LOSS_BATCHES)))

  return mean_over_batches


def star_loss_path(
  loss_fn: Callable, params, data, key: jax.Array, settings: SGLDSettings
) -> tuple[str, str, jax.Array | None]:
  """``(path, reason, star_losses)``: how the chains get each step's ``L_B(w*)``.

  ``"per_sample"`` computes ``loss_fn(w*, [x_i])`` for every sample once
  (:func:`mechjax.slt.sgld.per_sample_star_losses`) and averages the batch's entries: exact when
  the loss of a batch is the mean of its samples' losses (a mean of per-sample terms plus any term
  that does not depend on the batch). ``"per_step"`` evaluates ``loss_fn(w*, B_t)`` on every step.
  With ``settings.star_loss="auto"`` the per-sample path runs when the data are arrays, holding no
  more samples than the chains draw in all (``num_chains × num_steps × batch_size``: otherwise one
  pass over the data costs more than it saves), the loss can be evaluated on a single sample, and
  on two batches of ``batch_size`` drawn from ``key``'s stream ``"star-loss-check"`` the loss equals
  the mean of the per-sample losses to within 1000 ulps. ``"per_sample"`` insists (a ValueError
  says which condition failed); ``"per_step"`` never checks.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, as for :func:`estimate_llc`.
    params: ``w*``.
    data: arrays with the samples first, or a sampler.
    key: the estimate's key; the check's batches come from its stream ``"star-loss-check"``.
    settings: the resolved :class:`mechjax.slt.sgld.SGLDSettings` (``star_loss`` says what is
      asked for).
  """
  asked = settings.star_loss
  if asked == "per_step":
    return "per_step", "star_loss='per_step' was asked for", None

  def refuse(reason: str):
    if asked == "per_sample":
      raise ValueError(f"star_loss='per_sample' cannot be used: {reason}")
    return "per_step", reason, None

  if inputs.is_sampler(data):
    return refuse("the data are a sampler, whose batches are not indexed samples")
  n = data.num_samples if isinstance(data, Streamed) else jax.tree.leaves(data)[0].shape[0]
  draws = settings.num_chains * settings.num_steps * settings.batch_size
  if asked == "auto" and n > draws:
    return refuse(f"the data's {n} samples exceed the {draws} the chains draw")
  check_key = rng.fold(key, "star-loss-check")
  try:
    if isinstance(data, Streamed):
      star, batch_losses, mean_losses = _streamed_star_check(
        loss_fn, params, data, check_key, s=settings
      )
    else:
      star, batch_losses, mean_losses = _star_check(loss_fn, settings.batch_size)(
        params, data, check_key
      )
  except Exception as e:  # noqa: BLE001 - any failure of the one-sample evaluation means fall back
    return refuse(f"the loss cannot be evaluated one sample at a time ({type(e).__name__}: {e})")
  if star.shape != (n,):
    return refuse(f"the loss of one sample has shape {star.shape[1:]}, not a scalar")
  for batch_loss, mean_loss in zip(np.asarray(batch_losses), np.asarray(mean_losses)):
    tol = 1000 * float(jnp.finfo(star.dtype).eps) * max(1.0, abs(float(batch_loss)))
    if not abs(float(batch_loss) - float(mean_loss)) <= tol:
      return refuse(
        "the loss of a batch is not the mean of its samples' losses "
        f"({batch_loss:.8g} vs {mean_loss:.8g})"
      )
  return "per_sample", "the loss is a mean over samples (checked on two batches)", star


def estimate_llc(
  loss_fn: Callable[[Any, Any], jax.Array],
  params,
  data,
  *,
  key: jax.Array,
  settings: SGLDSettings | None = None,
  param_mask=None,
  mesh: Mesh | None = None,
  **overrides: Any,
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
      ``INIT_LOSS_BATCHES`` batches. Pass the same sampler function on every call. Or a
      corpus too large for the device, left on the host (:class:`mechjax.slt.stream.Streamed`,
      e.g. a token file's :func:`~mechjax.data.tokens.disk_windows`): the chains run in parts,
      each part's samples gathered while the previous part runs, and the estimate is the
      in-memory one with the same key (every step's ``L_B(w*)`` is then a forward pass).
    key: every random choice (minibatches, noise, the init-loss batches) derives from it; the same
      key gives the same result bit for bit.
    settings: the sampler's settings, an :class:`mechjax.slt.sgld.SGLDSettings` (a study passes
      ``cfg.sgld``); optional when the keywords below give ``step_size``, ``localization`` and
      ``batch_size``.
    param_mask: 0/1 pytree like ``params``; only the 1s are sampled (the weight-refined LLC). A
      mask that fills one box per leaf, or a :class:`mechjax.slt.restriction.Restriction`, is
      sampled with chains that carry the boxes' weights only.
    mesh: a ``jax.sharding.Mesh`` with axes ``chains`` and ``model`` (either may be absent), for a
      model too large to replicate: the chains are split over ``chains`` (which must divide
      ``num_chains``), and ``w*`` and every chain's draw, noise and preconditioner state over
      ``model``, FSDP-style: each leaf along its largest dimension that the axis divides, leaves
      under :data:`mechjax.sharding.MIN_MODEL_SHARDED` entries replicated
      (:func:`mechjax.sharding.model_axis_spec`). The data are replicated. None (the default):
      the chains are split over all devices when their number divides ``num_chains``, as in
      :func:`mechjax.slt.sgld.sample_chains`.
    **overrides: any field of :class:`~mechjax.slt.sgld.SGLDSettings`, replacing the one in
      ``settings`` (:func:`mechjax.slt.sgld.settings_from`): ``num_chains``, ``num_draws`` and
      ``num_burnin`` (each chain takes ``num_burnin + num_draws`` steps, the burn-in discarded;
      defaults 4, 200 and 0), ``step_size``, ``nbeta`` (unset: ``n / ln n``), ``localization``,
      ``batch_size``, ``rmsprop``, ``mala``, ``mala_every``, ``star_loss``
      (:func:`star_loss_path`) and ``chain_loop``. A name that is not a field is refused.

  Raises:
    TypeError: an override that is not a field of ``SGLDSettings``, or a required one missing.
    ChainDivergedError: a chain's loss became non-finite; names the chain and the draw.
    mechjax.config.ConfigError: a non-positive step size, nβ, batch size or count (a ValueError).
  """
  s = settings_from(settings, **overrides)
  restriction_lib.check_param_mask(param_mask, params)
  inputs.check_params(params)
  s, _ = inputs.resolve_data(s, data, loss_fn, params)
  if mesh is not None:
    mesh = sharding.sampler_mesh(mesh, s.num_chains)
    params = sharding.place(params, mesh)
  path, reason, star = star_loss_path(loss_fn, params, data, key, s)
  traces = jax.device_get(
    sgld.sample_chains(
      loss_fn, params, data, key, s, param_mask=param_mask, star_losses=star, mesh=mesh
    )
  )
  _check_finite(np.asarray(traces["loss"], np.float64), s)
  l0 = float(np.mean(np.asarray(star, np.float64))) if star is not None else None
  if l0 is None:
    l0 = init_loss(loss_fn, params, data, key, s.batch_size)
  out = _summarise(traces, s, np.asarray(l0), path, reason)
  _warn_if_not_mixed("estimate_llc", out.diagnostics, s.num_chains)
  return LLCResult(
    llc_mean=float(out.llc_mean),
    llc_std=float(out.llc_std),
    llc_per_chain=out.llc_per_chain,
    loss_trace=out.loss_trace,
    llc_trace=out.llc_trace,
    init_loss=l0,
    diagnostics={
      k: (float(v) if isinstance(v, np.ndarray) and v.ndim == 0 else v)
      for k, v in out.diagnostics.items()
    },
  )


def estimate_llc_batch(
  loss_fn: Callable[[Any, Any], jax.Array],
  params_stack,
  data,
  *,
  key: jax.Array,
  settings: SGLDSettings | None = None,
  param_mask=None,
  mesh: Mesh | None = None,
  **overrides: Any,
) -> LLCResult:
  """The LLC at ``B`` points at once: :func:`estimate_llc` for each ``params_stack[b]``, with
  points × chains in one compiled program (:func:`mechjax.slt.sgld.sample_points`), sharded over
  the devices.

  Args:
    params_stack: a pytree like :func:`estimate_llc`'s ``params`` whose every leaf has a leading
      axis of ``B`` points (checkpoints, seeds or both, flattened).
    key: one key, used by every point (so that neighbouring checkpoints share their random numbers
      and their differences are less noisy), or ``B`` keys (typed ``(B,)`` or raw ``(B, 2)``).
      Point ``b`` gives what ``estimate_llc(loss_fn, params_stack[b], data, key=its key)`` gives,
      up to floating-point rounding.
    mesh: as for :func:`estimate_llc`; its ``chains`` axis splits the ``B × num_chains`` chains.
    everything else: as for :func:`estimate_llc`; the ``L_B(w*)`` path is chosen and checked on
      the first point and used for all.

  Returns:
    an :class:`LLCResult` whose fields have a leading axis of ``B`` points.
  """
  s = settings_from(settings, **overrides)
  s, sampler = inputs.resolve_data(s, data)
  leaves = jax.tree.leaves(params_stack)
  num_points = leaves[0].shape[0] if leaves and jnp.ndim(leaves[0]) else 0
  keys = _point_keys(key, num_points)
  first = jax.tree.map(lambda a: a[0], params_stack) if num_points else params_stack
  restriction_lib.check_param_mask(param_mask, first, "one point of params_stack")
  if num_points:
    inputs.check_params(params_stack)
    inputs.check_loss(loss_fn, first, data, s.batch_size)
  path, reason, star0 = (
    star_loss_path(loss_fn, first, data, keys[0], s)
    if num_points
    else (
      "per_step",
      "no points",
      None,
    )
  )
  star = None
  if star0 is not None:
    star = jax.vmap(lambda p: placement.per_sample_star_losses(loss_fn, p, data))(params_stack)
  traces = jax.device_get(
    sgld.sample_points(
      loss_fn, params_stack, data, keys, s, param_mask=param_mask, star_losses=star, mesh=mesh
    )
  )
  _check_finite(np.asarray(traces["loss"], np.float64), s)
  if star is not None:
    l0 = np.asarray(star, np.float64).mean(axis=1)
  else:
    l0 = np.array(
      [
        init_loss(
          loss_fn, jax.tree.map(lambda a, b=b: a[b], params_stack), data, keys[b], s.batch_size
        )
        for b in range(num_points)
      ]
    )
  out = _summarise(traces, s, l0, path, reason)
  _warn_if_not_mixed("estimate_llc_batch", out.diagnostics, s.num_chains)
  return out


def _warn_if_not_mixed(name: str, diagnostics: dict, num_chains: int) -> None:
  line = mixing.warning(f"{name} (the LLC)", diagnostics, num_chains)
  if line is not None:
    warnings.warn(line, ChainsNotMixedWarning, stacklevel=3)


def _point_keys(key, num_points: int) -> jax.Array:
  """``(B,)`` keys (typed or raw) for the points: one key repeated, or one per point checked."""
  key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
  typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
  single = key.ndim == (0 if typed else 1)
  if single:
    return jnp.broadcast_to(key, (num_points, *key.shape))
  if key.shape[0] != num_points or key.ndim != (1 if typed else 2):
    raise ValueError(
      f"key must be one PRNG key or one per point ({num_points}); got shape {key.shape}"
    )
  return key


def _check_finite(loss_all: np.ndarray, s: SGLDSettings) -> None:
  """Raises :class:`ChainDivergedError` for the first non-finite loss, naming its point (when
  there is a point axis), chain and draw."""
  flat = loss_all.reshape(-1, loss_all.shape[-1])
  first = loop.first_nonfinite(flat)
  if first is None:
    return
  row, step = first
  where = f"chain {row}"
  if loss_all.ndim == 3:
    where = f"point {row // loss_all.shape[1]}, chain {row % loss_all.shape[1]}"
  raise ChainDivergedError(
    f"{where} became non-finite at step {step} (draw {step - s.num_burnin} after "
    f"{s.num_burnin} burn-in steps) with step_size={s.step_size:g}; try a smaller step_size or a "
    "larger localization"
  )


def _summarise(traces, s: SGLDSettings, l0, path: str, reason: str) -> LLCResult:
  """The estimate from the traces, whose last two axes are (chains, steps); any axes before them
  (points) are kept."""
  keep = lambda name: np.asarray(traces[name], np.float64)[..., s.num_burnin :]  # noqa: E731
  loss_trace = keep("loss")
  delta = loss_trace - keep("loss_at_star")
  llc_trace = s.nbeta * delta
  per_chain = llc_trace.mean(axis=-1)
  draws_axes = (-2, -1)
  diagnostics = {
    **_mixing(llc_trace),
    "fraction_below_init_loss": np.mean(delta < 0, axis=draws_axes),  # below w*'s, same minibatch
    "distance_final": keep("distance")[..., -1],
    # over the steps that have them (every norms_every-th and the last; NaN on the others)
    "distance_mean": np.nanmean(keep("distance"), axis=draws_axes),
    "drift_norm_mean": np.nanmean(keep("drift_norm"), axis=draws_axes),
    "noise_norm_mean": np.nanmean(keep("noise_norm"), axis=draws_axes),
    "norms_every": s.norms_every,
    "nbeta": s.nbeta,
    "star_loss": path,
    "star_loss_reason": reason,
  }
  if s.mala:
    acceptance = keep("acceptance")
    evaluated = np.isfinite(acceptance)
    with warnings.catch_warnings():  # no MALA step when mala_every exceeds the draws: NaN, quietly
      warnings.simplefilter("ignore", RuntimeWarning)
      diagnostics["mala_acceptance"] = np.nanmean(
        np.where(evaluated, acceptance, np.nan), axis=draws_axes
      )
    diagnostics["mala_steps"] = int(
      evaluated.reshape(-1, evaluated.shape[-1])[0].sum()
    )  # per chain
    diagnostics["mala_every"] = s.mala_every
  return LLCResult(
    llc_mean=per_chain.mean(axis=-1),
    llc_std=per_chain.std(axis=-1),
    llc_per_chain=per_chain,
    loss_trace=loss_trace,
    llc_trace=llc_trace,
    init_loss=l0,
    diagnostics=diagnostics,
  )


def _mixing(llc_trace: np.ndarray) -> dict[str, np.ndarray]:
  """R̂ and the bulk and tail ESS of the LLC's traces (per point when there is a point axis); NaN
  when the split chains would have fewer than 4 draws each."""
  if llc_trace.shape[-1] < 8:
    nan = np.full(llc_trace.shape[:-2], np.nan)
    return {"rhat": nan, "ess_bulk": nan, "ess_tail": nan}
  return mixing.summary(llc_trace)
