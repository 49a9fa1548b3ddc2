"""Devices and processes for the training core: the seed axis over the devices, a state placed on or
fetched from every process, the one writer, and multi-host start-up.

Under multi-host JAX every process runs the same program on its own devices; only process 0
writes files (:func:`is_writer`), and a state that spans processes comes back whole on every host
(:func:`fetch`), so the analysis after training runs as it does in one process.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.experimental import multihost_utils

from mechjax import sharding as sharding_lib
from mechjax.errors import InputError

State = dict


class SetupError(InputError):
  """A multi-host setting that cannot be used; the message names the environment variable."""


def is_writer() -> bool:
  """Only process 0 writes metrics, summaries and figures under multi-host JAX."""
  return jax.process_index() == 0


def initialize_distributed() -> bool:
  """Multi-host JAX, behind an environment variable: with ``MECHJAX_DISTRIBUTED=1`` this calls
  ``jax.distributed.initialize()``. On Cloud TPU and SLURM the coordinator is found automatically;
  elsewhere set ``MECHJAX_COORDINATOR`` (``host:port``), ``MECHJAX_NUM_PROCESSES`` and
  ``MECHJAX_PROCESS_ID``. Returns whether it initialised. Only process 0 writes files
  (:func:`is_writer`)."""
  if os.environ.get("MECHJAX_DISTRIBUTED", "").lower() not in ("1", "true", "yes"):
    return False
  kwargs = {}
  if os.environ.get("MECHJAX_COORDINATOR"):
    kwargs["coordinator_address"] = os.environ["MECHJAX_COORDINATOR"]
  for env, key in (
    ("MECHJAX_NUM_PROCESSES", "num_processes"),
    ("MECHJAX_PROCESS_ID", "process_id"),
  ):
    if os.environ.get(env):
      try:
        kwargs[key] = int(os.environ[env])
      except ValueError:
        raise SetupError(f"{env}={os.environ[env]!r} must be an integer") from None
  jax.distributed.initialize(**kwargs)
  return True


def host_if_multiprocess(state: State) -> State:
  """Across processes the final state comes back whole, on the host of every process, so the
  analysis that follows training (indexing a seed, evaluating on data) runs as it does in one
  process."""
  return fetch(state) if jax.process_count() > 1 else state


def seed_sharding(num_seeds: int, shard: bool | None = None):
  """A ``NamedSharding`` that splits a leading seed axis over every device (mesh axis ``"seeds"``),
  or None: :func:`mechjax.sharding.leading_axis`, the rule the SGLD chains follow too.
  ``shard=None`` shards whenever there are several devices and their number divides ``num_seeds``;
  ``True`` insists (a ValueError says why it cannot); ``False`` never shards."""
  return sharding_lib.leading_axis(num_seeds, "seeds", shard)


def state_sharding(num_seeds: int, shard: bool | None = None):
  """:func:`seed_sharding`, except that across processes an unsharded state is replicated on every
  device (a global array, which orbax can checkpoint), rather than left host-local."""
  sharding = seed_sharding(num_seeds, shard)
  if sharding is None and jax.process_count() > 1:
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("seeds",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  return sharding


def to_global(tree, sharding):
  """Places a tree that every process holds whole onto ``sharding`` (which may span processes)."""
  if jax.process_count() == 1:
    return jax.device_put(tree, sharding)
  return jax.tree.map(
    lambda x: jax.make_array_from_callback(x.shape, sharding, lambda idx, x=np.asarray(x): x[idx]),
    tree,
  )


def fetch(tree):
  """The whole of every array on the host, on every process (an all-gather when arrays span
  processes)."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  return multihost_utils.process_allgather(tree, tiled=True)
