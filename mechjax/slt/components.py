"""The sampling programs of :func:`mechjax.slt.susceptibility.estimate_susceptibilities`: every
component's chains in one compiled program, in memory or on data streamed from the host, each
streaming the moments of ``(φ, ΔL)`` (:mod:`mechjax.slt.moments`).

A component is a :class:`~mechjax.slt.restriction.Restriction` (a head, an MLP, or the whole
model), or a 0/1 mask over the parameters. In memory, restrictions and masks of boxes are sampled by
:func:`restricted_program`: each component's chains carry its boxes' weights only, and components
of one shape (the heads of a layer) are one loop of the program. Other masks, and every component
on streamed data, are sampled full-size, the mask multiplying the step
(:func:`components_program`): the chains sample only where the mask is 1
(:func:`mechjax.slt.params.mask_support` prunes the leaves it holds at ``w*``); components of
different supports are branches (``lax.switch``) of one program under ``lax.map``, and under
``vmap``, or on streamed data, they share the union of the supports.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import sharding
from mechjax.slt import chain as chain_lib
from mechjax.slt import langevin
from mechjax.slt import params as params_lib
from mechjax.slt import placement
from mechjax.slt import progress
from mechjax.slt import restriction as restriction_lib
from mechjax.slt import stream
from mechjax.slt.inputs import Streamed
from mechjax.slt.moments import SegmentedMoments
from mechjax.slt.settings import SGLDSettings

SEGMENTS = 20  # batches per chain for χ's batch-means ESS (as in susceptibility.batch_means_error)


def component_masks(components: dict, params, s: SGLDSettings):
  """``(masks, branch, supports)``: the components' 0/1 masks stacked, each component's branch of
  the program, and the branches' supports (the leaves they move). Components whose masks share a
  support share a branch, whose backward pass skips what none of those leaves needs
  (:func:`mechjax.slt.sgld.mask_support`); vmapped chains would run every branch, so they get
  one."""
  ones = jax.tree.map(jnp.ones_like, params)
  masks = []
  for name, mask in components.items():
    if isinstance(mask, restriction_lib.Restriction):
      mask = mask.mask(params)
    if mask is not None and jax.tree.structure(mask) != jax.tree.structure(params):
      raise ValueError(
        f"the mask of component {name!r} must be a pytree with the structure of params"
      )
    masks.append(
      ones if mask is None else jax.tree.map(lambda m, p: jnp.asarray(m, p.dtype), mask, params)
    )
  supports = [
    params_lib.mask_support(params, m)
    or tuple(params_lib.is_float_leaf(a) for a in jax.tree.leaves(params))
    for m in masks
  ]
  if placement.chain_loop(s) == "vmap":
    supports = [tuple(map(any, zip(*supports)))] * len(supports)
  distinct = tuple(dict.fromkeys(supports))
  branch = jnp.asarray([distinct.index(x) for x in supports], jnp.int32)
  return jax.tree.map(lambda *m: jnp.stack(m), *masks), branch, distinct


def component_restrictions(components: dict, params):
  """``(starts, groups)`` when every component is a :class:`~mechjax.slt.restriction.Restriction`,
  None (the whole model) or a mask of boxes (:func:`mechjax.slt.restriction.from_mask`); else None.
  ``starts`` is ``(components, leaves, width)``, every box's corner; ``groups`` pairs each
  distinct set of box extents with the components that have it (restrictions of one shape, such as
  the heads of one layer, share a loop of one program)."""
  rs = []
  for mask in components.values():
    if mask is None:
      rs.append(restriction_lib.whole(params))
    elif isinstance(mask, restriction_lib.Restriction):
      rs.append(mask)
    else:
      rs.append(restriction_lib.from_mask(params, mask))
      if rs[-1] is None:
        return None
  width = max(np.shape(r.starts)[1] for r in rs)
  starts = np.zeros((len(rs), len(rs[0].sizes), width), np.int32)
  groups: dict[tuple, list[int]] = {}
  for c, r in enumerate(rs):
    starts[c, :, : np.shape(r.starts)[1]] = np.asarray(r.starts)
    groups.setdefault(r.sizes, []).append(c)
  return starts, tuple((sizes, tuple(idx)) for sizes, idx in groups.items())


def programs(per_sample_loss, s: SGLDSettings, evaluation, sampler, data, components, params, mesh):
  """``(build, arguments)`` for :func:`mechjax.slt.placement.over_chains_on_devices`: how
  :func:`mechjax.slt.susceptibility.estimate_susceptibilities` samples ``components`` (``params``
  already placed on ``mesh``). In memory, restrictions and masks of boxes go to
  :func:`restricted_program`, the chains carrying the boxes only; other masks to
  :func:`components_program`; on streamed data every component is a mask on the union of the
  supports (:class:`StreamedComponents`: the carries must have one shape). ``arguments(params,
  keys, observe_data)`` are the program's."""
  per = lambda n: dataclasses.replace(s, num_chains=n)  # noqa: E731
  source = None if sampler is not None else data
  if not isinstance(data, Streamed):
    restricted = component_restrictions(components, params)
    if restricted is not None:
      starts, groups = restricted
      return (
        lambda layout, n: restricted_program(
          per_sample_loss, per(n), evaluation, layout, sampler, groups
        ),
        lambda params, keys, od: (params, source, keys, starts, od),
      )
  masks, branch, distinct = component_masks(components, params, s)
  masks = sharding.place(masks, mesh, lead=1)
  if isinstance(data, Streamed):
    union = (tuple(map(any, zip(*distinct))),)
    return (
      lambda layout, n: StreamedComponents(per_sample_loss, per(n), evaluation, layout, union),
      lambda params, keys, od: (params, data, keys, masks, od),
    )
  return (
    lambda layout, n: components_program(
      per_sample_loss, per(n), evaluation, layout, sampler, distinct
    ),
    lambda params, keys, od: (params, source, keys, (masks, branch), od),
  )


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """How a chain evaluates ``(φ, ΔL)``: the extra observables, every how many draws after burn-in
  (1: each draw), and in pieces of how many evaluation samples (None: all at once). Hashable, so
  equal evaluations share one program."""

  observable: Callable | None = None
  every: int = 1
  chunk: int | None = None


@dataclasses.dataclass(frozen=True)
class ComponentObserve:
  """``(φ, ΔL)`` at a draw: the evaluation-subset loss change (and the extra observables), and every
  probe's shift ``ℓ_i − L``. Hashable by its functions, so equal calls share one program. With
  ``chunk``, ``L`` is evaluated ``chunk`` samples at a time (:func:`chunked_mean`)."""

  per_sample_loss: Callable
  observable: Callable | None
  chunk: int | None = None

  def __call__(self, w, od):
    eval_loss = chunked_mean(self.per_sample_loss, w, od["eval"], self.chunk)
    probe = self.per_sample_loss(w, od["probes"]).reshape(-1)
    phi = (eval_loss - od["eval_loss_star"])[None]
    if self.observable is not None:
      phi = jnp.concatenate(
        [phi, jnp.asarray(self.observable(w, od["extra"]), phi.dtype).reshape(-1)]
      )
    return phi, probe - eval_loss


def chunked_mean(per_sample_loss, w, batch, chunk: int | None) -> jax.Array:
  """The mean of ``per_sample_loss(w, batch)``, evaluated ``chunk`` samples at a time under a
  ``lax.map`` (and the rest in one more call) so that one piece's activations are live at a time:
  the mean of the whole batch, to rounding. None, or a batch of at most ``chunk``: all at once."""
  n = jax.tree.leaves(batch)[0].shape[0]
  if chunk is None or n <= chunk:
    return jnp.mean(per_sample_loss(w, batch))
  full = n // chunk
  head = jax.tree.map(lambda a: a[: full * chunk], batch)
  total = langevin.batch_loss(langevin.MeanLoss(per_sample_loss), w, head, chunk) * (full * chunk)
  if n > full * chunk:
    rest = jax.tree.map(lambda a: a[full * chunk :], batch)
    total = total + jnp.mean(per_sample_loss(w, rest)) * (n - full * chunk)
  return total / n


def chain_parts(per_sample_loss, evaluation: Evaluation, settings: SGLDSettings):
  """What every component's chain runs on: the SGLD loss (the mean of ``per_sample_loss``) and the
  accumulator of the ``(φ, ΔL)`` moments of every ``evaluation.every``-th draw after burn-in."""
  observe = ComponentObserve(per_sample_loss, evaluation.observable, evaluation.chunk)
  observed = -(-settings.num_draws // evaluation.every)
  segments = SEGMENTS if observed >= 2 * SEGMENTS else 2
  accumulator = SegmentedMoments(
    observe, settings.num_burnin, settings.num_draws, segments, evaluation.every
  )
  return langevin.MeanLoss(per_sample_loss), accumulator


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def components_program(
  per_sample_loss, settings: SGLDSettings, evaluation, layout, sampler=None, supports=(None,)
):
  """Every component's chains in one program. ``supports`` are the distinct supports of the
  components' masks (:func:`mechjax.slt.sgld.mask_support`); the masks come with the index of
  their support, and each support is a branch (``lax.switch``) with its own pruned backward
  pass."""
  loss_fn, accumulator = chain_parts(per_sample_loss, evaluation, settings)

  def run(params, data, keys, masks_and_branch, observe_data):
    source = data if sampler is None else sampler
    how = placement.chain_loop(settings)

    def chains(support, mask):
      chain = lambda k: chain_lib.sample_chain(
        loss_fn,
        params,
        source,
        k,
        settings.num_steps,
        settings,
        mask,
        accumulator,
        observe_data,
        loss_at_star=False,
        support=support,
        constrain=sharding.model_constraint(layout),
        report_every=progress.ticks(settings.num_steps),
      )["accumulated"]
      return placement.over_chains(chain, how, keys)

    def component(mask, branch):
      if len(supports) == 1:
        return chains(supports[0], mask)
      branches = [functools.partial(chains, support) for support in supports]
      return jax.lax.switch(branch, branches, mask)

    return placement.over_chains(component, how, *masks_and_branch)

  return placement.jit_over_chains(
    run, layout, chain_axis=1
  )  # outputs are (components, chains, ...)


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def restricted_program(
  per_sample_loss, settings: SGLDSettings, evaluation, layout, sampler, groups
):
  """Every component's chains in one program, each carrying its restriction's boxes only:
  ``groups`` (:func:`component_restrictions`) are loops of the program, one per set of box
  extents, over their components' corners; the outputs come back in the components' order."""
  loss_fn, accumulator = chain_parts(per_sample_loss, evaluation, settings)
  order = np.argsort(np.concatenate([idx for _, idx in groups]))

  def run(params, data, keys, starts, observe_data):
    source = data if sampler is None else sampler
    how = placement.chain_loop(settings)

    def chains(sizes, corner):
      restricted = restriction_lib.Restriction(sizes, corner)
      chain = lambda k: chain_lib.sample_chain(  # noqa: E731
        loss_fn, params, source, k, settings.num_steps, settings, restricted, accumulator,
        observe_data, loss_at_star=False, constrain=sharding.model_constraint(layout),
        report_every=progress.ticks(settings.num_steps),
      )["accumulated"]  # fmt: skip
      return placement.over_chains(chain, how, keys)

    outs = [
      placement.over_chains(functools.partial(chains, sizes), how, starts[np.asarray(idx)])
      for sizes, idx in groups
    ]
    return jax.tree.map(lambda *o: jnp.concatenate(o)[order], *outs)

  return placement.jit_over_chains(run, layout, chain_axis=1)  # (components, chains, ...)


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def streamed_programs(per_sample_loss, settings: SGLDSettings, evaluation, layout, supports):
  """:func:`components_program` for data streamed from the host (:mod:`mechjax.slt.stream`): a
  program for the chains' first carries, ``(components, chains, ...)``, and one for a part of
  steps on gathered batches, shared by every component (their chains have the same keys). One
  support for all the components (the carries must have one shape)."""
  loss_fn, accumulator = chain_parts(per_sample_loss, evaluation, settings)
  how, (support,) = placement.chain_loop(settings), supports

  def start(params, keys, masks, observe_data):
    place = sharding.model_constraint(layout) or (lambda tree: tree)
    first = lambda mask: chain_lib.chain_start(  # noqa: E731
      params, mask, support, accumulator, observe_data, place, settings.rmsprop is not None
    )
    return placement.over_chains(lambda mask: jax.vmap(lambda _: first(mask))(keys), how, masks)

  def part(params, keys, carry, steps, batches, masks, observe_data):
    def chain(mask, key, carry, batches):
      return chain_lib.Chain(
        loss_fn, params, key, settings, mask, accumulator, observe_data,
        loss_at_star=False, support=support, constrain=sharding.model_constraint(layout),
        report_every=progress.ticks(settings.num_steps),
      ).run_steps(carry, steps, batches)[0]  # fmt: skip

    per_component = lambda mask, carry: placement.over_chains(  # noqa: E731
      functools.partial(chain, mask), how, keys, carry, batches
    )
    return placement.over_chains(per_component, how, masks, carry)

  return (
    placement.jit_over_chains(start, layout, chain_axis=1, num_args=4, split_args=(1,)),
    placement.jit_over_chains(
      part, layout, chain_axis=1, num_args=7, split_args=(1, 2, 4), split_axes={2: 1}
    ),
  )


class StreamedComponents:
  """Every component's chains on :class:`mechjax.slt.stream.Streamed` data, in parts of steps
  (:func:`mechjax.slt.stream.run_parts`); called like :func:`components_program`'s program with
  the stacked masks, it returns the same ``(components, chains)`` moments."""

  def __init__(self, per_sample_loss, settings, evaluation, layout, supports):
    self.settings = settings
    self.start, self.part = streamed_programs(
      per_sample_loss, settings, evaluation, layout, supports
    )

  def __call__(self, params, streamed, keys, masks, observe_data):
    def part(carry, steps, batches, _):
      return self.part(params, keys, carry, steps, batches, masks, observe_data), None

    first = self.start(params, keys, masks, observe_data)
    carry, _ = stream.run_parts(streamed, keys, self.settings, first, part)
    return carry[2]
