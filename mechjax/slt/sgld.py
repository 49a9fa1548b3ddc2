"""SGLD's entry points: many chains from ``w*``, or from many points, in one compiled program placed
on the devices.

The sampler is split by job:

* :mod:`mechjax.slt.settings`: :class:`SGLDSettings`, every setting of a run;
* :mod:`mechjax.slt.langevin`: the kernel, the tempered localised potential and one Langevin step
  (Lau et al. 2023, arXiv:2308.12108; Welling & Teh 2011; pSGLD, Li et al. 2016);
* :mod:`mechjax.slt.params` and :mod:`mechjax.slt.inputs`: parameter trees, and the checks of what
  a call is given;
* :mod:`mechjax.slt.chain`: one chain, a ``lax.scan`` of steps;
* :mod:`mechjax.slt.placement`: chains over devices, meshes and threads, the program caches, and
  every sample's loss at ``w*`` (:func:`~mechjax.slt.placement.per_sample_star_losses`);
* :mod:`mechjax.slt.stream`: chains on host data, a part of steps at a time;
* this module: :func:`sample_chains`, :func:`sample_points` and :func:`chains_memory`, which put
  them together.

The sampler knows nothing of what its callers compute from the draws: an accumulator
(:class:`mechjax.slt.chain.Accumulator`) is carried through the scan and updated with every draw.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from mechjax import sharding as sharding_lib
from mechjax.slt import placement
from mechjax.slt import restriction as restriction_lib
from mechjax.slt import stream
from mechjax.slt.chain import chain_keys
from mechjax.slt.chain import sample_chain
from mechjax.slt.inputs import Streamed
from mechjax.slt.inputs import check_params
from mechjax.slt.inputs import resolve_data
from mechjax.slt.langevin import MeanLoss
from mechjax.slt.langevin import langevin_step
from mechjax.slt.langevin import log_proposal
from mechjax.slt.langevin import mala_acceptance
from mechjax.slt.langevin import potential_and_grad
from mechjax.slt.langevin import rmsprop_preconditioner
from mechjax.slt.params import mask_support
from mechjax.slt.placement import over_chains_on_devices
from mechjax.slt.placement import per_sample_star_losses
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from mechjax.slt.settings import settings_from

__all__ = [
  "chains_memory",
  "sample_chains",
  "sample_points",
  # Kept importable from here, where earlier docs named them; each lives in the module of its job.
  "MeanLoss",
  "default_nbeta",
  "langevin_step",
  "log_proposal",
  "mala_acceptance",
  "over_chains_on_devices",
  "per_sample_star_losses",
  "potential_and_grad",
  "rmsprop_preconditioner",
  "sample_chain",
  "settings_from",
]


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
  it, on one CPU device, the chains are split into groups called from one thread per core
  (:func:`mechjax.slt.placement.cpu_thread_groups`), which gains about as much. The draws depend
  on the key and on the number of devices (the partitioned matmuls round differently), on nothing
  else.

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``, the mean loss of a minibatch.
    params_star: ``w*``.
    data: the training data, a pytree of arrays with the samples first, a sampler, or host data
      streamed a part at a time (:class:`mechjax.slt.inputs.Streamed`).
    key: the PRNG key; chain ``i`` uses :func:`chain_keys` ``(key, num_chains)[i]``.
    settings: the :class:`SGLDSettings`; ``nbeta`` unset means ``n / ln n`` of ``data``.
    param_mask: a pytree like ``params_star`` of 0/1: coordinates with 0 stay at ``w*``; or a
      :class:`~mechjax.slt.restriction.Restriction` (a box mask is sampled as one).
    accumulator: see :func:`sample_chain`.
    accumulator_data: see :func:`sample_chain`.
    shard: split the chains over the devices: None decides as above, False never does.
    star_losses: ``(n,)`` per-sample losses at ``w*``
      (:func:`mechjax.slt.placement.per_sample_star_losses`), or None; see :func:`sample_chain`.
    mesh: a ``jax.sharding.Mesh`` with axes ``chains`` and ``model``
      (:func:`mechjax.sharding.sampler_mesh`): the chains split over ``chains``, ``w*`` and every
      chain's parameter-shaped arrays over ``model``; ``shard`` is then not used. None: as above.
    analyze: compile without running, and return the program's memory analysis instead
      (:func:`chains_memory`).
  """
  check_params(params_star)
  settings, sampler = resolve_data(settings, data, loss_fn, params_star)
  settings = placement.with_chain_loop(settings, params_star)
  source = None if sampler is not None else data
  keys = chain_keys(key, settings.num_chains)
  param_mask, support = _restricted(params_star, param_mask)
  if mesh is not None:
    mesh = sharding_lib.sampler_mesh(mesh, settings.num_chains)
    params_star, param_mask = sharding_lib.place((params_star, param_mask), mesh)
  if isinstance(data, Streamed):
    if analyze:
      raise ValueError(
        "chains_memory measures the in-memory program; pass the arrays, not Streamed data"
      )
    return placement.over_chains_on_devices(
      settings.num_chains,
      lambda layout, per: stream.StreamedRun(
        loss_fn,
        dataclasses.replace(settings, num_chains=per),
        accumulator,
        layout,
        support,
        param_mask is not None,
      ),
      lambda program, part: program(
        params_star, data, keys[part], param_mask, accumulator_data, star_losses
      ),
      shard,
      mesh=mesh,
      size=placement.float_size(params_star),
    )
  return placement.over_chains_on_devices(
    settings.num_chains,
    lambda layout, per: placement.chains_program(
      loss_fn,
      dataclasses.replace(settings, num_chains=per),
      param_mask is not None,
      accumulator,
      layout,
      sampler,
      star_losses is not None,
      support,
    ),
    lambda program, part: program(
      params_star, source, keys[part], param_mask, accumulator_data, star_losses
    ),
    shard,
    mesh=mesh,
    analyze=analyze,
    size=placement.float_size(params_star),
  )


def chains_memory(loss_fn, params_star, data, key: jax.Array, settings: SGLDSettings, **kwargs):
  """The per-device memory of :func:`sample_chains`' compiled program for these arguments
  (``jax.stages.Compiled.memory_analysis()``: argument, output and temporary bytes), compiled but
  not run; the keywords are :func:`sample_chains`'. With a ``mesh`` it shows what the model axis
  saves, and at a reduced size it is the basis of a plan for a larger model
  (docs/benchmarks.md, "Running at scale")."""
  return sample_chains(loss_fn, params_star, data, key, settings, analyze=True, **kwargs)


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
  settings = placement.with_chain_loop(settings, jax.tree.map(lambda a: a[0], params_stack))
  c = settings.num_chains
  flat_keys = jax.vmap(lambda k: chain_keys(k, c))(keys).reshape(num_points * c, *keys.shape[1:])
  points = jnp.repeat(jnp.arange(num_points), c)
  source = None if sampler is not None else data
  param_mask, support = _restricted(point0, param_mask)
  if mesh is not None:
    mesh = sharding_lib.sampler_mesh(mesh, num_points * c)
    params_stack = sharding_lib.place(params_stack, mesh, lead=1)
    param_mask = sharding_lib.place(param_mask, mesh)
  traces = placement.over_chains_on_devices(
    num_points * c,
    lambda layout, per: placement.points_program(
      loss_fn,
      settings,
      param_mask is not None,
      layout,
      sampler,
      star_losses is not None,
      support,
    ),
    lambda program, part: program(
      params_stack, source, flat_keys[part], points[part], param_mask, star_losses
    ),
    shard,
    mesh=mesh,
    size=placement.float_size(point0),
  )
  return jax.tree.map(lambda a: a.reshape(num_points, c, *a.shape[1:]), traces)


def _restricted(params_star, param_mask):
  """``(param_mask, support)`` for the programs: a restriction, or a mask whose non-zero entries
  fill a box in each leaf, which becomes a :class:`~mechjax.slt.restriction.Restriction` (the
  chains then carry the boxes only); any other mask stays a mask, with the leaves it touches as its
  support."""
  if isinstance(param_mask, restriction_lib.Restriction):
    return param_mask, None
  restricted = restriction_lib.from_mask(params_star, param_mask)
  if restricted is not None:
    return restricted, None
  return param_mask, mask_support(params_star, param_mask)
