"""One SGLD chain: a ``lax.scan`` of Langevin steps (:mod:`mechjax.slt.langevin`) from a carry, on
minibatches drawn from the data inside the scan or handed in by a driver.

A chain is a :class:`Chain` (what stays fixed: the loss, ``w*``, the key, the settings, the mask)
and a carry ``(w, v, accumulator state)``. :meth:`Chain.run_steps` runs the given steps from a
carry. :func:`sample_chain` runs a whole chain from :meth:`Chain.start`, drawing each step's batch
from the data; the streaming driver (:mod:`mechjax.slt.stream`) runs it in parts on batches it
gathered on the host. Both draw the same batch at step ``t``, so a streamed chain is the in-memory
one.

Randomness is a function of the key only: chain ``c`` uses ``fold_in(key, c)`` (:func:`chain_keys`)
and its step ``t`` uses ``fold_in(chain_key, t)``, split into the batch's key and the noise's.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Protocol

import jax
import jax.numpy as jnp

from mechjax.slt import langevin
from mechjax.slt import params as params_lib
from mechjax.slt import progress
from mechjax.slt.inputs import is_sampler
from mechjax.slt.restriction import Restriction
from mechjax.slt.settings import SGLDSettings

Params = Any


class Accumulator(Protocol):
  """What a chain carries besides its draw and sees every draw with: any hashable object with these
  two methods (e.g. :class:`mechjax.slt.moments.StreamedMoments`). Its state is carried through the
  scan, so memory does not grow with the number of draws."""

  def init(self, params_star: Params, data: Any) -> Any:
    """The state before the first draw; ``data`` is the chain's ``accumulator_data``."""

  def update(self, state: Any, w: Params, step: jax.Array, data: Any) -> Any:
    """The state after draw ``w``, the chain's position before step ``step``."""


def chain_keys(key: jax.Array, num_chains: int) -> jax.Array:
  """``fold_in(key, c)`` for chains ``c = 0 … num_chains − 1``."""
  return _chain_keys(key, num_chains)


@functools.partial(jax.jit, static_argnums=1)
def _chain_keys(key, num_chains):
  return jax.vmap(lambda c: jax.random.fold_in(key, c))(jnp.arange(num_chains))


def chain_start(
  full_star, param_mask, support, accumulator, accumulator_data, place, preconditioned=True
):
  """A chain's first carry ``(w, v, accumulator state)``: the sampled part of ``w*``
  (:func:`mechjax.slt.params.sampled_part`), a zero preconditioner state (``()`` when not
  ``preconditioned``: plain SGLD carries none) and the accumulator's initial state, each put where
  ``place`` says (a :class:`Chain`'s ``constrain``, or the identity)."""
  if isinstance(param_mask, Restriction):
    params_star = param_mask.take(full_star)
  else:
    params_star = params_lib.sampled_part(full_star, param_mask, support)[0]
  v0 = place(jax.tree.map(jnp.zeros_like, params_star)) if preconditioned else ()
  acc0 = None if accumulator is None else place(accumulator.init(full_star, accumulator_data))
  return params_star, v0, acc0


class Chain:
  """The fixed parts of one chain, built inside a traced program; :meth:`run_steps` is the scan.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, the mean loss of a minibatch.
    params_star: ``w*``, the chain's start and the centre of the localising prior.
    key: this chain's PRNG key.
    settings: the :class:`~mechjax.slt.settings.SGLDSettings`; ``nbeta`` must be set
      (:meth:`~mechjax.slt.settings.SGLDSettings.resolved`).
    param_mask: a pytree like ``params_star`` of 0/1: coordinates with 0 stay at ``w*``; or a
      :class:`~mechjax.slt.restriction.Restriction`, whose boxes alone the chain carries.
    accumulator: an :class:`Accumulator`, or None.
    accumulator_data: passed to the accumulator's ``init`` and ``update``.
    data: what :meth:`run_steps` draws batches from when none are handed in: arrays with the
      samples first, or a sampler ``sample_batch(key) -> batch``; None for a driver that always
      hands them in.
    star_losses: ``(n,)`` every sample's loss at ``w*`` of array ``data``, or None.
    loss_at_star: False leaves the ``loss_at_star`` trace out, and with it the forward pass at
      ``w*`` on every step's batch.
    support: one flag per leaf of ``params_star`` (:func:`mechjax.slt.params.mask_support`): leaves
      marked False are held at ``w*`` without a gradient or noise.
    constrain: places every parameter-shaped tree the chain carries or makes, with a ``batch``
      method for each step's batch (:class:`mechjax.sharding.ModelConstraint`); None leaves
      placement to XLA.
    report_every: report the steps taken to the host every this many steps
      (:func:`mechjax.slt.progress.tick`); None: no reports.
  """

  def __init__(
    self,
    loss_fn: Callable[[Params, Any], jax.Array],
    params_star: Params,
    key: jax.Array,
    settings: SGLDSettings,
    param_mask: Params | None = None,
    accumulator: Accumulator | None = None,
    accumulator_data: Any = None,
    *,
    data: Any = None,
    star_losses: jax.Array | None = None,
    loss_at_star: bool = True,
    support: tuple[bool, ...] | None = None,
    constrain: Callable | None = None,
    report_every: int | None = None,
  ):
    if settings.nbeta is None:
      raise ValueError(
        "settings.nbeta is unset; call settings.resolved(n) with the number of samples first"
      )
    self.sampler = data if is_sampler(data) else None
    if star_losses is not None and self.sampler is not None:
      raise ValueError("star_losses needs array data (a sampler's batches are not indexed samples)")
    self.data, self.star_losses, self.key, self.settings = data, star_losses, key, settings
    self.full_loss, self.full_star, self.param_mask = loss_fn, params_star, param_mask
    self.accumulator, self.accumulator_data = accumulator, accumulator_data
    self.loss_at_star, self.support, self.report_every = loss_at_star, support, report_every
    self.place = constrain if constrain is not None else (lambda tree: tree)
    self.place_batch = getattr(constrain, "batch", lambda tree: tree)
    if isinstance(param_mask, Restriction):  # box-sized draws, written into w* for the loss
      self.w_star = param_mask.take(params_star)
      self.mask = jax.tree.map(lambda a: jnp.ones((), a.dtype), self.w_star)
      self.join = functools.partial(param_mask.put, params_star)
      self.noise = lambda k, w: param_mask.noise(k, params_star, settings.noise_impl)
    else:
      self.w_star, fixed, self.mask, slots = params_lib.sampled_part(
        params_star, param_mask, support
      )
      self.join = lambda w: params_lib.join_fixed(w, fixed)
      self.noise = lambda k, w: langevin.normal_noise(k, w, slots, settings.noise_impl)
    loss = lambda w, batch: loss_fn(self.join(w), batch)  # noqa: E731
    self.potential = functools.partial(
      langevin.potential_and_grad, loss, w_star=self.w_star, mask=self.mask, nbeta=settings.nbeta,
      localization=settings.localization, microbatch=settings.microbatch_size,
    )  # fmt: skip

  def start(self):
    """The first carry ``(w*'s sampled part, zero preconditioner state, accumulator state)``."""
    return chain_start(
      self.full_star,
      self.param_mask,
      self.support,
      self.accumulator,
      self.accumulator_data,
      self.place,
      self.settings.rmsprop is not None,
    )

  def run_steps(self, carry, steps: jax.Array, batches: Any = None, star: jax.Array | None = None):
    """``(carry, traces)`` after the steps ``steps`` (an int array) from ``carry``.

    Without ``batches`` each step draws its minibatch from the chain's data with its own key (and
    its loss at ``w*`` from ``star_losses``). With them, ``batches`` has a leading axis of
    ``len(steps)`` and ``star`` holds those batches' per-sample losses at ``w*``, ``(len(steps),
    batch_size)``, or None for a forward pass at ``w*``. The traces are those of
    :func:`sample_chain`, each ``(len(steps),)``.
    """
    if batches is None:
      return jax.lax.scan(self._drawn_step, carry, steps)
    return jax.lax.scan(lambda c, xs: self.step(c, *xs), carry, (steps, batches, star))

  def _drawn_step(self, carry, t):
    k_batch = jax.random.split(jax.random.fold_in(self.key, t))[0]
    batch, idx = _minibatch(self.data, self.sampler, k_batch, self.settings.batch_size)
    star = None if self.star_losses is None else self.star_losses[idx]
    return self.step(carry, t, batch, star)

  def step(self, carry, t, batch, star=None):
    """``(carry, out)``: Langevin step ``t`` from ``carry`` on ``batch`` (``star``: its samples'
    losses at ``w*``, or None), and the step's trace values."""
    s, eps = self.settings, self.settings.step_size
    w, v, acc = carry
    k_noise = jax.random.split(jax.random.fold_in(self.key, t))[1]
    batch = self.place_batch(batch)
    u_w, loss, grad_u, loss_grad = self.potential(w, batch=batch)
    v, precond = langevin.rmsprop_preconditioner(v, loss_grad, s.rmsprop, s.rmsprop_eps)
    noise = self.place(self.noise(k_noise, w))
    w_new, noise = langevin.langevin_step(w, grad_u, precond, noise, self.mask, eps)
    w_new, v = self.place(w_new), self.place(v)
    out = {"loss": loss}
    if self.loss_at_star:
      out["loss_at_star"] = (
        jnp.mean(star)
        if star is not None
        else langevin.batch_loss(self.full_loss, self.full_star, batch, s.microbatch_size)
      )
    out |= self._norms(t, w, w_new, precond, loss_grad, k_noise)
    if self.accumulator is not None:
      full_w = self.join(w)
      acc = self.place(self.accumulator.update(acc, full_w, t, self.accumulator_data))
    if s.mala:
      out["acceptance"] = self._acceptance(t, u_w, w, w_new, loss_grad, precond, batch)
    if self.report_every:
      progress.tick(t, self.report_every, s.num_steps)
    return (w_new, v, acc), out

  def _norms(self, t, w, w_new, precond, loss_grad, k_noise):
    """The trace's ``distance``, ``drift_norm`` and ``noise_norm`` of step ``t``
    (:func:`sample_chain`) on every ``settings.norms_every``-th step and on the chain's last (under
    a ``lax.cond`` whose predicate is the same for every chain), NaN on the others.

    Each is a sum over every sampled weight: on a CPU the three took about a sixth of a
    pythia-14m-shaped model's step (docs/benchmarks.md). The branch draws the step's noise again
    from its key, the same numbers, rather than take it as an operand, which would be a
    parameter-sized buffer written on every step."""
    s, eps = self.settings, self.settings.step_size

    def norms(_):
      noise = langevin.scaled_noise(self.place(self.noise(k_noise, w)), precond, self.mask, eps)
      drift = jax.tree.map(lambda p, g: 0.5 * eps * p * s.nbeta * g, precond, loss_grad)
      diff = jax.tree.map(lambda a, b: a - b, w_new, self.w_star)
      named = {"distance": diff, "drift_norm": drift, "noise_norm": noise}
      return {name: jnp.sqrt(langevin.tree_dot(x, x)) for name, x in named.items()}

    if s.norms_every == 1:
      return norms(None)
    shapes = jax.eval_shape(norms, None)
    skipped = lambda _: jax.tree.map(lambda a: jnp.full(a.shape, jnp.nan, a.dtype), shapes)  # noqa: E731
    due = (t % s.norms_every == 0) | (t == s.num_steps - 1)
    return jax.lax.cond(due, norms, skipped, None)

  def _acceptance(self, t, u_w, w, w_new, loss_grad, precond, batch):
    """The MALA acceptance of the step ``w → w_new`` on every ``mala_every``-th step (under a
    ``lax.cond`` whose predicate is the same for every chain), NaN on the others.

    The branch takes ``∇L_B(w)`` and forms ``∇U(w)`` itself (as :func:`langevin.potential_and_grad`
    does): an operand of the ``cond`` is a buffer on every step, and ``∇U(w)`` as one would be a
    parameter-sized array written and read on every step for the one in ``mala_every`` that uses
    it."""
    s = self.settings

    def acceptance(_):
      grad_u = langevin.grad_potential(
        loss_grad, w, self.w_star, self.mask, s.nbeta, s.localization
      )
      u_new, _, grad_new, _ = self.potential(w_new, batch=batch)
      return langevin.mala_acceptance(
        u_w, u_new, w, w_new, grad_u, grad_new, precond, self.mask, s.step_size
      )

    if s.mala_every == 1:
      return acceptance(None)
    skipped = lambda _: jnp.full((), jnp.nan, jnp.float32)  # noqa: E731
    return jax.lax.cond(t % s.mala_every == 0, acceptance, skipped, None)


def sample_chain(
  loss_fn: Callable[[Params, Any], jax.Array],
  params_star: Params,
  data: Any,
  key: jax.Array,
  num_steps: int,
  settings: SGLDSettings,
  param_mask: Params | None = None,
  accumulator: Accumulator | None = None,
  accumulator_data: Any = None,
  star_losses: jax.Array | None = None,
  loss_at_star: bool = True,
  support: tuple[bool, ...] | None = None,
  constrain: Callable | None = None,
  report_every: int | None = None,
):
  """Runs one chain from ``w*`` for ``num_steps`` steps; returns per-step traces (each
  ``(num_steps,)``).

  Traces: ``loss`` (the minibatch loss at ``w`` *before* the step), ``loss_at_star`` (the same
  minibatch's loss at ``w*``: their difference is what the LLC averages, see
  :mod:`mechjax.slt.llc`), ``distance`` (``‖w − w*‖`` after the step), ``drift_norm``
  (``‖(ε/2)·nβ·∇L_B‖``), ``noise_norm`` (``‖√ε·ξ‖``), these three on every
  ``settings.norms_every``-th step and the last (NaN on the others), and, with ``settings.mala``,
  ``acceptance``:
  the Metropolis–Hastings acceptance probability ``min(1, exp(U(w) − U(w') + log q(w|w') − log
  q(w'|w)))`` of the proposal, with ``U = nβ·L_B + (γ/2)‖w − w*‖²`` on the step's minibatch. Values
  near 1 mean the step size is small enough for the discretisation. It costs one more gradient, so
  it is evaluated on every ``settings.mala_every``-th step (``t % mala_every == 0``) and is NaN on
  the others.

  Each step's minibatch is ``batch_size`` samples of array ``data`` drawn *with replacement* from
  the step's key, or one batch of a sampler ``data(key)``. With ``star_losses`` (``(n,)``, every
  sample's loss at ``w*``), ``loss_at_star`` is the mean of the step's batch's entries instead of
  a forward pass at ``w*``: the same number when the loss is a mean over samples
  (:func:`mechjax.slt.sgld.per_sample_star_losses`), at the cost of one pass over the data before
  the chain instead of one per step.

  With an ``accumulator``, ``accumulator.update(state, w, t, accumulator_data)`` sees every draw
  ``w`` (before step ``t``, like ``loss``), and its final state is returned as
  ``traces["accumulated"]``: memory does not grow with the number of draws.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, the mean loss of a minibatch.
    params_star: ``w*``, the chain's start and the centre of the localising prior.
    data: the training data, a pytree of arrays with the samples first, or a sampler.
    key: this chain's PRNG key.
    num_steps: steps to run (burn-in included).
    settings: the :class:`~mechjax.slt.settings.SGLDSettings`; ``nbeta`` must be set.
    param_mask: a pytree like ``params_star`` of 0/1: coordinates with 0 stay at ``w*``; or a
      :class:`~mechjax.slt.restriction.Restriction` (see :class:`Chain`).
    accumulator: an :class:`Accumulator`, or None.
    accumulator_data: passed to the accumulator.
    star_losses: ``(n,)`` per-sample losses at ``w*`` of array ``data``, or None.
    loss_at_star: False leaves the ``loss_at_star`` trace out, and with it the forward pass at
      ``w*`` on every step's batch (callers that only want the accumulator or the draws' losses).
    support: one flag per leaf of ``params_star`` (:func:`mechjax.slt.params.mask_support`): leaves
      marked False are held at ``w*`` without a gradient or noise. It must mark True every leaf
      where ``param_mask`` has a non-zero entry; the draws are those of the unrestricted call,
      noise included (each leaf keeps its key), up to the rounding of the pruned backward pass.
    constrain: see :class:`Chain`.
    report_every: see :class:`Chain`.
  """
  chain = Chain(
    loss_fn,
    params_star,
    key,
    settings,
    param_mask,
    accumulator,
    accumulator_data,
    data=data,
    star_losses=star_losses,
    loss_at_star=loss_at_star,
    support=support,
    constrain=constrain,
    report_every=report_every,
  )
  carry, traces = chain.run_steps(chain.start(), jnp.arange(num_steps))
  if accumulator is not None:
    traces["accumulated"] = carry[2]
  return traces


def _minibatch(data, sampler, key: jax.Array, batch_size: int):
  """``(batch, idx)``: ``batch_size`` samples drawn with replacement from array ``data`` (and their
  indices), or one batch of ``sampler`` (indices None)."""
  if sampler is not None:
    return sampler(key), None
  idx = jax.random.randint(key, (batch_size,), 0, jax.tree.leaves(data)[0].shape[0])
  return jax.tree.map(lambda a: a[idx], data), idx
