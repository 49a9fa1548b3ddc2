"""SGLD on a localized, tempered posterior, with chains under ``vmap`` and draws under ``lax.scan``.

The target is ``p(w) ∝ exp(−nβ·L_n(w) − (γ/2)‖w − w*‖²)`` (Lau et al. 2023, arXiv:2308.12108), where
``L_n`` is the mean loss over the ``n`` samples, ``nβ`` the inverse temperature times ``n`` and
``γ`` the strength of the localization at ``w*``. One step, in devinterp's convention, is

    Δw = −(ε/2)·[nβ·∇L_B(w) + γ·(w − w*)] + √ε·ξ,      ξ ~ N(0, I),

with ``L_B`` the mean loss on a minibatch ``B`` of ``batch_size`` samples drawn *with replacement*
from the step's key. ``nβ`` multiplies the *mean* minibatch loss, so it plays the role of ``n·β``
whatever the batch size; see :func:`default_nbeta`.

With ``rmsprop=α`` the step is preconditioned as in pSGLD (Li et al. 2016, without the Γ correction
term): ``V ← αV + (1 − α)(∇L_B)²``, ``G = 1/(√V + δ)``, ``Δw = −(ε/2)·G⊙[…] + √ε·√G⊙ξ``.

A ``param_mask`` (a pytree of 0/1 arrays like ``params``) restricts sampling to part of the
parameters (the weight-refined LLC): masked-out coordinates stay at ``w*``.

Every setting of a run travels in one :class:`SGLDSettings`. The sampler knows nothing of what its
callers compute from the draws: an *accumulator* (any hashable object with ``init(params_star,
data)`` and ``update(state, w, step, data)``, e.g. :class:`mechjax.slt.moments.StreamedMoments`) is
carried through the scan and updated with every draw.

Randomness is a function of the key only: chain ``c`` uses ``fold_in(key, c)`` and its step ``t``
uses ``fold_in(chain_key, t)``, so the same key gives the same draws bit for bit.

**How the chains of one device run** (``chain_loop``). ``vmap`` makes every array op of a step one
op over all the chains; ``map`` (``lax.map``) runs the chains' scans one after another, each with
unbatched ops. On accelerators ``vmap`` fills the chip. On a CPU ``map`` is faster for models of
some size (docs/benchmarks.md has the measurements); a small model's step is a few ops whose fixed
cost ``vmap`` shares out. ``auto`` (the default)
picks ``map`` on a CPU for models of at least :data:`MAP_MIN_PARAMS` parameters and ``vmap``
otherwise. Each chain's arithmetic is the
same either way up to rounding; the random numbers are identical.

**One program per computation.** :func:`sample_chains` compiles one ``jit(vmap(scan))`` program per
loss function, settings, mask presence, accumulator and device layout, and keeps the latest
:data:`PROGRAM_CACHE_SIZE` of them: another key, another ``w*`` or other data of the same shapes
reuse the program. The cache compares loss functions and accumulators by equality, so pass the same
function each time (a module-level function, a bound method, or a hashable callable such as
:class:`MeanLoss`), not a new lambda per call: a new lambda is a new program, and the cache holds it
until it is evicted.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from mechjax import config
from mechjax import sharding as sharding_lib

Params = Any
PROGRAM_CACHE_SIZE = 16
MALA_EVERY = 16
STAR_LOSS_PATHS = ("auto", "per_sample", "per_step")
CHAIN_LOOPS = ("auto", "vmap", "map")
NOISE_IMPLS = ("threefry", "rbg", "unsafe_rbg")


def default_nbeta(n: int) -> float:
  """``nβ = n / ln n``: the inverse temperature ``β* = 1/ln n`` (Watanabe's WBIC temperature) times
  ``n``.

  ``n`` is the number of *samples in the dataset*, not the batch size: the minibatch loss is a mean,
  an unbiased estimate of ``L_n``, so ``nβ·∇L_B`` estimates the full ``nβ·∇L_n`` whatever the batch.
  devinterp's default uses the batch size ``b`` instead (``b / ln b``), a much higher temperature;
  both are valid choices of ``β`` (the LLC estimate is consistent for any fixed ``β`` as n grows),
  but they are not interchangeable, and the estimate should be reported with the ``nβ`` used.
  """
  if n < 2:
    raise ValueError(f"n must be >= 2 for n / ln n; got {n}")
  return float(n / math.log(n))


@dataclasses.dataclass(frozen=True)
class SGLDSettings(config.Settings):
  """Everything that defines an SGLD run but the loss, the data, ``w*`` and the key.

  It is also a settings group of the SLT studies' configs (:func:`mechjax.config.group`), so chains,
  draws and step size have one name in every study (``cfg.sgld.num_chains``) whatever their flags
  are called.
  """

  step_size: float = config.setting(config.REQUIRED, "SGLD step size ε.", check=config.positive)
  localization: float = config.setting(
    config.REQUIRED,
    "Localization strength γ of the Gaussian prior at w*.",
    check=config.non_negative,
  )
  batch_size: int = config.setting(
    config.REQUIRED,
    "SGLD minibatch size (drawn with replacement each step).",
    check=config.at_least(1),
  )
  num_chains: int = config.setting(
    4,
    "SGLD chains, vmapped (and sharded when there are several devices).",
    check=config.at_least(1),
  )
  num_draws: int = config.setting(
    200, "SGLD draws per chain, after burn-in.", check=config.at_least(1)
  )
  num_burnin: int = config.setting(
    0, "SGLD burn-in steps per chain (discarded).", check=config.at_least(0)
  )
  nbeta: float | None = config.setting(
    None,
    "Inverse temperature times n; unset: n / ln n of the data (default_nbeta).",
    check=config.positive,
    unset=0.0,
  )
  rmsprop: float | None = config.setting(
    None,
    "Decay α of a pSGLD RMSProp preconditioner; unset: plain SGLD.",
    check=config.within(0.0, 1.0),
  )
  rmsprop_eps: float = config.setting(
    1e-8, "δ of the RMSProp preconditioner.", check=config.positive
  )
  mala: bool = config.setting(
    True,
    "Estimate a MALA acceptance probability every mala_every-th step (one more gradient on "
    "those steps).",
  )
  mala_every: int = config.setting(
    MALA_EVERY,
    "Steps between MALA acceptance estimates (1: every step). The estimate costs a gradient, "
    "so every 16th step adds about 1/16 to a step's cost.",
    check=config.at_least(1),
  )
  star_loss: str = config.setting(
    "auto",
    "How each step's minibatch loss at w* is found: per_sample computes every sample's loss at "
    "w* once and averages the batch's (exact when the loss is a mean over samples); per_step "
    "evaluates the loss at w* on every step's batch; auto uses per_sample when a check on two "
    "batches shows the loss is such a mean and the data are arrays of at most as many samples as "
    "the chains draw.",
    check=config.one_of(STAR_LOSS_PATHS),
  )
  chain_loop: str = config.setting(
    "auto",
    "How the chains on one device run: vmap batches every op over them; map runs them one after "
    "another (lax.map); auto uses map on a CPU for a model of at least 10,000 parameters, whose "
    "batched step costs more CPU time than the unbatched steps it replaces, and vmap otherwise.",
    check=config.one_of(CHAIN_LOOPS),
  )

  noise_impl: str = config.setting(
    "threefry",
    "PRNG of the Langevin noise: threefry draws it from the chain's key; rbg and unsafe_rbg from "
    "a key of that implementation made from 128 bits of it (other numbers, as random).",
    check=config.one_of(NOISE_IMPLS),
  )
  microbatch_size: int | None = config.setting(
    None,
    "Split each step's minibatch into consecutive pieces of this many samples under a scan and "
    "average their losses and gradients: the same draws to rounding, for a loss that is a mean "
    "over samples, with one piece's activations in memory at a time; unset: the whole batch at "
    "once. It does not change nβ. Must divide batch_size.",
    check=config.at_least(1),
    unset=0,
  )

  def validate(self):
    if self.microbatch_size is not None and self.batch_size % self.microbatch_size:
      raise config.ConfigError(
        ("microbatch_size", "batch_size"),
        f"microbatch_size={self.microbatch_size} must divide batch_size={self.batch_size}",
      )

  @property
  def num_steps(self) -> int:
    """Steps per chain: burn-in and draws."""
    return self.num_burnin + self.num_draws

  def resolved(self, n: int) -> SGLDSettings:
    """These settings with ``nbeta`` filled in for a dataset of ``n`` samples when it is unset."""
    return self if self.nbeta is not None else dataclasses.replace(self, nbeta=default_nbeta(n))


STUDY_FLAGS = {
  "num_chains": "chains",
  "num_draws": "draws",
  "num_burnin": "burnin",
  "step_size": "sgld_step_size",
  "localization": "localization",
  "batch_size": "sgld_batch_size",
}


def study_group(help: str, **defaults: Any) -> Any:  # noqa: A002
  """The SGLD settings group of a susceptibility study's ``Config``, with the flags ``--chains
  --draws --burnin --sgld_step_size --localization --sgld_batch_size`` (:data:`STUDY_FLAGS`) and the
  defaults the patterning studies share (4 chains, ε = 1e-4, γ = 100, batches of 64), which
  ``defaults`` override."""
  base = dict(step_size=1e-4, localization=100.0, batch_size=64, num_chains=4)
  return config.group(SGLDSettings(**{**base, **defaults}), help=help, flags=STUDY_FLAGS)


SGLD_FIELDS = tuple(f.name for f in dataclasses.fields(SGLDSettings))
REQUIRED_FIELDS = ("step_size", "localization", "batch_size")


def settings_from(settings: SGLDSettings | None = None, /, **overrides: Any) -> SGLDSettings:
  """The one way every SLT entry point reads its sampler settings: ``settings`` (an
  :class:`SGLDSettings`; default none) with ``overrides`` replacing its fields.

  ``estimate_llc(loss, w, data, key=k, step_size=1e-4, localization=100.0, batch_size=64)``, a
  study's ``estimate_llc(..., settings=cfg.sgld)`` and ``estimate_llc(..., settings=cfg.sgld,
  num_draws=50)`` all come here. An override left at None keeps the settings' value (or the
  default). Without ``settings`` the fields with no default (:data:`REQUIRED_FIELDS`) must be among
  the overrides.

  Raises:
    TypeError: an override that is not a field of :class:`SGLDSettings` (a misspelling would
      otherwise be lost), ``settings`` of another type, or a required field missing.
    mechjax.config.ConfigError: a value out of range, as :class:`SGLDSettings` checks it.
  """
  unknown = sorted(set(overrides) - set(SGLD_FIELDS))
  if unknown:
    raise TypeError(
      f"unknown SGLD settings {unknown}: the sampler takes the fields of SGLDSettings, "
      f"{', '.join(SGLD_FIELDS)}"
    )
  given = {k: v for k, v in overrides.items() if v is not None}
  if settings is not None:
    if not isinstance(settings, SGLDSettings):
      raise TypeError(f"settings must be an SGLDSettings; got {type(settings).__name__}")
    return dataclasses.replace(settings, **given) if given else settings
  missing = [k for k in REQUIRED_FIELDS if k not in given]
  if missing:
    raise TypeError(f"missing the SGLD settings {missing} (or pass settings=SGLDSettings(...))")
  return SGLDSettings(**given)


@dataclasses.dataclass(frozen=True)
class MeanLoss:
  """``loss(params, batch) = mean(per_sample_loss(params, batch))``, hashable by its function:
  samplers built from equal ``MeanLoss`` objects share one compiled program."""

  per_sample_loss: Callable[[Params, Any], jax.Array]

  def __call__(self, params, batch):
    return jnp.mean(self.per_sample_loss(params, batch))


def _tree_dot(a, b):
  return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def is_float_leaf(leaf) -> bool:
  """Whether SGLD samples this leaf of a params tree: a floating-point (or complex) array."""
  return jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)


def split_fixed(params: Params, support: tuple[bool, ...] | None = None) -> tuple[Params, Params]:
  """``(sampled, fixed)``: two trees like ``params``, the first with None in place of each
  non-float leaf (integer or boolean arrays: step counters, indices, masks) and of each leaf that
  ``support`` (one flag per leaf of ``params``, see :func:`mask_support`) marks False, the second
  with None in place of the others. :func:`join_fixed` puts them back together."""
  leaves, treedef = jax.tree.flatten(params)
  if support is None:
    support = (True,) * len(leaves)
  if len(support) != len(leaves):
    raise ValueError(f"support has {len(support)} flags for {len(leaves)} params leaves")
  moves = [is_float_leaf(a) and f for a, f in zip(leaves, support)]
  sampled = jax.tree.unflatten(treedef, [a if m else None for a, m in zip(leaves, moves)])
  fixed = jax.tree.unflatten(treedef, [None if m else a for a, m in zip(leaves, moves)])
  return sampled, fixed


def mask_support(params: Params, param_mask: Params | None) -> tuple[bool, ...] | None:
  """Which leaves of ``params`` a chain can move: one flag per leaf (flattened order), True for a
  float leaf whose mask has a non-zero entry. A leaf whose mask is all zero stays at ``w*``, so
  the sampler holds it fixed outright: no gradient with respect to it (the backward pass skips
  what only it needs, e.g. the layers below a restricted head) and no noise for it. None when
  ``param_mask`` is None or not concrete (a traced mask restricts nothing at trace time)."""
  if param_mask is None:
    return None
  masks = jax.tree.leaves(param_mask)
  if any(isinstance(m, jax.core.Tracer) for m in masks):
    return None
  leaves = jax.tree.leaves(params)
  if len(masks) != len(leaves):
    raise ValueError(f"param_mask has {len(masks)} leaves; params has {len(leaves)}")
  return tuple(bool(is_float_leaf(a) and np.any(np.asarray(m))) for a, m in zip(leaves, masks))


def join_fixed(sampled: Params, fixed: Params) -> Params:
  """The inverse of :func:`split_fixed`."""
  return jax.tree.map(
    lambda s, f: f if s is None else s, sampled, fixed, is_leaf=lambda x: x is None
  )


def check_params(params: Params) -> None:
  """Refuses a params leaf that is not an array or a number (a function, a string, a module's
  static field), naming it: such leaves must be split off before sampling, e.g. with
  ``eqx.partition(model, eqx.is_inexact_array)``, and closed over by the loss."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex, bool)):
      continue
    raise TypeError(
      f"params leaf {jax.tree_util.keystr(path) or '(root)'} is a {type(leaf).__name__}, not an "
      "array: SGLD samples float arrays and holds integer and boolean ones fixed, but cannot "
      "carry other objects. Split them off first (for equinox: params, static = "
      "eqx.partition(model, eqx.is_inexact_array)) and rebuild the model inside loss_fn."
    )


def is_streamed(data) -> bool:
  """Whether ``data`` stay on the host and reach the chains a part at a time: a
  :class:`mechjax.slt.stream.Streamed` (anything with its ``chains_run``; this module does not
  import that one, which builds on it)."""
  return callable(getattr(data, "chains_run", None))


def is_sampler(data) -> bool:
  """Whether ``data`` is a device-side sampler ``sample_batch(key) -> batch`` rather than arrays."""
  return callable(data)


def check_sampler(sample_batch, batch_size: int) -> None:
  """Refuses a sampler whose batches do not have ``batch_size`` samples (traced once, abstractly;
  nothing is drawn)."""
  shapes = jax.eval_shape(sample_batch, jax.random.key(0))
  sizes = {leaf.shape[0] if leaf.shape else None for leaf in jax.tree.leaves(shapes)}
  if sizes != {batch_size}:
    raise ValueError(
      f"sample_batch(key) must return a batch whose leaves all have batch_size={batch_size} "
      f"samples first; got leading sizes {sorted(sizes, key=str)}"
    )


def _pieces(batch, microbatch: int):
  """``batch``'s leaves as ``(batch_size / microbatch, microbatch, ...)``: consecutive pieces."""
  return jax.tree.map(lambda a: a.reshape((-1, microbatch) + a.shape[1:]), batch)


def batch_value_and_grad(loss_fn, w, batch, microbatch: int | None = None):
  """``(L_B(w), ∇L_B(w))``. With ``microbatch``, the batch in consecutive pieces of that many
  samples under a ``lax.scan``, the pieces' losses and gradients averaged: the whole batch's, to
  rounding, when the loss is a mean over samples, with only one piece's activations live at a
  time."""
  if microbatch is None:
    return jax.value_and_grad(loss_fn)(w, batch)
  pieces = _pieces(batch, microbatch)
  num = jax.tree.leaves(pieces)[0].shape[0]
  first = jax.eval_shape(loss_fn, w, jax.tree.map(lambda a: a[0], pieces))
  zero = (jnp.zeros(first.shape, first.dtype), jax.tree.map(jnp.zeros_like, w))

  def add(total, piece):
    return jax.tree.map(jnp.add, total, jax.value_and_grad(loss_fn)(w, piece)), None

  total, _ = jax.lax.scan(add, zero, pieces)
  return jax.tree.map(lambda x: x / num, total)


def batch_loss(loss_fn, w, batch, microbatch: int | None = None) -> jax.Array:
  """``L_B(w)``, by pieces of ``microbatch`` samples under a ``lax.scan`` when it is set (the mean
  of the pieces' losses, as :func:`batch_value_and_grad`)."""
  if microbatch is None:
    return loss_fn(w, batch)
  losses = jax.lax.map(lambda piece: loss_fn(w, piece), _pieces(batch, microbatch))
  return jnp.mean(losses)


def potential_and_grad(
  loss_fn, w, w_star, batch, mask, nbeta: float, localization: float, microbatch=None
):
  """``(U, L_B, ∇U, ∇L_B)`` at ``w`` with ``U = nβ·L_B(w) + (γ/2)‖w − w*‖²``, the tempered,
  localised potential whose Gibbs measure ``exp(−U)`` SGLD samples (Lau et al. 2023, eq. 4); both
  gradients are multiplied by ``mask`` (0 on the coordinates held at ``w*``). ``microbatch``: see
  :func:`batch_value_and_grad`."""
  loss, loss_grad = batch_value_and_grad(loss_fn, w, batch, microbatch)
  diff = jax.tree.map(lambda a, b: a - b, w, w_star)
  value = nbeta * loss + 0.5 * localization * _tree_dot(diff, diff)
  loss_grad = jax.tree.map(lambda g, m: g * m, loss_grad, mask)
  grad_u = jax.tree.map(lambda g, d, m: nbeta * g + localization * d * m, loss_grad, diff, mask)
  return value, loss, grad_u, loss_grad


def rmsprop_preconditioner(v, loss_grad, decay: float | None, eps: float):
  """``(v', G)``: pSGLD's running mean square ``v' = α v + (1 − α) (∇L_B)²`` and the diagonal
  preconditioner ``G = 1 / (√v' + δ)`` (Li et al. 2016, eqs. 4–5); with ``decay`` None, plain
  SGLD: ``v`` unchanged and ``G = 1``."""
  if decay is None:
    return v, jax.tree.map(jnp.ones_like, loss_grad)
  v = jax.tree.map(lambda v_, g: decay * v_ + (1 - decay) * g**2, v, loss_grad)
  return v, jax.tree.map(lambda v_: 1.0 / (jnp.sqrt(v_) + eps), v)


def langevin_step(w, grad_u, precond, standard_noise, mask, step_size: float):
  """``(w', ξ)``: ``w' = w − (ε/2) G ∇U + ξ`` with ``ξ = √(ε G) · z · mask`` for standard normal
  ``z`` (Welling & Teh 2011, eq. 4, with pSGLD's ``G``)."""
  noise = jax.tree.map(
    lambda z, p, m: jnp.sqrt(step_size * p) * z * m, standard_noise, precond, mask
  )
  w_new = jax.tree.map(
    lambda w_, p, g, z: w_ - 0.5 * step_size * p * g + z, w, precond, grad_u, noise
  )
  return w_new, noise


def log_proposal(w_to, w_from, grad_from, precond, mask, step_size: float):
  """``log N(w_to; w_from − (ε/2) G ∇U(w_from), ε G)`` up to a constant that cancels in the
  Metropolis–Hastings ratio."""
  mean = jax.tree.map(lambda w, g, p: w - 0.5 * step_size * p * g, w_from, grad_from, precond)
  resid = jax.tree.map(lambda a, b, p, m: (a - b) * m / jnp.sqrt(p), w_to, mean, precond, mask)
  return -_tree_dot(resid, resid) / (2 * step_size)


def mala_acceptance(u_w, u_new, w, w_new, grad_u, grad_new, precond, mask, step_size: float):
  """The MALA acceptance probability of the move ``w → w'``, ``min(1, exp(U(w) − U(w') + log q(w |
  w') − log q(w' | w)))`` (Roberts & Tweedie 1996), as float32."""
  log_ratio = (
    u_w
    - u_new
    + log_proposal(w, w_new, grad_new, precond, mask, step_size)
    - log_proposal(w_new, w, grad_u, precond, mask, step_size)
  )
  return jnp.minimum(1.0, jnp.exp(jnp.minimum(log_ratio, 0.0))).astype(jnp.float32)


def sample_chain(
  loss_fn: Callable[[Params, Any], jax.Array],
  params_star: Params,
  data: Any,
  key: jax.Array,
  num_steps: int,
  settings: SGLDSettings,
  param_mask: Params | None = None,
  accumulator: Any = None,
  accumulator_data: Any = None,
  star_losses: jax.Array | None = None,
  loss_at_star: bool = True,
  support: tuple[bool, ...] | None = None,
  constrain: Callable | None = None,
  feed: tuple | None = None,
):
  """Runs one chain from ``w*`` for ``num_steps`` steps; returns per-step traces (each
  ``(num_steps,)``).

  Traces: ``loss`` (the minibatch loss at ``w`` *before* the step), ``loss_at_star`` (the same
  minibatch's loss at ``w*``: their difference is what the LLC averages, see
  :mod:`mechjax.slt.llc`), ``distance`` (``‖w − w*‖`` after the step), ``drift_norm``
  (``‖(ε/2)·nβ·∇L_B‖``), ``noise_norm`` (``‖√ε·ξ‖``) and, with ``settings.mala``, ``acceptance``:
  the Metropolis–Hastings acceptance probability ``min(1, exp(U(w) − U(w') + log q(w|w') − log
  q(w'|w)))`` of the proposal, with ``U = nβ·L_B + (γ/2)‖w − w*‖²`` on the step's minibatch. Values
  near 1 mean the step size is small enough for the discretisation. It costs one more gradient, so
  it is evaluated on every ``settings.mala_every``-th step (``t % mala_every == 0``, under a
  ``lax.cond`` whose predicate is the same for every chain) and is NaN on the others.

  With ``star_losses`` (``(n,)``, every sample's loss at ``w*``), ``loss_at_star`` is the mean of
  the step's batch's entries instead of a forward pass at ``w*``: the same number when the loss is
  a mean over samples (:func:`per_sample_star_losses`), at the cost of one pass over the data
  before the chain instead of one per step.

  With an ``accumulator``, ``accumulator.update(state, w, t, accumulator_data)`` sees every draw
  ``w`` (before step ``t``, like ``loss``), and its final state is returned as
  ``traces["accumulated"]``: memory does not grow with the number of draws.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, the mean loss of a minibatch.
    params_star: ``w*``, the chain's start and the centre of the localising prior.
    data: the training data, a pytree of arrays with the samples first.
    key: this chain's PRNG key.
    num_steps: steps to run (burn-in included).
    settings: the :class:`SGLDSettings`; ``nbeta`` must be set (:meth:`SGLDSettings.resolved`).
    param_mask: a pytree like ``params_star`` of 0/1: coordinates with 0 stay at ``w*``.
    accumulator: an object with ``init(params_star)`` and ``update(state, w, t, data)`` (e.g.
      :class:`mechjax.slt.moments.StreamedMoments`), or None.
    accumulator_data: passed to ``accumulator.update``.
    star_losses: ``(n,)`` per-sample losses at ``w*`` of array ``data``, or None.
    loss_at_star: False leaves the ``loss_at_star`` trace out, and with it the forward pass at
      ``w*`` on every step's batch (callers that only want the accumulator or the draws' losses).
    support: one flag per leaf of ``params_star`` (:func:`mask_support`): leaves marked False are
      held at ``w*`` without a gradient or noise. It must mark True every leaf where
      ``param_mask`` has a non-zero entry; the draws are those of the unrestricted call, noise
      included (each leaf keeps its key), up to the rounding of the pruned backward pass.
    constrain: a function applied to every parameter-shaped tree the chain carries or makes (the
      draw, the noise, the preconditioner state) and to the accumulator's state, which places them
      on a mesh, with a ``batch`` method for each step's batch
      (:class:`mechjax.sharding.ModelConstraint`); None leaves placement to XLA.
    feed: ``(carry, steps, batches, star)`` to run only the steps ``steps`` (an int array) from
      ``carry`` (:func:`chain_start`'s, or ``traces["carry"]`` of the previous part) on the given
      batches (a leading axis of ``len(steps)``) instead of drawing them from ``data``, with
      ``star`` the batches' per-sample losses at ``w*`` or None: a chain in parts, as
      :mod:`mechjax.slt.stream` runs it. The traces then hold the final ``"carry"``.
  """
  s = settings
  place = constrain if constrain is not None else (lambda tree: tree)
  place_batch = getattr(constrain, "batch", lambda tree: tree)
  if s.nbeta is None:
    raise ValueError(
      "settings.nbeta is unset; call settings.resolved(n) with the number of samples first"
    )
  sampler = data if is_sampler(data) else None
  if star_losses is not None and sampler is not None:
    raise ValueError("star_losses needs array data (a sampler's batches are not indexed samples)")
  full_loss, full_star = loss_fn, params_star
  params_star, fixed, mask, noise_slots = _sampled_part(full_star, param_mask, support)
  loss_fn = lambda w, batch: full_loss(join_fixed(w, fixed), batch)  # noqa: E731
  potential = functools.partial(
    potential_and_grad, loss_fn, w_star=params_star, mask=mask, nbeta=s.nbeta,
    localization=s.localization, microbatch=s.microbatch_size,
  )  # fmt: skip
  eps = s.step_size

  def step(carry, xs):
    w, v, acc = carry
    t = xs[0] if feed is not None else xs
    k_batch, k_noise = jax.random.split(jax.random.fold_in(key, t))
    fed = (xs[1], None) if feed is not None else None
    batch, idx = fed or _minibatch(data, sampler, k_batch, s.batch_size)
    batch = place_batch(batch)
    star = star_losses if feed is None or xs[2] is None else xs[2]
    idx = idx if feed is None or xs[2] is None else slice(None)
    u_w, loss, grad_u, loss_grad = potential(w, batch=batch)
    v, precond = rmsprop_preconditioner(v, loss_grad, s.rmsprop, s.rmsprop_eps)
    w_new, noise = langevin_step(
      w, grad_u, precond, place(_normal(k_noise, w, noise_slots, s.noise_impl)), mask, eps
    )
    w_new, v = place(w_new), place(v)
    drift = jax.tree.map(lambda p, g: 0.5 * eps * p * s.nbeta * g, precond, loss_grad)
    diff = jax.tree.map(lambda a, b: a - b, w_new, params_star)
    out = {"loss": loss}
    if loss_at_star:
      out["loss_at_star"] = _loss_at_star(full_loss, full_star, batch, idx, star, s)
    out |= {
      "distance": jnp.sqrt(_tree_dot(diff, diff)),
      "drift_norm": jnp.sqrt(_tree_dot(drift, drift)),
      "noise_norm": jnp.sqrt(_tree_dot(noise, noise)),
    }
    if accumulator is not None:
      acc = place(accumulator.update(acc, join_fixed(w, fixed), t, accumulator_data))
    if s.mala:

      def acceptance(_):
        u_new, _, grad_new, _ = potential(w_new, batch=batch)
        return mala_acceptance(u_w, u_new, w, w_new, grad_u, grad_new, precond, mask, eps)

      skipped = lambda _: jnp.full((), jnp.nan, jnp.float32)  # noqa: E731
      every = s.mala_every == 1
      out["acceptance"] = (
        acceptance(None)
        if every
        else jax.lax.cond(t % s.mala_every == 0, acceptance, skipped, None)
      )
    return (w_new, v, acc), out

  start, xs = (
    chain_start(full_star, param_mask, support, accumulator, accumulator_data, place),
    None,
  )
  if feed is not None:
    start, xs = feed[0] if feed[0] is not None else start, tuple(feed[1:])
  carry, traces = jax.lax.scan(step, start, jnp.arange(num_steps) if xs is None else xs)
  if accumulator is not None:
    traces["accumulated"] = carry[2]
  if feed is not None:
    traces["carry"] = carry
  return traces


def chain_start(full_star, param_mask, support, accumulator, accumulator_data, place):
  """A chain's first carry ``(w, v, accumulator state)``: the sampled part of ``w*``
  (:func:`_sampled_part`), a zero preconditioner state and the accumulator's initial state, each
  put where ``place`` says (:func:`sample_chain`'s ``constrain``, or the identity)."""
  params_star = _sampled_part(full_star, param_mask, support)[0]
  v0 = place(jax.tree.map(jnp.zeros_like, params_star))
  acc0 = None if accumulator is None else place(accumulator.init(full_star, accumulator_data))
  return params_star, v0, acc0


def _sampled_part(full_star: Params, param_mask: Params | None, support):
  """``(w*, fixed, mask, noise_slots)``: the float leaves the chain moves (:func:`split_fixed`;
  non-float leaves, such as integer step counters, and leaves outside ``support`` are held at
  ``w*``), the rest, the 0/1 mask over the moved leaves, and each moved leaf's noise slot: its
  position among all float leaves, so that a restricted chain draws the unrestricted one's noise."""
  params_star, fixed = split_fixed(full_star, support)
  float_leaves = [i for i, a in enumerate(jax.tree.leaves(full_star)) if is_float_leaf(a)]
  slots = [k for k, i in enumerate(float_leaves) if support is None or support[i]]
  if param_mask is None:
    mask = jax.tree.map(jnp.ones_like, params_star)
  else:
    mask = jax.tree.map(
      lambda m, p, q: None if q is None else m,
      param_mask,
      full_star,
      params_star,
      is_leaf=lambda x: x is None,
    )
  return params_star, fixed, mask, (np.array(slots, np.int32), len(float_leaves))


def _loss_at_star(loss_fn, w_star, batch, idx, star_losses, settings: SGLDSettings):
  """The step's minibatch loss at ``w*``: the mean of the batch's entries of ``star_losses`` (every
  sample's loss at ``w*``), or, without them, a forward pass at ``w*`` (by micro-batches when
  ``settings.microbatch_size`` is set)."""
  if star_losses is not None:
    return jnp.mean(star_losses[idx])
  return batch_loss(loss_fn, w_star, batch, settings.microbatch_size)


def _minibatch(data, sampler, key: jax.Array, batch_size: int):
  """``(batch, idx)``: ``batch_size`` samples drawn with replacement from array ``data`` (and their
  indices), or one batch of ``sampler`` (indices None)."""
  if sampler is not None:
    return sampler(key), None
  idx = jax.random.randint(key, (batch_size,), 0, jax.tree.leaves(data)[0].shape[0])
  return jax.tree.map(lambda a: a[idx], data), idx


def _normal(key: jax.Array, w: Params, noise_slots, impl: str = "threefry") -> Params:
  """Standard normal noise shaped like ``w``, each leaf from its own slot's key
  (:func:`_sampled_part`). With ``impl`` other than threefry the slots' keys are split from a key of
  that implementation whose data are 128 bits of ``key``."""
  if impl != "threefry":
    key = jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl=impl)
  slots, num_float = noise_slots
  leaves, treedef = jax.tree.flatten(w)
  keys = jax.random.split(key, num_float)[slots]
  return jax.tree.unflatten(
    treedef, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
  )


MAP_MIN_PARAMS = 10_000


def chain_loop(settings: SGLDSettings, params: Params = None) -> str:
  """``"vmap"`` or ``"map"``: ``settings.chain_loop`` with ``auto`` resolved: ``map`` on a CPU when
  ``params`` has at least :data:`MAP_MIN_PARAMS` float entries (or is not given), ``vmap``
  otherwise. A step of a small model is a few ops on small arrays, whose fixed cost ``vmap``
  shares out (docs/benchmarks.md compares the two)."""
  if settings.chain_loop != "auto":
    return settings.chain_loop
  if jax.default_backend() != "cpu":
    return "vmap"
  if params is None:
    return "map"
  size = sum(int(np.size(a)) for a in jax.tree.leaves(params) if is_float_leaf(a))
  return "map" if size >= MAP_MIN_PARAMS else "vmap"


def with_chain_loop(settings: SGLDSettings, params: Params) -> SGLDSettings:
  """``settings`` with ``chain_loop`` resolved for ``params`` (:func:`chain_loop`), so that the
  compiled program is keyed on what it runs."""
  return dataclasses.replace(settings, chain_loop=chain_loop(settings, params))


def over_chains(fn: Callable, how: str, *xs):
  """``fn`` applied to every row of the arrays ``xs`` (a leading chain axis), stacked: ``vmap(fn)``
  or ``lax.map`` by ``how`` (see the module docstring)."""
  if how == "vmap":
    return jax.vmap(fn)(*xs)
  return jax.lax.map(lambda row: fn(*row), xs)


def chain_keys(key: jax.Array, num_chains: int) -> jax.Array:
  """``fold_in(key, c)`` for chains ``c = 0 … num_chains − 1``."""
  return _chain_keys(key, num_chains)


@functools.partial(jax.jit, static_argnums=1)
def _chain_keys(key, num_chains):
  return jax.vmap(lambda c: jax.random.fold_in(key, c))(jnp.arange(num_chains))


def sample_chains(
  loss_fn,
  params_star,
  data,
  key: jax.Array,
  settings: SGLDSettings,
  *,
  param_mask=None,
  accumulator: Any = None,
  accumulator_data: Any = None,
  shard: bool | None = None,
  star_losses: jax.Array | None = None,
  mesh: Mesh | None = None,
  analyze: bool = False,
):
  """``settings.num_chains`` chains of ``settings.num_steps`` steps from ``w*`` in one
  ``jit(vmap(scan))`` program; every trace is ``(num_chains, num_steps)`` (see
  :func:`sample_chain`).

  When JAX sees several devices and their number divides ``num_chains``, the chain axis is sharded
  over all of them (:func:`mechjax.sharding.leading_axis`; ``w*`` and the data are replicated), so
  each device runs its share of the chains. On a CPU, :func:`mechjax.use_all_cpu_cores` before
  JAX starts makes every core a device, which speeds the sampler up (docs/benchmarks.md). Without
  it, on one CPU device, the chains are split into groups called from one
  thread per core (:func:`cpu_thread_groups`), which gains about as much. The draws depend on the
  key and on the number of devices (the partitioned matmuls round differently), on nothing else.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, the mean loss of a minibatch.
    params_star: ``w*``.
    data: the training data, a pytree of arrays with the samples first, a sampler, or host data
      streamed a part at a time (:class:`mechjax.slt.stream.Streamed`).
    key: the PRNG key; chain ``i`` uses :func:`chain_keys` ``(key, num_chains)[i]``.
    settings: the :class:`SGLDSettings`; ``nbeta`` unset means ``n / ln n`` of ``data``.
    param_mask: a pytree like ``params_star`` of 0/1: coordinates with 0 stay at ``w*``.
    accumulator: see :func:`sample_chain`.
    accumulator_data: see :func:`sample_chain`.
    shard: split the chains over the devices: None decides as above, False never does.
    star_losses: ``(n,)`` per-sample losses at ``w*`` (:func:`per_sample_star_losses`), or None;
      see :func:`sample_chain`.
    mesh: a ``jax.sharding.Mesh`` with axes ``chains`` and ``model``
      (:func:`mechjax.sharding.sampler_mesh`): the chains split over ``chains``, ``w*`` and every
      chain's parameter-shaped arrays over ``model``; ``shard`` is then not used. None: as above.
    analyze: compile without running, and return the program's memory analysis instead
      (:func:`chains_memory`).
  """
  check_params(params_star)
  settings, sampler = resolve_data(settings, data, loss_fn, params_star)
  settings = with_chain_loop(settings, params_star)
  source = None if sampler is not None else data
  keys = chain_keys(key, settings.num_chains)
  if mesh is not None:
    mesh = sharding_lib.sampler_mesh(mesh, settings.num_chains)
    params_star, param_mask = sharding_lib.place((params_star, param_mask), mesh)
  if is_streamed(data):
    if analyze:
      raise ValueError(
        "chains_memory measures the in-memory program; pass the arrays, not Streamed data"
      )
    return over_chains_on_devices(
      settings.num_chains,
      lambda layout, per: data.chains_run(
        loss_fn,
        dataclasses.replace(settings, num_chains=per),
        accumulator,
        layout,
        mask_support(params_star, param_mask),
        param_mask is not None,
      ),
      lambda program, part: program(
        params_star, data, keys[part], param_mask, accumulator_data, star_losses
      ),
      shard,
      mesh=mesh,
    )
  return over_chains_on_devices(
    settings.num_chains,
    lambda layout, per: _program(
      loss_fn,
      dataclasses.replace(settings, num_chains=per),
      param_mask is not None,
      accumulator,
      layout,
      sampler,
      star_losses is not None,
      mask_support(params_star, param_mask),
    ),
    lambda program, part: program(
      params_star, source, keys[part], param_mask, accumulator_data, star_losses
    ),
    shard,
    mesh=mesh,
    analyze=analyze,
  )


def chains_memory(loss_fn, params_star, data, key: jax.Array, settings: SGLDSettings, **kwargs):
  """The per-device memory of :func:`sample_chains`' compiled program for these arguments
  (``jax.stages.Compiled.memory_analysis()``: argument, output and temporary bytes), compiled but
  not run; the keywords are :func:`sample_chains`'. With a ``mesh`` it shows what the model axis
  saves, and at a reduced size it is the basis of a plan for a larger model
  (docs/benchmarks.md, "Running at scale")."""
  return sample_chains(loss_fn, params_star, data, key, settings, analyze=True, **kwargs)


def over_chains_on_devices(
  num_chains: int,
  build: Callable[[Any, int], Callable],
  run: Callable[[Callable, slice], Any],
  shard: bool | None = None,
  axis: int = 0,
  mesh: Mesh | None = None,
  analyze: bool = False,
):
  """Runs ``num_chains`` chains where they run fastest, the one place that decides it: on the
  caller's ``mesh`` when one is given; else sharded over the devices when their number divides
  ``num_chains`` (:func:`mechjax.sharding.leading_axis`), else, on one CPU device, in equal groups
  called from one thread each (:func:`cpu_thread_groups`).

  Args:
    num_chains: the chains in all.
    build: ``build(layout, per) -> program`` for ``per`` chains with the device ``layout`` (None
      for one device).
    run: ``run(program, part) -> traces``, the chains ``part`` (a slice of the chain axis, for the
      callers' keys) through ``program``.
    shard: as for :func:`sample_chains`.
    axis: the chain axis of the traces, along which the groups' outputs are joined.
    mesh: a mesh with axes ``chains`` and ``model`` (:func:`mechjax.sharding.sampler_mesh`), or
      None. ``build`` gets it as the layout.
    analyze: instead of running, compile the program for all the chains at once and return its
      memory analysis (``run`` gets a stand-in for the program that lowers and compiles).
  """
  if mesh is not None:
    layout = sharding_lib.sampler_mesh(mesh, num_chains)
  else:
    lead = sharding_lib.leading_axis(num_chains, "chains", shard)
    layout = None if lead is None else lead.mesh
  if analyze:
    program = build(layout, num_chains)
    return run(lambda *args: program.lower(*args).compile().memory_analysis(), slice(None))
  groups = 1 if layout is not None else cpu_thread_groups(num_chains, shard)
  per = num_chains // groups
  program = build(layout, per)
  return _in_groups(lambda g: run(program, slice(g * per, (g + 1) * per)), groups, axis)


def cpu_thread_groups(num: int, shard: bool | None = None) -> int:
  """Into how many groups to split ``num`` chains that run from separate threads: on a single CPU
  device, XLA runs one program's elementwise work on one core, but two programs called from two
  threads run at once. So when JAX has one device, a CPU, and the process may use several cores,
  the chains are split into the largest number of equal groups, at most one per core, and each
  group's program is called from its own thread (bit for bit the same chains: tested). 1 (no
  split) otherwise, or with ``shard=False``. Several devices are used through sharding instead
  (:func:`mechjax.use_all_cpu_cores`)."""
  if shard is False:
    return 1
  devices = jax.devices()
  if len(devices) != 1 or devices[0].platform != "cpu":
    return 1
  import mechjax  # local: the package's root imports nothing

  groups = min(mechjax.usable_cpu_cores(), num)
  while groups > 1 and num % groups:
    groups -= 1
  return max(groups, 1)


_POOL: list = []


def _in_groups(call: Callable[[int], Any], groups: int, axis: int = 0):
  """``call(0)`` when ``groups`` is 1; otherwise ``call(g)`` for every group ``g`` from its own
  thread, the outputs concatenated along their chain axis ``axis``."""
  if groups == 1:
    return call(0)
  from concurrent.futures import ThreadPoolExecutor

  if not _POOL or _POOL[0] < groups:  # (workers, pool): grown when more groups are asked for
    _POOL[:] = [groups, ThreadPoolExecutor(max_workers=groups, thread_name_prefix="mechjax-chains")]
  parts = list(_POOL[1].map(lambda g: jax.block_until_ready(call(g)), range(groups)))
  return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=axis), *parts)


def sample_points(
  loss_fn,
  params_stack,
  data,
  keys: jax.Array,
  settings: SGLDSettings,
  *,
  param_mask=None,
  shard: bool | None = None,
  star_losses: jax.Array | None = None,
  mesh: Mesh | None = None,
):
  """The chains of :func:`sample_chains` at ``B`` points at once: ``params_stack`` is a pytree of
  ``w*`` with a leading axis ``B`` (checkpoints, seeds or both), ``keys`` is ``(B,)`` (point ``b``'s
  chains use :func:`chain_keys` ``(keys[b], num_chains)``, as :func:`sample_chains` with
  ``keys[b]`` would) and ``star_losses``, if given, is ``(B, n)``. Every trace is ``(B, num_chains,
  num_steps)``. The ``B × num_chains`` chains run in one ``jit(vmap(scan))`` program, each with its
  point's ``w*``; with several devices that axis is split over them when their number divides it
  (``shard`` as in :func:`sample_chains`).

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, the mean loss of a minibatch.
    params_stack: the points ``w*``, every leaf with a leading axis of ``B``.
    data: the training data, as for :func:`sample_chains`.
    keys: ``(B,)`` PRNG keys, one per point.
    settings: the :class:`SGLDSettings`; ``nbeta`` unset means ``n / ln n`` of ``data``.
    param_mask: one point's 0/1 mask pytree, shared by every point, or None.
    shard: as for :func:`sample_chains`.
    star_losses: ``(B, n)`` per-sample losses at each point, or None.
    mesh: as for :func:`sample_chains`; its ``chains`` axis splits the ``B × num_chains`` chains.
  """
  leaves = jax.tree.leaves(params_stack)
  if not leaves:
    raise ValueError("params_stack has no arrays")
  num_points = leaves[0].shape[0] if jnp.ndim(leaves[0]) else None
  if num_points is None or any(jnp.ndim(a) == 0 or a.shape[0] != num_points for a in leaves):
    raise ValueError(
      "params_stack must be a pytree of arrays that all share a leading axis of B points; got "
      f"leading sizes {sorted({a.shape[0] if jnp.ndim(a) else None for a in leaves}, key=str)}"
    )
  keys = jnp.asarray(keys)
  if keys.shape[:1] != (num_points,):
    raise ValueError(f"keys must hold one key per point, ({num_points},); got {keys.shape}")
  check_params(params_stack)
  point0 = jax.tree.map(lambda a: a[0], params_stack)
  settings, sampler = resolve_data(settings, data, loss_fn, point0)
  settings = with_chain_loop(settings, jax.tree.map(lambda a: a[0], params_stack))
  c = settings.num_chains
  flat_keys = jax.vmap(lambda k: chain_keys(k, c))(keys).reshape(num_points * c, *keys.shape[1:])
  points = jnp.repeat(jnp.arange(num_points), c)
  source = None if sampler is not None else data
  if mesh is not None:
    mesh = sharding_lib.sampler_mesh(mesh, num_points * c)
    params_stack = sharding_lib.place(params_stack, mesh, lead=1)
    param_mask = sharding_lib.place(param_mask, mesh)
  traces = over_chains_on_devices(
    num_points * c,
    lambda layout, per: _points_program(
      loss_fn,
      settings,
      param_mask is not None,
      layout,
      sampler,
      star_losses is not None,
      mask_support(jax.tree.map(lambda a: a[0], params_stack), param_mask),
    ),
    lambda program, part: program(
      params_stack, source, flat_keys[part], points[part], param_mask, star_losses
    ),
    shard,
    mesh=mesh,
  )
  return jax.tree.map(lambda a: a.reshape(num_points, c, *a.shape[1:]), traces)


def data_size(data) -> int:
  """The number of samples ``n`` in ``data``, a pytree of arrays with the samples first; refuses,
  in one line that names each leaf's length, leaves whose leading lengths differ (and scalar
  leaves, which have no sample axis)."""
  leaves = jax.tree_util.tree_flatten_with_path(data)[0]
  if not leaves:
    raise ValueError(
      "data holds no arrays: pass a pytree of arrays with the samples first, or a sampler "
      "sample_batch(key) -> batch"
    )
  lengths = {}
  for path, leaf in leaves:
    name = f"data{jax.tree_util.keystr(path)}"
    shape = np.shape(leaf)
    if not shape:
      raise ValueError(
        f"{name} is a scalar, but every leaf of data needs the samples on its leading axis; "
        "close over constants in the loss instead"
      )
    lengths[name] = shape[0]
  if len(set(lengths.values())) > 1:
    listing = ", ".join(f"{k} has {v}" for k, v in lengths.items())
    raise ValueError(
      f"data's leaves have different numbers of samples ({listing}); every leaf needs the same "
      "leading (sample) length n, one row per training sample"
    )
  return next(iter(lengths.values()))


def _describe(out) -> str:
  if isinstance(out, jax.ShapeDtypeStruct):
    return f"an array of shape {tuple(out.shape)}"
  return f"a {type(out).__name__} of {len(jax.tree.leaves(out))} arrays"


_LOSS_SHAPES: dict = {}


def _loss_shape(loss_fn, params, batch):
  """``jax.eval_shape(loss_fn, params, batch)``, remembered by the loss and the inputs' shapes, so a
  repeated call with new values traces nothing (a large model's trace is not free)."""
  leaves, tree = jax.tree.flatten((params, batch))
  sig = (tree, tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves))
  try:
    key = (loss_fn, sig)
    hash(key)
  except TypeError:  # an unhashable callable: check it every time
    return jax.eval_shape(loss_fn, params, batch)
  if key not in _LOSS_SHAPES:
    if len(_LOSS_SHAPES) > 256:
      _LOSS_SHAPES.clear()
    _LOSS_SHAPES[key] = jax.eval_shape(loss_fn, params, batch)
  return _LOSS_SHAPES[key]


def check_loss(loss_fn, params, data, batch_size: int, per_sample: bool = False) -> None:
  """Refuses, before anything is compiled, a loss whose output has the wrong shape: traced once
  with :func:`jax.eval_shape` on a batch of ``batch_size`` samples of ``data``'s shapes (nothing
  is computed). ``loss_fn(params, batch)`` must return a scalar, the mean loss of the batch; with
  ``per_sample``, one loss per sample, ``(B,)`` or ``(B, T)``."""
  if is_sampler(data):
    batch = jax.eval_shape(data, jax.random.key(0))
  else:
    batch = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct((batch_size,) + np.shape(x)[1:], jnp.result_type(x)), data
    )
  out = _loss_shape(loss_fn, params, batch)
  scalar = isinstance(out, jax.ShapeDtypeStruct) and out.shape == ()
  if not per_sample and not scalar:
    raise ValueError(
      f"loss_fn(params, batch) returned {_describe(out)} for a batch of {batch_size} samples, but "
      "the SGLD loss must be a scalar, the mean loss of the batch (e.g. jnp.mean of the "
      "per-sample losses); per-sample losses go to "
      "slt.estimate_susceptibilities(per_sample_loss, ...)"
    )
  if per_sample and not (
    isinstance(out, jax.ShapeDtypeStruct) and out.ndim in (1, 2) and out.shape[0] == batch_size
  ):
    raise ValueError(
      f"per_sample_loss(params, batch) returned {_describe(out)} for a batch of {batch_size} "
      f"samples, but it must return one loss per sample, ({batch_size},), or per token, "
      f"({batch_size}, T); the mean loss alone goes to slt.estimate_llc(loss_fn, ...)"
    )


def resolve_data(
  settings: SGLDSettings, data, loss_fn=None, params=None, per_sample: bool = False
) -> tuple[SGLDSettings, Callable | None]:
  """``(settings with nβ filled in, the sampler or None)`` for arrays, a device-side sampler or
  host data streamed a part at a time (:class:`mechjax.slt.stream.Streamed`, whose ``n`` is its
  rows).

  Arrays: every leaf must have the same number ``n`` of samples first (:func:`data_size`),
  ``batch_size`` must not exceed it, and an unset ``nβ`` is ``n / ln n``. A sampler
  ``sample_batch(key) -> batch`` has no ``n``: ``nβ`` must be given (it sets the posterior's
  sample size), and its batches must hold ``batch_size`` samples. With ``loss_fn`` and ``params``
  the loss's output shape is checked too (:func:`check_loss`)."""
  if is_streamed(data):
    n = data.num_samples
    if settings.batch_size > n:
      raise ValueError(f"batch_size={settings.batch_size} exceeds the {n} streamed samples")
    if loss_fn is not None:
      check_loss(loss_fn, params, data.spec(), settings.batch_size, per_sample)
    return settings.resolved(n), None
  if is_sampler(data):
    if settings.nbeta is None:
      raise ValueError(
        "with a sampler sample_batch(key) for data there is no sample count n to set nβ = n / ln n "
        "from; pass nbeta= (e.g. default_nbeta(n) for the n your posterior should describe)"
      )
    check_sampler(data, settings.batch_size)
    resolved, sampler = settings, data
  else:
    n = data_size(data)
    if settings.batch_size > n:
      raise ValueError(f"batch_size={settings.batch_size} exceeds the {n} samples in data")
    resolved, sampler = settings.resolved(n), None
  if loss_fn is not None:
    check_loss(loss_fn, params, data, settings.batch_size, per_sample)
  return resolved, sampler


def per_sample_star_losses(loss_fn, params_star, data, chunk: int = 256) -> jax.Array:
  """``(n,)``: ``loss_fn(params_star, sample_i)`` for every sample of ``data``, each sample as a
  batch of one (``lax.map`` over chunks of ``chunk`` samples, vmapped within a chunk). Their batch
  means equal ``loss_fn`` on the batch exactly when the loss is a mean over samples; whether it is
  is for the caller to check (:func:`mechjax.slt.llc.star_loss_path`).

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``.
    params_star: ``w*``.
    data: a pytree of arrays with the ``n`` samples first.
    chunk: samples vmapped together within the ``lax.map``.
  """
  return _per_sample_program(loss_fn, chunk)(params_star, data)


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def _per_sample_program(loss_fn, chunk: int):
  @jax.jit
  def run(params, data):
    one = lambda x: loss_fn(params, jax.tree.map(lambda a: a[None], x))  # noqa: E731
    n = jax.tree.leaves(data)[0].shape[0]
    return jax.lax.map(one, data, batch_size=min(chunk, n))

  return run


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def _program(
  loss_fn,
  settings: SGLDSettings,
  masked: bool,
  accumulator,
  layout,
  sampler=None,
  per_sample: bool = False,
  support: tuple[bool, ...] | None = None,
):
  """One compiled program per (loss, settings, mask presence, accumulator, device layout, sampler,
  w*-loss path, the mask's support): repeated calls (another key, another w*, other data of the
  same shapes) reuse it instead of tracing and compiling again. A sampler is part of the program;
  arrays are its arguments."""

  def run(params_star, data, keys, param_mask, accumulator_data, star_losses):
    chain = lambda k: sample_chain(
      loss_fn,
      params_star,
      data if sampler is None else sampler,
      k,
      settings.num_steps,
      settings,
      param_mask if masked else None,
      accumulator,
      accumulator_data,
      star_losses if per_sample else None,
      support=support,
      constrain=sharding_lib.model_constraint(layout),
    )
    return over_chains(chain, chain_loop(settings), keys)

  return jit_over_chains(run, layout, num_args=6)


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def _points_program(
  loss_fn, settings: SGLDSettings, masked: bool, layout, sampler, per_sample, support=None
):
  """:func:`sample_points`' program, cached like :func:`_program`: one ``vmap`` over the ``B ×
  num_chains`` chains, each gathering its point's ``w*`` (and per-sample losses) by index. One flat
  axis compiles in about half the time of a ``vmap`` over points of a ``vmap`` over chains, and
  runs the same chains bit for bit."""

  def run(params_stack, data, keys, points, param_mask, star_losses):
    def chain(key, point):
      return sample_chain(
        loss_fn,
        jax.tree.map(lambda a: a[point], params_stack),
        data if sampler is None else sampler,
        key,
        settings.num_steps,
        settings,
        param_mask if masked else None,
        star_losses=star_losses[point] if per_sample else None,
        support=support,
        constrain=sharding_lib.model_constraint(layout),
      )

    return over_chains(chain, chain_loop(settings), keys, points)

  return jit_over_chains(run, layout, num_args=6, split_args=(2, 3))


def jit_over_chains(
  run: Callable, layout, chain_axis: int = 0, num_args: int = 5, split_args=(2,), split_axes=None
):
  """``jit(run)`` for ``run(params, data, keys, mask, accumulator_data, ...)`` (``num_args``
  arguments; the chain keys, and any other per-chain arguments, at the positions ``split_args``,
  each with its chain axis first or at ``split_axes[position]``).

  With a ``layout`` (a mesh whose first axis is ``chains``: :func:`mechjax.sharding.leading_axis`'s,
  or :func:`mechjax.sharding.sampler_mesh`'s) ``run`` becomes the body of a ``shard_map`` that is
  manual over ``chains``: each device runs ``run`` on its own share of the per-chain arguments
  (everything else is whole along ``chains``), and the outputs are its chains' rows, concatenated
  along ``chain_axis``. Each device's chains then run as ``run`` says (``vmap`` or ``lax.map``),
  which a program partitioned by XLA could not do for a ``lax.map`` over the split axis. A
  ``model`` axis stays XLA's to partition: the arguments arrive split over it
  (:func:`mechjax.sharding.place`) and ``run`` constrains what it carries to the same rule."""
  options = sharding_lib.compiler_options()
  if layout is None:
    return jax.jit(run, compiler_options=options)
  from jax.sharding import PartitionSpec as P

  name = layout.axis_names[0]
  axes = split_axes or {}
  in_specs = tuple(
    P(*[None] * axes.get(i, 0), name) if i in split_args else P() for i in range(num_args)
  )
  body = jax.shard_map(
    run,
    mesh=layout,
    in_specs=in_specs,
    out_specs=P(*([None] * chain_axis), name),
    axis_names={name},
    check_vma=False,
  )
  return _onto_layout(jax.jit(body, compiler_options=options), layout)


def _onto_layout(program, layout):
  """``program`` whose array arguments held on other devices than ``layout``'s (``w*`` left on one
  device by the training that made it, say) are first replicated over the layout: a jitted
  ``shard_map`` refuses arguments committed elsewhere. Arrays already on the layout's devices (the
  model-axis shards of :func:`mechjax.sharding.place`) are left as they are."""
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  devices, replicated = set(layout.devices.flat), NamedSharding(layout, P())

  def move(a):
    if isinstance(a, jax.Array) and a.sharding.device_set != devices:
      return jax.device_put(a, replicated)
    return a

  def call(*args):
    return program(*jax.tree.map(move, args))

  call.lower = lambda *args: program.lower(*jax.tree.map(move, args))
  return call
