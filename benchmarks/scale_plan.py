"""Per-device memory of the LLC sampler for Pythia-410m and Pythia-1.4B on 8 devices, from the
compiled program's memory analysis at reduced depth, for docs/benchmarks.md "Running at scale".

    python -m benchmarks.scale_plan                # about 17 minutes on 2 cores

Nothing is run and no checkpoint is read: for each architecture (GPT-NeoX at the checkpoints' own
widths, vocabulary 50,304, untied unembedding) the sampler's program (``sgld.chains_memory``:
``estimate_llc``'s chains with a forward pass at ``w*`` per step) is compiled for 8 CPU devices
(``jax_num_cpu_devices``) with zero weights at 1 and at 2 layers, for each number of chains and
mesh in ``ROWS``. The rule that
scales it to the checkpoint's 24 layers is linear in depth: every layer adds the same parameters,
the same per-chain state and the same activations, so ``bytes(L) = bytes(1) + (L − 1)·(bytes(2) −
bytes(1))``. The chains are vmapped (``chain_loop="vmap"``, what an accelerator runs); 8 windows of
256 tokens per chain and step, 1,024 windows. The CPU compiler's buffer assignment is not a
GPU's or a TPU's, so the figures are a plan to check on the device, not a measurement there.
"""

from __future__ import annotations

import time

from absl import app
from absl import flags

from benchmarks import pythia
from mechjax import cli

ARCHS = {"pythia-410m": pythia.PYTHIA_410M, "pythia-1.4b": pythia.PYTHIA_1_4B}
# (model, chains, (chains axis, model axis)): a device holds chains / 8 of a chain's
# parameter-shaped state (w*, the draw, the noise, the preconditioner) and runs chains / 8 of a
# chain's batch, so the model axis is what lets fewer chains than devices share one chain's memory.
ROWS = (
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


def per_device_bytes(cfg: dict, layers: int, chains: int, mesh) -> tuple[int, int]:
  """``(argument bytes, all bytes)`` of one device of the compiled sampler at ``layers`` layers."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from mechjax import slt
  from mechjax.models import pretrained
  from mechjax.slt import sgld

  model = pythia.model(cfg, num_hidden_layers=layers)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32)))
  params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes["params"])
  loss_fn, _ = pretrained.lm_losses(model)
  windows = np.zeros((1024, FLAGS.seq_len), np.int32)
  settings = slt.SGLDSettings(
    num_chains=chains,
    num_draws=100,
    step_size=1e-5,
    nbeta=100.0,
    localization=100.0,
    batch_size=FLAGS.batch_size,
    chain_loop="vmap",
  )
  mem = sgld.chains_memory(loss_fn, params, windows, jax.random.key(0), settings, mesh=mesh)
  total = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
  return mem.argument_size_in_bytes, total


def main(argv):
  del argv
  import jax

  jax.config.update("jax_num_cpu_devices", 8)
  import numpy as np
  from jax.sharding import Mesh

  print(
    f"batch {FLAGS.batch_size} windows of {FLAGS.seq_len} per chain, 8 devices; "
    "per-device GiB from the compiled program at 1 and 2 layers, scaled linearly to 24\n"
  )
  print(
    f"{'model':>12s} {'chains':>7s} {'(chains, model)':>16s} {'1 layer':>8s} {'2 layers':>9s} "
    f"{'24 layers: w* etc. / all':>25s} {'compile (s)':>12s}"
  )
  for name, chains, (c, m) in ROWS:
    cfg = ARCHS[name]
    mesh = Mesh(np.array(jax.devices()).reshape(c, m), ("chains", "model"))
    t = time.perf_counter()
    (a1, t1), (a2, t2) = (per_device_bytes(cfg, layers, chains, mesh) for layers in (1, 2))
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
