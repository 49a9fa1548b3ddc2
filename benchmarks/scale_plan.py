"""Per-device memory of the pretrained LLC study for Pythia-410m and Pythia-1.4B on one GPU and on 8
devices, from the memory analysis of the study's own program at reduced depth, for
docs/benchmarks.md "Running at scale".

    python -m benchmarks.scale_plan

Nothing is run and no checkpoint is read. For each architecture (GPT-NeoX at the checkpoints' own
widths, vocabulary 50,304, untied unembedding) the program that ``experiments.pretrained_llc``
plans with is compiled with zero weights at 1 and at 2 layers, for each number of chains and mesh
in ``ROWS``: on one CPU device for one GPU, on 8 (``jax_num_cpu_devices``) for the 8-GPU and v5e-8
plans. It is the study's sampler (:func:`mechjax.studies.llc.pretrained_llc.sampler`:
:func:`mechjax.slt.estimate_susceptibilities` with the evaluation of L and the probes) on its
largest part, the whole model (every head's and
MLP's restriction is smaller). The settings are the study's defaults with the sweeps' windows
(``launch/sweeps/pretrained_llc_8gpu.py``: 8 windows of 256 tokens per chain and step), the chains
vmapped as on an accelerator. The rule that scales it to the checkpoints' 24 layers is linear in
depth: every layer adds the same parameters, the same per-chain state and the same activations, so
``bytes(L) = bytes(1) + (L − 1)·(bytes(2) − bytes(1))``. The CPU compiler's buffer assignment is
not a GPU's or a TPU's, so the figures are a plan to check on the device, not a measurement there.
"""

from __future__ import annotations

import time

from absl import app
from absl import flags

from benchmarks import pythia
from mechjax import cli

ARCHS = {"pythia-410m": pythia.PYTHIA_410M, "pythia-1.4b": pythia.PYTHIA_1_4B}
# (model, chains, (chains axis, model axis)) on as many devices as the mesh has: a device holds
# 1 / model axis of w* and of each of its chains / chains axis chains' parameter-shaped state (the
# draw, the noise, the preconditioner), and runs those chains' batches, so the model axis is what
# lets fewer chains than devices share one chain's memory. (1, 1): one GPU.
ROWS = (
  ("pythia-410m", 4, (1, 1)),
  ("pythia-1.4b", 2, (1, 1)),
  ("pythia-410m", 8, (8, 1)),
  ("pythia-410m", 8, (2, 4)),
  ("pythia-410m", 4, (4, 2)),
  ("pythia-1.4b", 8, (8, 1)),
  ("pythia-1.4b", 4, (4, 2)),
  ("pythia-1.4b", 2, (2, 4)),
  ("pythia-1.4b", 1, (1, 8)),
)
flags.DEFINE_integer("seq_len", 256, "Tokens per window.")
flags.DEFINE_integer("batch_size", 8, "Windows per SGLD step.")
FLAGS = flags.FLAGS
GIB = 2**30


def per_device_bytes(cfg: dict, layers: int, chains: int, shape: tuple) -> tuple[int, int]:
  """``(argument bytes, all bytes)`` of one device of the study's compiled program at ``layers``
  layers, on the mesh ``shape = (chains axis, model axis)``."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh

  from mechjax import sharding
  from mechjax.studies.llc import pretrained_llc

  model = pythia.model(cfg, num_hidden_layers=layers)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32)))
  params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes["params"])
  study = pretrained_llc.Config().replace(
    seq_len=FLAGS.seq_len,
    batch_size=FLAGS.batch_size,
    num_chains=chains,
    chain_loop="vmap",
    model_axis=shape[1],
  )
  windows = np.zeros((study.num_windows, study.seq_len), np.int32)
  probes = np.zeros((study.num_probes, study.seq_len), np.int32)
  total = sum(np.size(x) for x in jax.tree.leaves(params))
  todo = pretrained_llc.parts(pretrained_llc.restrictions(study.components, model, params))
  _, largest = pretrained_llc.largest_part(todo, total)
  sample = pretrained_llc.sampler(study, model, params, windows, probes)
  # The study's mesh for ``model_axis``, given also for a model axis of 1: on CPU devices the study
  # would otherwise run a model of this size on one device (placement.chains_shard); a GPU's or a
  # TPU's run shards the chains.
  devices = np.array(jax.devices()[: shape[0] * shape[1]]).reshape(shape)
  mesh = Mesh(devices, sharding.SAMPLER_AXES)
  mem = sample(components=largest, analyze=True, mesh=mesh)
  total = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
  return mem.argument_size_in_bytes, total


def main(argv):
  del argv
  import jax

  jax.config.update("jax_num_cpu_devices", 8)

  print(
    f"batch {FLAGS.batch_size} windows of {FLAGS.seq_len} per chain, on 1 or 8 devices; "
    "per-device GiB from the study's compiled program at 1 and 2 layers, scaled linearly to 24\n"
  )
  print(
    f"{'model':>12s} {'chains':>7s} {'(chains, model)':>16s} {'1 layer':>8s} {'2 layers':>9s} "
    f"{'24 layers: w* etc. / all':>25s} {'compile (s)':>12s}"
  )
  for name, chains, (c, m) in ROWS:
    cfg = ARCHS[name]
    t = time.perf_counter()
    (a1, t1), (a2, t2) = (per_device_bytes(cfg, layers, chains, (c, m)) for layers in (1, 2))
    depth = cfg["num_hidden_layers"]
    args, total = a1 + (depth - 1) * (a2 - a1), t1 + (depth - 1) * (t2 - t1)
    print(
      f"{name:>12s} {chains:7d} {str((c, m)):>16s} {t1 / GIB:8.2f} {t2 / GIB:9.2f} "
      f"{args / GIB:12.2f} / {total / GIB:9.2f} {time.perf_counter() - t:12.0f}",
      flush=True,
    )


if __name__ == "__main__":
  for name in ("seq_len", "batch_size"):
    cli.positive_int(name)
  app.run(main)
