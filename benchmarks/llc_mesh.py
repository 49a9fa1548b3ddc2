"""The LLC of a pythia-14m-shaped model on a (chains, model) mesh of 4 CPU devices: meshes (4, 1),
(2, 2) and (1, 4), each in a fresh process.

    python -m benchmarks.llc_mesh                    # 4 chains × 20 draws, windows of 32, batch 8

The model is :class:`mechjax.models.pretrained.DecoderLM` with pythia-14m's architecture (GPT-NeoX:
6 layers, d_model 128, 4 heads, MLP 512, partial rotary 0.25, parallel residual, vocabulary 50,304,
untied unembedding; 14.1M parameters) and flax's random initialisation (key 0): no checkpoint is
read. The data are 1,024 random windows of 32 ids. Each worker makes 4 CPU devices
(``jax_num_cpu_devices``), builds the mesh, and calls ``estimate_llc(..., mesh=mesh)`` twice (the
second call reuses the compiled program, so its time is sampling alone). Its per-device memory is
the compiled program's own memory analysis (``sgld.chains_memory``: arguments, outputs and
temporaries of one device), because the 4 CPU devices share one process; the process's peak
resident memory (all devices together) is printed beside it. The estimates must agree to float
rounding, which the benchmark checks.
"""

from __future__ import annotations

import json
import os

from absl import app
from absl import flags

from benchmarks import pythia
from benchmarks import timing
from mechjax import cli

MESHES = ((4, 1), (2, 2), (1, 4))
flags.DEFINE_integer("chains", 4, "SGLD chains (a multiple of 4).")
flags.DEFINE_integer("draws", 20, "SGLD draws per chain.")
flags.DEFINE_integer("seq_len", 32, "Tokens per window.")
flags.DEFINE_integer("batch_size", 8, "Windows per SGLD step.")
flags.DEFINE_string("worker", None, "Internal: run one mesh, 'chains,model'.")
FLAGS = flags.FLAGS


def model_and_params():
  import jax
  import jax.numpy as jnp

  model = pythia.model(pythia.PYTHIA_14M)
  params = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  return model, params


def worker(chains: int, model_axis: int) -> dict:
  import jax

  jax.config.update("jax_num_cpu_devices", 4)
  import numpy as np
  from jax.sharding import Mesh

  from mechjax import slt
  from mechjax.models import pretrained
  from mechjax.slt import sgld

  model, params = model_and_params()
  loss_fn, _ = pretrained.lm_losses(model)
  windows = np.random.default_rng(1).integers(0, 50304, (1024, FLAGS.seq_len)).astype(np.int32)
  mesh = Mesh(np.array(jax.devices()).reshape(chains, model_axis), ("chains", "model"))
  settings = slt.SGLDSettings(
    num_chains=FLAGS.chains,
    num_draws=FLAGS.draws,
    step_size=1e-4,
    nbeta=30.0,
    localization=100.0,
    batch_size=FLAGS.batch_size,
  )
  run = lambda: slt.estimate_llc(  # noqa: E731
    loss_fn, params, windows, key=jax.random.key(2), settings=settings, mesh=mesh
  )
  first, sampling, res = timing.first_and_second(run)
  mem = sgld.chains_memory(
    loss_fn, params, windows, jax.random.key(2), settings.resolved(len(windows)), mesh=mesh
  )
  per_device = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
  return {
    "params": int(sum(np.size(a) for a in jax.tree.leaves(params))),
    "first_call_s": first,
    "sampling_s": sampling,
    "llc_per_chain": [float(x) for x in res.llc_per_chain],
    "device_argument_mib": mem.argument_size_in_bytes / 2**20,
    "device_total_mib": per_device / 2**20,
  }


def main(argv):
  del argv
  if FLAGS.worker:
    chains, model_axis = (int(x) for x in FLAGS.worker.split(","))
    print(json.dumps(worker(chains, model_axis)))
    return
  if FLAGS.chains % 4:
    raise app.UsageError(
      f"--chains must be a multiple of 4 (the mesh's devices); got {FLAGS.chains}"
    )
  args = [f"--{k}={getattr(FLAGS, k)}" for k in ("chains", "draws", "seq_len", "batch_size")]
  rows = {}
  for mesh in MESHES:
    wall, out = timing.run_worker("benchmarks.llc_mesh", f"--worker={mesh[0]},{mesh[1]}", *args)
    rows[mesh] = (wall, out)
    print(f"  mesh {mesh}: sampling {out['sampling_s']:.1f} s, process {wall:.1f} s", flush=True)
  import numpy as np

  n = rows[MESHES[0]][1]["params"]
  print(
    f"\npythia-14m shape, {n:,} parameters, random init; {FLAGS.chains} chains × {FLAGS.draws} "
    f"draws, batch {FLAGS.batch_size} windows of {FLAGS.seq_len}; 4 CPU devices on "
    f"{os.cpu_count()} cores\n"
  )
  print(
    f"{'(chains, model)':>16s} {'sampling (s)':>13s} {'process (s)':>12s} "
    f"{'per-device MiB (args / all)':>28s} {'process peak MiB':>17s} {'LLC mean':>9s}"
  )
  base = np.array(rows[MESHES[0]][1]["llc_per_chain"])
  for mesh, (wall, out) in rows.items():
    llc = np.array(out["llc_per_chain"])
    if not np.allclose(llc, base, rtol=1e-3):
      raise AssertionError(f"mesh {mesh}'s LLC per chain {llc} differs from {MESHES[0]}'s {base}")
    print(
      f"{str(mesh):>16s} {out['sampling_s']:13.1f} {wall:12.1f} "
      f"{out['device_argument_mib']:14.1f} / {out['device_total_mib']:11.1f} "
      f"{out['peak_rss_mib']:17.0f} {llc.mean():9.3f}"
    )


if __name__ == "__main__":
  for name in ("chains", "draws", "seq_len", "batch_size"):
    cli.positive_int(name)
  app.run(main)
