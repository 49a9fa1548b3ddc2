"""Splitting a leading axis (seeds of a training run, chains of a sampler) over every device.

One rule for both: with ``shard=None`` the axis is split whenever JAX sees several devices and their
number divides the axis; ``True`` insists (a ValueError says why it cannot); ``False`` never splits.
On accelerators the devices are the chips. On a CPU there is one device unless the program asks for
one per core before JAX starts (:func:`mechjax.use_all_cpu_cores`), which is worth it
because XLA runs one CPU device's elementwise work on one core.

The split is one program that XLA partitions, not one program per device: every device holds its
share of the axis, and everything else (data, ``w*``) is replicated.

For a model too large to replicate, the SLT calls take a two-axis mesh (:func:`sampler_mesh`):
``chains`` splits the chains as above, and ``model`` splits every parameter-shaped array FSDP-style
(:func:`model_axis_spec`): each leaf along its largest dimension that the axis divides, small leaves
replicated. Each device then holds ``1/model`` of ``w*``, of every chain's draw, noise and
preconditioner state; XLA gathers a leaf where the loss needs it whole.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec

from mechjax.errors import InputError


def leading_axis(size: int, name: str, shard: bool | None = None) -> NamedSharding | None:
  """A ``NamedSharding`` that splits axis 0 of an array of ``size`` rows over all devices (a
  one-axis ``Mesh`` whose axis is ``name``), or None to keep it on one device; see the module
  docstring."""
  devices = jax.devices()
  if shard is False or len(devices) < 2:
    return None
  if size % len(devices):
    if shard:
      raise ValueError(
        f"cannot shard {size} {name} over {len(devices)} devices: the device count must divide "
        f"the number of {name}"
      )
    return None
  return NamedSharding(Mesh(np.array(devices), (name,)), PartitionSpec(name))


def replicated(sharding: NamedSharding) -> NamedSharding:
  """The same mesh, with every array whole on every device."""
  return NamedSharding(sharding.mesh, PartitionSpec())


def along(sharding: NamedSharding, axis: int) -> NamedSharding:
  """The same mesh, split along ``axis`` instead of axis 0 (outputs with the split axis
  elsewhere)."""
  return NamedSharding(sharding.mesh, PartitionSpec(*([None] * axis), *sharding.spec))


# XLA's CPU compiler hands dots and reductions to YNNPACK ("ynn fusions"). When one process runs
# such a program on two CPU devices (or from two threads) at once, its resident memory grows for as
# long as the program runs: about 10 MB/s for the SGLD chains of the induction study's
# transformer, 7 GB after an 8 × 600 susceptibility run, with glibc malloc and with jemalloc alike.
# Without the YNN fusions it stays flat, at a cost of about a tenth of the speed on that workload.
# A program that runs alone (one CPU device, called from one thread) stays flat with them, and is
# faster: it keeps XLA's defaults (``compiler_options(concurrent=False)``).
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


# Entries: a smaller leaf is replicated over the model axis (splitting it saves less memory than
# its gathers cost). Read when a program is built, so a test can lower it to shard tiny models.
MIN_MODEL_SHARDED = 4096


def model_axis_spec(
  shape: tuple[int, ...], model_size: int, axis: str = "model", min_size: int | None = None
) -> PartitionSpec:
  """How a parameter-shaped leaf of ``shape`` is split over a mesh axis ``axis`` of ``model_size``
  devices, FSDP-style: along its largest dimension that ``model_size`` divides (the first of equal
  ones), so that each device holds ``1/model_size`` of it; replicated (``PartitionSpec()``) when the
  leaf has fewer than ``min_size`` entries (default :data:`MIN_MODEL_SHARDED`), or when no
  dimension is divisible."""
  if model_size < 1:
    raise ValueError(f"model_size must be >= 1; got {model_size}")
  min_size = MIN_MODEL_SHARDED if min_size is None else min_size
  if model_size == 1 or int(np.prod(shape, dtype=np.int64)) < min_size:
    return PartitionSpec()
  divisible = [d for d, n in enumerate(shape) if n % model_size == 0]
  if not divisible:
    return PartitionSpec()
  d = max(divisible, key=lambda i: (shape[i], -i))
  return PartitionSpec(*([None] * d), axis)


def model_axis_shardings(
  tree, mesh, axis: str = "model", min_size: int | None = None, lead: int = 0
):
  """A ``NamedSharding`` on ``mesh`` for every leaf of ``tree`` (arrays or shape-dtype structs) by
  :func:`model_axis_spec`, with the mesh's ``axis`` as the model axis (every leaf replicated when
  the mesh has no such axis). The first ``lead`` axes of every leaf (a stack of points, or of
  components' masks) are never split: the rule applies to the rest."""
  size = dict(zip(mesh.axis_names, mesh.axis_sizes)).get(axis)

  def spec(x):
    shape = np.shape(x)
    if size is None or len(shape) < lead:
      return PartitionSpec()
    inner = model_axis_spec(shape[lead:], size, axis, min_size)
    return PartitionSpec(*([None] * lead), *inner) if inner else PartitionSpec()

  return jax.tree.map(lambda x: NamedSharding(mesh, spec(x)), tree)


SAMPLER_AXES = ("chains", "model")


def sampler_mesh(mesh: Mesh, num_chains: int | None = None) -> Mesh:
  """``mesh`` checked for the SLT calls and put in the form ``(chains, model)``: its axes must be
  named ``chains`` and ``model`` (either may be absent, meaning size 1, and in either order), and
  ``chains`` must divide ``num_chains``. Chains (and points × chains) are split over ``chains``;
  every parameter-shaped array over ``model`` (:func:`model_axis_spec`)."""
  if not isinstance(mesh, Mesh):
    raise TypeError(f"mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}")
  names = tuple(mesh.axis_names)
  if not names or set(names) - set(SAMPLER_AXES) or len(set(names)) != len(names):
    raise ValueError(
      f"mesh axes must be named 'chains' and 'model' (either may be left out); got {names}"
    )
  order = [names.index(n) for n in SAMPLER_AXES if n in names]
  sizes = dict(zip(names, mesh.devices.shape))
  devices = np.transpose(mesh.devices, order).reshape(sizes.get("chains", 1), sizes.get("model", 1))
  out = Mesh(devices, SAMPLER_AXES)
  if num_chains is not None and num_chains % devices.shape[0]:
    raise ValueError(
      f"the mesh's chains axis ({devices.shape[0]} devices) must divide the {num_chains} chains"
    )
  return out


def devices_mesh(model_axis: int, num_chains: int) -> Mesh | None:
  """Every device in a ``(chains, model)`` mesh with ``model_axis`` devices on the model axis, for a
  study's ``--model_axis``; None for 1 (the SLT calls then split only the chains, as without a
  mesh). Refuses, in one line, a model axis that does not divide the devices, or that leaves a
  chains axis that does not divide ``num_chains``."""
  if model_axis == 1:
    return None
  devices = jax.devices()
  if model_axis < 1 or len(devices) % model_axis or num_chains % (len(devices) // model_axis):
    cpu = (
      "; on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N devices"
      if devices[0].platform == "cpu"
      else ""
    )
    raise InputError(
      f"model_axis={model_axis} must divide the {len(devices)} devices and leave a chains axis "
      f"that divides the {num_chains} chains{cpu}"
    )
  return Mesh(np.array(devices).reshape(-1, model_axis), SAMPLER_AXES)


def model_size(mesh: Mesh | None, axis: str = "model") -> int:
  """The size of ``mesh``'s model axis, 1 without a mesh or without such an axis."""
  if mesh is None:
    return 1
  return dict(zip(mesh.axis_names, mesh.axis_sizes)).get(axis, 1)


def place(tree, mesh: Mesh | None, lead: int = 0):
  """``tree``'s arrays put on ``mesh`` by :func:`model_axis_shardings` (every leaf split over the
  model axis or replicated); unchanged without a mesh."""
  if mesh is None:
    return tree
  return jax.device_put(tree, model_axis_shardings(tree, mesh, lead=lead))


class ModelConstraint:
  """Constraints for the arrays of a chain's step over a mesh's ``model`` axis (FSDP-style):
  called on a parameter-shaped tree, each leaf to :func:`model_axis_spec`; :meth:`batch` splits a
  step's batch along its samples over the same axis, so that the devices of the model axis share a
  chain's forward and backward pass (each on its part of the batch, the parameters gathered)
  instead of each repeating it."""

  def __init__(self, size: int):
    self.size = size

  def __call__(self, tree):
    return jax.tree.map(
      lambda x: jax.lax.with_sharding_constraint(x, model_axis_spec(np.shape(x), self.size)), tree
    )

  def batch(self, tree):
    """Every leaf split along axis 0 over the model axis, when the axis divides it."""

    def split(x):
      shape = np.shape(x)
      if not shape or shape[0] % self.size:
        return x
      return jax.lax.with_sharding_constraint(x, PartitionSpec("model"))

    return jax.tree.map(split, tree)


def model_constraint(mesh: Mesh | None) -> ModelConstraint | None:
  """The :class:`ModelConstraint` of ``mesh``'s model axis, for use inside a program over that mesh
  (a chain's draw, noise, preconditioner state and batch, under ``vmap`` or ``lax.map`` over the
  chains); None when the model axis has size 1, where there is nothing to split."""
  size = model_size(mesh)
  return None if size == 1 else ModelConstraint(size)


def compiler_options(concurrent: bool = True) -> dict | None:
  """The compiler options of mechjax's long-running programs: :data:`CPU_COMPILER_OPTIONS` on a
  CPU backend for a program that runs on several CPU devices or from several threads at once (see
  the comment above them); None (XLA's defaults) elsewhere, and for a program that runs ``alone``
  on one CPU device from one thread (``concurrent=False``), whose memory the fusions leave flat."""
  return dict(CPU_COMPILER_OPTIONS) if concurrent and jax.default_backend() == "cpu" else None
