"""Splitting a leading axis (seeds of a training run, chains of a sampler) over every device.

One rule for both: with ``shard=None`` the axis is split whenever JAX sees several devices and their
number divides the axis; ``True`` insists (a ValueError says why it cannot); ``False`` never splits.
On accelerators the devices are the chips. On a CPU there is one device unless the program asks for
one per core before JAX starts (:func:`mechjax.train.flags.cpu_cores_as_devices`), which is worth it
because XLA runs one CPU device's elementwise work on one core.

The split is one program that XLA partitions, not one program per device: every device holds its
share of the axis, and everything else (data, ``w*``) is replicated.

For a model too large to replicate, :func:`model_axis_spec` is the rule for a second mesh axis,
``model``: each parameter-shaped leaf split FSDP-style along its largest dimension that the axis
divides, small leaves replicated (:func:`model_axis_shardings` applies it to a tree). The sampler
does not use it yet.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec


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
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


MIN_MODEL_SHARDED = 4096  # entries: a smaller leaf is replicated over the model axis


def model_axis_spec(
  shape: tuple[int, ...], model_size: int, axis: str = "model", min_size: int = MIN_MODEL_SHARDED
) -> PartitionSpec:
  """How a parameter-shaped leaf of ``shape`` is split over a mesh axis ``axis`` of ``model_size``
  devices, FSDP-style: along its largest dimension that ``model_size`` divides (the first of equal
  ones), so that each device holds ``1/model_size`` of it; replicated (``PartitionSpec()``) when the
  leaf has fewer than ``min_size`` entries, or when no dimension is divisible."""
  if model_size < 1:
    raise ValueError(f"model_size must be >= 1; got {model_size}")
  if int(np.prod(shape, dtype=np.int64)) < min_size:
    return PartitionSpec()
  divisible = [d for d, n in enumerate(shape) if n % model_size == 0]
  if not divisible:
    return PartitionSpec()
  d = max(divisible, key=lambda i: (shape[i], -i))
  return PartitionSpec(*([None] * d), axis)


def model_axis_shardings(tree, mesh, axis: str = "model", min_size: int = MIN_MODEL_SHARDED):
  """A ``NamedSharding`` on ``mesh`` for every leaf of ``tree`` (arrays or shape-dtype structs) by
  :func:`model_axis_spec`, with the mesh's ``axis`` as the model axis (every leaf replicated when
  the mesh has no such axis)."""
  size = dict(zip(mesh.axis_names, mesh.axis_sizes)).get(axis)
  spec = lambda x: (  # noqa: E731
    PartitionSpec() if size is None else model_axis_spec(np.shape(x), size, axis, min_size)
  )
  return jax.tree.map(lambda x: NamedSharding(mesh, spec(x)), tree)


def compiler_options() -> dict | None:
  """The compiler options of mechjax's long-running programs: :data:`CPU_COMPILER_OPTIONS` on a
  CPU backend (see the comment above them), None elsewhere."""
  return dict(CPU_COMPILER_OPTIONS) if jax.default_backend() == "cpu" else None
