"""Susceptibilities: the linear response of posterior expectations to a shift of the data
distribution.

Shift the data distribution ``q → q + h(q′ − q)``. The average training loss becomes ``L_h = L +
h·ΔL`` with ``ΔL = L_{q′} − L_q``, and the tempered posterior ``p_h(w) ∝ exp(−nβ·L_h(w)) φ(w)``
(prior or localization ``φ``) moves. Differentiating ``E_h[φ] = ∫ φ p_h / ∫ p_h`` at ``h = 0``
gives, exactly,

    d E[φ] / dh = −nβ · Cov(φ, ΔL)                       (Wang & Murfet 2026, arXiv:2601.13548)

the covariance over the posterior at ``h = 0``. The Timaeus convention calls ``χ = −Cov(φ, ΔL)`` the
susceptibility, so the Jacobian is ``nβ·χ``. For a shift toward probe sample ``i`` (``q′ = δ_i``),
``ΔL(w) = ℓ_i(w) − L(w)``; per-token susceptibilities take ``q′`` at one token.

The estimates here take posterior draws, either stored (``S × K`` observables and ``S × M`` loss
changes) or streamed through the sampler (:mod:`mechjax.slt.moments`), so that
memory is ``K × M`` whatever the number of draws. Both give the unbiased (``S − 1``) sample
covariance.
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
from mechjax.slt import chain as chain_lib
from mechjax.slt import components as components_lib
from mechjax.slt import inputs
from mechjax.slt import langevin
from mechjax.slt import mixing
from mechjax.slt import placement
from mechjax.slt import sgld
from mechjax.slt.inputs import Streamed
from mechjax.slt.moments import PowerSums
from mechjax.slt.moments import StreamedMoments
from mechjax.slt.moments import moments_covariance
from mechjax.slt.moments import moments_reduce
from mechjax.slt.moments import over_segments
from mechjax.slt.moments import product_moments
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import settings_from


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
    raise ValueError(
      f"phi_SxK and dloss_SxM must hold the same draws; got {phi.shape[0]} and {d.shape[0]} rows"
    )
  if phi.shape[0] < 2:
    raise ValueError(f"a covariance needs at least 2 draws; got {phi.shape[0]}")
  phi_c, d_c = phi - phi.mean(0, keepdims=True), d - d.mean(0, keepdims=True)
  return phi_c.T @ d_c / (phi.shape[0] - 1)


def susceptibility(phi_SxK, dloss_SxM) -> jax.Array:
  """``χ = −Cov_S(φ, ΔL)``, ``K × M`` (the Timaeus convention; the Jacobian ``dE[φ]/dh`` is
  ``nβ·χ``)."""
  return -covariance(phi_SxK, dloss_SxM)


def linear_response(phi_SxK, dloss_SxM, nbeta: float) -> jax.Array:
  """``J = dE[φ]/dh = −nβ·Cov_S(φ, ΔL)``, ``K × M``: the response of K observables to M data shifts.

  Args:
    phi_SxK: the K observables at S posterior draws.
    dloss_SxM: for each of M data shifts, the change of the average training loss per unit shift at
      the same draws; for a shift toward probe sample ``i`` this is ``ℓ_i(w) − L(w)``.
    nbeta: the inverse temperature times n of the posterior the draws come from.
  """
  if not nbeta > 0:
    raise ValueError(f"nbeta must be > 0; got {nbeta!r}")
  return nbeta * susceptibility(phi_SxK, dloss_SxM)


def standard_error(phi_SxK, dloss_SxM) -> jax.Array:
  """Monte-Carlo standard error of each entry of :func:`covariance` for *independent* draws: the
  standard deviation of the centred products over ``√S``. Correlated draws (SGLD) need more: see
  :func:`batch_means_error`."""
  phi, d = _as_draws("phi_SxK", phi_SxK), _as_draws("dloss_SxM", dloss_SxM)
  prod = (phi - phi.mean(0, keepdims=True))[:, :, None] * (d - d.mean(0, keepdims=True))[:, None, :]
  return prod.std(0, ddof=1) / np.sqrt(phi.shape[0])


def batch_means_error(phi_SxK, dloss_SxM, num_batches: int = 20) -> jax.Array:
  """Standard error of :func:`covariance` for a correlated chain, by batch means: the spread of the
  covariance over ``num_batches`` contiguous blocks of draws, over ``√num_batches``.

  Args:
    phi_SxK: ``(S, K)`` draws of K observables, in chain order.
    dloss_SxM: ``(S, M)`` draws of M loss changes, the same draws.
    num_batches: contiguous blocks; each must hold at least 2 draws.

  Returns:
    ``(K, M)`` standard errors.
  """
  phi, d = _as_draws("phi_SxK", phi_SxK), _as_draws("dloss_SxM", dloss_SxM)
  size = phi.shape[0] // num_batches
  if size < 2:
    raise ValueError(f"{phi.shape[0]} draws are too few for {num_batches} batches of at least 2")
  # Centre on the global means, so that each block's mean product estimates the same covariance.
  prod = (phi - phi.mean(0, keepdims=True))[:, :, None] * (d - d.mean(0, keepdims=True))[:, None, :]
  blocks = prod[: size * num_batches].reshape(num_batches, size, *prod.shape[1:]).mean(1)
  return blocks.std(0, ddof=1) / np.sqrt(num_batches)


# ----------------------------------------------------------------------------------------------
# High level: run the sampler and assemble susceptibilities.


@dataclasses.dataclass
class SusceptibilityResult:
  """Susceptibilities of C components to M probes, from ``num_chains`` chains per component.

  Attributes:
    chi: ``(C, K, M)``, ``χ = −Cov(φ_k, ΔL_m)`` over all draws of all chains of component ``C`` (the
      Timaeus convention). Observable 0 is the component's loss change ``L(w) − L(w*)``; the others
      are those of the ``observable`` argument.
    response: ``(C, K, M)``, ``nβ·χ = dE[φ]/dh``.
    standard_error: ``(C, K, M)``, the spread of the per-chain ``χ`` over ``√num_chains``.
    llc: ``(C,)``, ``nβ·E[L(w) − L(w*)]``: the (weight-refined) LLC of each component, on the
      evaluation subset.
    llc_per_chain: ``(C, num_chains)``, each chain's own ``nβ·E[L(w) − L(w*)]`` (over its
      evaluated draws; their mean is ``llc``): the LLC's spread over chains.
    loss_star: ``L(w*)``, the mean loss at ``w*`` on the evaluation subset.
    observable_means: ``(C, K)``, the posterior mean of each observable.
    components: the component names, in row order.
    probe_shape: the shape of the probe losses (e.g. ``(sequences, positions)`` for per-token
      probes); the M columns are their row-major flattening.
    nbeta: the ``nβ`` of the posterior.
    dloss_means: ``(C, M)``, the posterior mean of each probe's loss change ``ΔL_i(w) = ℓ_i(w) −
      L(w)``.
    dloss_star: ``(M,)``, ``ΔL_i(w*)``. With ``dloss_means`` it gives the explicit term of the LLC's
      response (:func:`llc_response`).
    chi_per_chain: ``(C, num_chains, K, M)``, each chain's own ``χ`` (over its draws): the error of
      any aggregate of ``χ`` (a group of probes, a principal direction) is the spread of the
      aggregate over chains.
    chi_rhat: ``(C, K, M)``, the split-R̂ of each entry: R̂ (Vehtari et al. 2021, eqs. 1–4) of the
      products ``p = (φ − φ̄)(ΔL − ΔL̄)`` whose mean is the covariance, each chain's halves as
      two chains, from streamed power sums (:func:`chi_mixing`). Not rank-normalised: that needs
      the draws, which are not kept.
    chi_ess: ``(C, K, M)``, each entry's effective sample size by replicated batch means (Vats &
      Knudson 2021, Statistical Science 36(4), eq. 9 with their λ² as the pooled variance of ``p``):
      ``chains × draws × λ² / σ²``, with ``σ²`` from :data:`mechjax.slt.components.SEGMENTS`
      consecutive batches per chain. Of all the draws; compare with 100 per chain. Both are NaN with
      fewer than 8 draws per chain. Entries failing either rule of :mod:`mechjax.slt.mixing` raise
      one :class:`~mechjax.slt.llc.ChainsNotMixedWarning` line, with their share.
  """

  chi: np.ndarray
  response: np.ndarray
  standard_error: np.ndarray
  llc: np.ndarray
  observable_means: np.ndarray
  components: tuple[str, ...]
  probe_shape: tuple[int, ...]
  nbeta: float
  dloss_means: np.ndarray | None = None
  dloss_star: np.ndarray | None = None
  chi_per_chain: np.ndarray | None = None
  chi_rhat: np.ndarray | None = None
  chi_ess: np.ndarray | None = None
  llc_per_chain: np.ndarray | None = None
  loss_star: float | None = None


def estimate_susceptibilities(
  per_sample_loss: Callable,
  params,
  data,
  probes,
  *,
  key: jax.Array,
  settings: SGLDSettings | None = None,
  components: dict[str, Any] | None = None,
  eval_size: int = 1024,
  eval_data: Any = None,
  observable: Callable | None = None,
  observable_data: Any = None,
  eval_every: int = 1,
  eval_chunk: int | None = None,
  mesh: Mesh | None = None,
  analyze: bool = False,
  **overrides: Any,
) -> SusceptibilityResult:
  """Per-sample or per-token susceptibilities of model components, with all components sampled at
  once.

  For each component ``C`` (a 0/1 mask pytree like ``params``; ``None`` means one component, the
  whole model) SGLD samples the localized posterior at ``w* = params`` with only ``C``'s weights
  free, and the observable is the component-restricted loss change ``φ_C(w) = L(w) − L(w*)``. The
  probes are the per-sample (or per-token) losses ``ℓ_i`` on ``probes``, and the shift toward probe
  ``i`` changes the training loss by ``ΔL_i(w) = ℓ_i(w) − L(w)``. ``L`` is the mean loss on a fixed
  evaluation subset of ``data`` (all of it when ``n ≤ eval_size``, else ``eval_size`` samples drawn
  without replacement from the key's stream ``"eval-subset"``; or the ``eval_data`` given): a
  deterministic function of ``w``, so that no minibatch noise is shared by ``φ`` and ``ΔL``.

  The moments of ``(φ_C, ΔL)`` are streamed inside the scan (memory ``C × M`` per chain, whatever
  ``num_draws``), and the components run in one program, vmapped over their masks. With several
  devices and ``num_chains`` a multiple of their number, the chains are sharded over them as in
  :func:`mechjax.slt.sgld.sample_chains`.

  Args:
    per_sample_loss: ``per_sample_loss(params, batch)`` returns one loss per sample, ``(B,)``, or
      per token, ``(B, T)``; the SGLD loss is its mean. Pass the same function on every call (a
      module-level function or a bound method), so the compiled program is reused.
    params: ``w*``.
    data: the training data, a pytree with the sample axis first; or a device-side sampler
      ``sample_batch(key) -> batch`` of ``batch_size`` samples (then ``nbeta`` is required, every
      SGLD step sees a fresh batch, and the evaluation subset is ``eval_size`` samples drawn from
      it once). Or host data streamed to the chains a part of steps at a time
      (:class:`mechjax.slt.stream.Streamed`, e.g. a token file's windows): the χ of the in-memory
      call with the same key, to float rounding, with the evaluation subset gathered once. Non-float
      leaves of ``params`` are held fixed.
    probes: a pytree of probe samples in the same format.
    key: every random choice derives from it.
    components: ``{name: mask}``; default ``{"all": None}``.
    eval_size: the size of the fixed evaluation subset that defines ``L``.
    eval_data: the fixed batch that defines ``L`` instead (a pytree in ``data``'s format, e.g. the
      same sequences another tool evaluates its sampling-task loss on); ``eval_size`` is then not
      used.
    observable: optional ``observable(params, observable_data) -> (K − 1,)``: more observables whose
      susceptibilities are wanted (e.g. a probe-set loss that measures a behaviour), streamed beside
      the loss change. Pass the same function on every call.
    observable_data: the data ``observable`` reads.
    eval_every: evaluate ``(φ, ΔL)`` (the evaluation subset, the probes and ``observable``) on the
      draws ``0, k, 2k, …`` after burn-in only, ``k = eval_every``; the chains still take every
      step. χ and the LLC are then the covariance and the mean over those draws: the same
      quantities, estimated from ``⌈num_draws / k⌉`` draws per chain. Successive SGLD draws are
      strongly correlated, so thinning costs little precision while the evaluation, which can
      cost several gradient steps, costs ``1/k`` as much. The ESS counts the draws observed.
    eval_chunk: evaluate ``L`` on the evaluation subset this many samples at a time (one piece's
      activations live at a time; the same ``L`` to rounding); None: all at once.
    mesh: a ``jax.sharding.Mesh`` with axes ``chains`` and ``model`` (either may be absent): the
      chains split over ``chains``; ``w*``, the component masks and every chain's draw, noise,
      preconditioner state and moments over ``model``, each leaf along its largest dimension that
      the axis divides, leaves under :data:`mechjax.sharding.MIN_MODEL_SHARDED` entries replicated
      (:func:`mechjax.sharding.model_axis_spec`). None: as described above.
    analyze: compile the program without running it, and return its memory analysis
      (``jax.stages.Compiled.memory_analysis()``: argument, output and temporary bytes per
      device) instead of a result; the run with the same arguments then reuses the program. On
      one CPU device the chains run in :func:`mechjax.slt.placement.cpu_thread_groups` groups at
      once, and the analysis is one group's. Not for streamed data.
    settings: the SGLD settings (:class:`mechjax.slt.sgld.SGLDSettings`; ``mala`` is not used).
    **overrides: fields of :class:`~mechjax.slt.sgld.SGLDSettings` replacing those of
      ``settings``, as in :func:`mechjax.slt.llc.estimate_llc` (``num_chains=8``, ``step_size=…``).
  """
  s = settings_from(settings, **overrides)
  inputs.check_params(params)
  s, sampler = inputs.resolve_data(s, data, per_sample_loss, params, per_sample=True)
  s = placement.with_chain_loop(dataclasses.replace(s, mala=False), params)
  if not (isinstance(eval_every, int) and eval_every >= 1):
    raise ValueError(f"eval_every must be an int of at least 1; got {eval_every!r}")
  if eval_chunk is not None and not (isinstance(eval_chunk, int) and eval_chunk >= 1):
    raise ValueError(f"eval_chunk must be None or an int of at least 1; got {eval_chunk!r}")
  if -(-s.num_draws // eval_every) < 2:
    raise ValueError(
      "χ is a covariance over draws: it needs at least 2 observed draws per chain; got "
      f"num_draws={s.num_draws} with eval_every={eval_every}"
    )
  components = {"all": None} if components is None else dict(components)
  if not components:
    raise ValueError("components must name at least one mask")
  if mesh is not None:
    mesh = sharding.sampler_mesh(mesh, s.num_chains)
    params = sharding.place(params, mesh)
  evaluation = components_lib.Evaluation(observable, eval_every, eval_chunk)
  build, arguments = components_lib.programs(
    per_sample_loss, s, evaluation, sampler, data, components, params, mesh
  )
  eval_data = _eval_batch(data, sampler, eval_data, eval_size, key)
  probe_shape = _output_shape(per_sample_loss, params, probes)
  losses_at = jax.jit(per_sample_loss)  # one program, not a compiled program per operation
  observe_data = {
    "eval": eval_data,
    "probes": probes,
    "extra": observable_data,
    # In the chains' pieces (the forward pass over the whole subset at once can hold more than the
    # sampler: its logits at Pythia-410m's vocabulary and 256 windows are 13 GB); analyzing needs
    # only its shape.
    "eval_loss_star": (jax.eval_shape if analyze else lambda f, *a: f(*a))(
      _loss_star, per_sample_loss, params, eval_data, eval_chunk
    ),
  }
  keys = chain_lib.chain_keys(key, s.num_chains)
  run = lambda program, part: program(*arguments(params, keys[part], observe_data))  # noqa: E731
  size = placement.float_size(params)
  if analyze:
    if isinstance(data, Streamed):
      raise ValueError("analyze measures the in-memory program; pass arrays, not Streamed data")
    return placement.over_chains_on_devices(
      s.num_chains, build, run, axis=1, mesh=mesh, analyze=True, size=size
    )
  state = jax.device_get(
    placement.over_chains_on_devices(s.num_chains, build, run, axis=1, mesh=mesh, size=size)
  )
  mom = state.moments
  per_chain = -np.asarray(moments_covariance(mom))  # (C, chains, K, M)
  merged = jax.vmap(moments_reduce)(jax.tree.map(jnp.asarray, mom))
  chi = -np.asarray(moments_covariance(merged))
  llc = s.nbeta * np.asarray(merged.mean_phi[:, 0])
  if not (np.all(np.isfinite(chi)) and np.all(np.isfinite(llc))):
    raise FloatingPointError(
      f"non-finite susceptibilities (step_size={s.step_size:g}); try a smaller step_size "
      "or a larger localization"
    )
  return SusceptibilityResult(
    chi=chi,
    response=s.nbeta * chi,
    standard_error=per_chain.std(1, ddof=1) / np.sqrt(s.num_chains)
    if s.num_chains > 1
    else np.full_like(chi, np.nan),
    llc=llc,
    observable_means=np.asarray(merged.mean_phi),
    components=tuple(components),
    probe_shape=probe_shape,
    nbeta=s.nbeta,
    dloss_means=np.asarray(merged.mean_dloss),
    dloss_star=np.asarray(
      jnp.reshape(losses_at(params, probes), (-1,)) - observe_data["eval_loss_star"]
    ),
    chi_per_chain=per_chain,
    llc_per_chain=s.nbeta * np.asarray(mom.mean_phi[:, :, 0]),
    loss_star=float(observe_data["eval_loss_star"]),
    **_checked_mixing(state.sums, s.num_chains, tuple(components)),
  )


def chi_mixing(sums: PowerSums) -> dict[str, np.ndarray]:
  """``{"rhat", "ess"}`` of every covariance entry, ``(..., K, M)``, from the
  :class:`~mechjax.slt.moments.PowerSums` of ``(..., chains, G)`` segments (``G`` even, equal):

  * split-R̂ (Vehtari et al. 2021, eqs. 1–4) of the products ``p = (φ − φ̄)(ΔL − ΔL̄)`` with each
    chain's two halves as chains, each half's ``p`` centred on its own means: ``W`` the mean
    within-half variance of ``p``, ``B/N`` the variance of the halves' covariances;
  * the replicated batch-means ESS (Vats & Knudson 2021, eq. 9): ``chains·N·λ²/σ²``, with ``σ²``
    ``b`` times the variance of the ``chains × G`` batch covariances about their mean (``b`` draws
    per batch) and ``λ²`` the pooled variance of ``p`` (within chains plus between them).

  NaN under 8 draws per chain, or where ``p`` does not vary."""
  count = np.asarray(sums.count, np.float64)
  m, g = count.shape[-2:]
  n = count.sum(-1).max() if count.size else 0.0  # draws per chain
  shape = np.shape(sums.xy)[:-4] + np.shape(sums.xy)[-2:]
  if n < 8 or g % 2:
    return {"rhat": np.full(shape, np.nan), "ess": np.full(shape, np.nan)}
  half = lambda lo: over_segments(  # noqa: E731
    sums, lambda a, ax: np.take(np.asarray(a, np.float64), range(lo, lo + g // 2), ax).sum(ax)
  )
  nh, mean_h, var_h = product_moments(  # halves as chains: (..., 2·chains, K, M)
    jax.tree.map(lambda a, b: np.concatenate([a, b], len(shape) - 2), half(0), half(g // 2))
  )
  _, mean_c, var_c = product_moments(over_segments(sums, lambda a, ax: a.sum(ax)))
  nb, mean_b, _ = product_moments(sums)  # (..., chains, G, K, M)
  nh, nb = nh[..., None, None], nb[..., None, None]
  c = len(shape) - 2  # the chain axis of the (..., chains, K, M) arrays
  with np.errstate(divide="ignore", invalid="ignore"):
    within = (var_h * nh / (nh - 1)).mean(c)
    n_half = nh.mean(c)
    var_plus = (n_half - 1) / n_half * within + mean_h.var(c, ddof=1)
    rhat = np.where(within > 0, np.sqrt(var_plus / within), np.nan)
    lam2 = var_c.mean(c) + (mean_c.var(c, ddof=1) if m > 1 else 0.0)
    dev = mean_b - mean_b.mean((c, c + 1), keepdims=True)
    sigma2 = nb.mean((c, c + 1)) * (dev**2).sum((c, c + 1)) / (m * g - 1)
    ess = np.where(sigma2 > 0, m * n * lam2 / sigma2, np.nan)
  return {"rhat": rhat, "ess": ess}


def _checked_mixing(sums: PowerSums, num_chains: int, names: tuple) -> dict[str, np.ndarray]:
  """``chi_rhat`` and ``chi_ess`` of :func:`chi_mixing`, warning once (with the share of entries
  that fail Vehtari et al.'s rule) when any entry fails it."""
  out = chi_mixing(sums)
  rhat, ess = out["rhat"], out["ess"]
  share = mixing.worst(rhat, ess, num_chains)["share_failing"]
  if share > 0:
    line = mixing.warning(
      f"estimate_susceptibilities (χ of {', '.join(names)}; {share:.0%} of its {rhat.size} "
      "entries fail)",
      {"rhat": rhat, "ess_bulk": ess},
      num_chains,
      ess="batch-means ESS",
    )
    warnings.warn(line, mixing.ChainsNotMixedWarning, stacklevel=3)
  return {"chi_rhat": rhat, "chi_ess": ess}


@functools.partial(jax.jit, static_argnums=(0, 3))
def _loss_star(per_sample_loss, params, eval_data, chunk):
  """``L(w*)``: the evaluation subset's mean loss at ``w*``, ``chunk`` samples at a time, as the
  chains evaluate ``L(w)`` (:func:`mechjax.slt.components.chunked_mean`)."""
  return components_lib.chunked_mean(per_sample_loss, params, eval_data, chunk)


def _eval_batch(data, sampler, eval_data, eval_size: int, key: jax.Array):
  """The fixed batch that defines ``L`` (:func:`estimate_susceptibilities`): ``eval_data`` checked,
  or ``eval_size`` samples of the sampler or of ``data`` from the key's stream ``"eval-subset"``, or
  all of ``data`` when it has at most ``eval_size`` samples."""
  if eval_data is not None:
    _check_batch("eval_data", eval_data, data if sampler is None else None)
    return eval_data
  if sampler is not None:
    return draw_samples(sampler, rng.fold(key, "eval-subset"), eval_size)
  streamed = isinstance(data, Streamed)
  n = data.num_samples if streamed else jax.tree.leaves(data)[0].shape[0]
  if n <= eval_size:
    return data.gather(np.arange(n)) if streamed else data
  idx = jax.random.choice(rng.fold(key, "eval-subset"), n, (eval_size,), replace=False)
  return data.gather(np.asarray(idx)) if streamed else jax.tree.map(lambda a: a[idx], data)


def _check_batch(name: str, batch, data) -> None:
  """``batch`` must be arrays with one sample axis, in ``data``'s pytree structure when ``data`` is
  given."""
  leaves = jax.tree.leaves(batch)
  if not leaves or any(not hasattr(a, "shape") or np.ndim(a) < 1 for a in leaves):
    raise ValueError(f"{name} must be a pytree of arrays with the samples first")
  if len({a.shape[0] for a in leaves}) != 1:
    raise ValueError(
      f"{name}'s leaves must share their first (sample) axis; got {[a.shape for a in leaves]}"
    )
  if data is not None and jax.tree.structure(batch) != jax.tree.structure(data):
    raise ValueError(
      f"{name} must have data's structure {jax.tree.structure(data)}; got "
      f"{jax.tree.structure(batch)}"
    )


def llc_response(result: SusceptibilityResult) -> dict[str, np.ndarray]:
  """The response of each component's LLC to a shift toward each probe, ``dλ/dh_i``, ``(C, M)``.

  The LLC is ``λ = nβ·E[φ]`` with ``φ = L(w) − L(w*)``, and this observable depends on the data
  distribution itself: under ``q → q + h(δ_i − q)`` it becomes ``φ_h = φ + h·(ΔL_i(w) −
  ΔL_i(w*))``. So

      dλ/dh_i = nβ·(−nβ·Cov(φ, ΔL_i))  +  nβ·(E[ΔL_i(w)] − ΔL_i(w*))
                  implicit: the posterior moves   explicit: the observable moves

  (the linear response of Wang & Murfet 2026, arXiv:2601.13548, applied to the LLC's own
  observable). For a regular model whose per-sample losses share their minimum the two cancel to
  first order in ``1/nβ``: such a λ is ``d/2`` for every data distribution.

  Args:
    result: from :func:`estimate_susceptibilities` (observable 0 of each component is its ``φ``).

  Returns:
    ``{"total", "implicit", "explicit"}``, each ``(C, M)``.
  """
  if result.dloss_means is None or result.dloss_star is None:
    raise ValueError(
      "this SusceptibilityResult has no dloss_means/dloss_star; estimate it with "
      "estimate_susceptibilities, which records them"
    )
  implicit = result.nbeta * np.asarray(result.response)[:, 0, :]
  explicit = result.nbeta * (np.asarray(result.dloss_means) - np.asarray(result.dloss_star)[None])
  return {"total": implicit + explicit, "implicit": implicit, "explicit": explicit}


def _output_shape(fn: Callable, *args) -> tuple[int, ...]:
  """``fn(*args).shape`` without running it, traced once per function and argument shapes
  (``jax.eval_shape`` alone traces on every call)."""
  leaves, treedef = jax.tree.flatten(args)
  return _output_shape_of(
    fn, treedef, tuple((tuple(x.shape), jnp.dtype(x.dtype).name) for x in leaves)
  )


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _output_shape_of(fn, treedef, avals) -> tuple[int, ...]:
  args = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in avals])
  return tuple(jax.eval_shape(fn, *args).shape)


def draw_samples(sample_batch: Callable, key: jax.Array, num: int):
  """``num`` samples from a sampler ``sample_batch(key) -> batch``: enough batches from ``key``'s
  splits, concatenated and cut to ``num``."""
  first = jax.eval_shape(sample_batch, key)
  batch = jax.tree.leaves(first)[0].shape[0]
  batches = jax.vmap(sample_batch)(jax.random.split(key, -(-num // batch)))
  return jax.tree.map(lambda a: a.reshape(-1, *a.shape[2:])[:num], batches)


def principal_directions(chi, num: int | None = None, center: bool = True) -> dict[str, np.ndarray]:
  """The principal directions of a susceptibility matrix, by SVD.

  Args:
    chi: ``(components, probes)`` susceptibilities ``χ``.
    num: how many directions to keep; all by default.
    center: remove each component's row mean over probes first: a uniform shift of every probe is a
      change of the whole distribution's scale, not a direction of it.

  Returns:
    ``{"U": (components, num), "S": (num,), "Vt": (num, probes), "explained_variance": (num,)}``,
    the last being each direction's share ``S²/ΣS²``.
  """
  chi = np.asarray(chi, np.float64)
  if chi.ndim != 2:
    raise ValueError(f"chi must be (components, probes); got shape {chi.shape}")
  x = chi - chi.mean(1, keepdims=True) if center else chi
  u, s, vt = np.linalg.svd(x, full_matrices=False)
  num = len(s) if num is None else num
  return {
    "U": u[:, :num],
    "S": s[:num],
    "Vt": vt[:num],
    "explained_variance": (s**2 / np.sum(s**2))[:num],
  }


def bif(
  per_sample_loss: Callable,
  params,
  data,
  queries,
  train_probes,
  *,
  key: jax.Array,
  settings: SGLDSettings | None = None,
  mesh: Mesh | None = None,
  **overrides: Any,
) -> np.ndarray:
  """The Bayesian influence function ``BIF(q, i) = −Cov(ℓ_q, ℓ_i)`` of training probes ``i`` on
  query samples ``q`` over the localized posterior.

  The query losses are the observables, so ``Q`` columns of moments are streamed inside the SGLD
  scan. Repeated calls with the same ``per_sample_loss`` and settings reuse one compiled program.

  Args:
    per_sample_loss: ``per_sample_loss(params, batch) -> (B,)`` losses.
    params: ``w*``, where the posterior is localised.
    data: the training data that defines the posterior (a pytree of arrays, samples first).
    queries: the query samples ``q`` (a batch in ``data``'s format).
    train_probes: the training probes ``i`` (a batch in ``data``'s format).
    key: the sampler's PRNG key.
    settings: an :class:`~mechjax.slt.sgld.SGLDSettings`.
    mesh: a mesh with axes ``chains`` and ``model``, as for :func:`estimate_susceptibilities`.
    **overrides: fields of :class:`~mechjax.slt.sgld.SGLDSettings` replacing those of
      ``settings``, as in :func:`mechjax.slt.llc.estimate_llc`.

  Returns:
    ``(Q, I)`` NumPy array.
  """
  s = settings_from(settings, **overrides)
  s = dataclasses.replace(s, mala=False)
  accumulator = StreamedMoments(_BifObserve(per_sample_loss), start=s.num_burnin)
  traces = sgld.sample_chains(
    langevin.MeanLoss(per_sample_loss),
    params,
    data,
    key,
    s,
    accumulator=accumulator,
    accumulator_data={"queries": queries, "train": train_probes},
    mesh=mesh,
  )
  merged = moments_reduce(traces["accumulated"])
  return -np.asarray(moments_covariance(merged))


@dataclasses.dataclass(frozen=True)
class _BifObserve:
  per_sample_loss: Callable

  def __call__(self, w, od):
    return self.per_sample_loss(w, od["queries"]).reshape(-1), self.per_sample_loss(
      w, od["train"]
    ).reshape(-1)
