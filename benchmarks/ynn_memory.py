"""A reproducer of the resident-memory growth that XLA's YNNPACK fusions cause on a CPU when one
process runs a program on two CPU devices, and the decision it supports (mechjax.sharding's
``CPU_COMPILER_OPTIONS``).

    python -m benchmarks.ynn_memory                      # 60 s per worker, 6 workers

Each worker is a fresh process with two CPU devices (``jax_num_cpu_devices``) that calls one jitted
program over and over for ``--seconds``, reading its own resident memory (``/proc/self/statm``),
and reports the growth from the end of the first 10 s to the end (MB/s). Four programs, each
compiled with XLA's defaults (the YNN fusions on) and with
``xla_cpu_experimental_ynn_fusion_type=""`` (off):

* ``matmul``: a ``shard_map`` over both devices of a ``lax.scan`` of 256 steps of ``x ←
  tanh(x @ W)`` (128 × 128 float32 per device): the smallest program with dots on two devices;
* ``sgld``: :func:`mechjax.slt.sgld.sample_chains` on the attention-only transformer of
  :mod:`benchmarks.attention_workload` (4 chains × 100 steps, batch 32), split over the two
  devices, as the sampler runs it;
* ``chi``: :func:`mechjax.slt.estimate_susceptibilities` of the same model's per-token losses on 64
  probe sequences (960 tokens), the full model and its 8 heads' weight restrictions, batch 64, as
  the induction study runs it: the program whose growth (7 GB after an 8 × 600 run of that study)
  made mechjax turn the fusions off;
* ``llc``: :func:`mechjax.slt.estimate_llc` with its defaults at 16 chains × 5,000 draws on the
  37,184-parameter next-token model of :mod:`benchmarks.llc_vs_devinterp` (its weights and data),
  the chains split over the two devices: the LLC benchmark's call, five times longer (about 90 s;
  run it with ``--program=llc --seconds=1``), which the fusions would make about 1.3× faster;
* ``study``: that run itself, :mod:`benchmarks.susceptibility_vs_devinterp`'s mechjax worker at 8
  chains × 600 draws on the induction study's trained transformer (one call takes minutes; run it
  with ``--program=study --seconds=1``, which makes one call).

The resident memory is read every 2 s from a thread, so a long call shows its growth as it runs.

A growth that is there with the fusions and not without them is the defect; the output is what an
upstream report needs (the jax and jaxlib versions, the program, the rates).
"""

from __future__ import annotations

import json
import os
import threading
import time

from absl import app
from absl import flags

from benchmarks import timing
from mechjax import cli
from mechjax.slt.settings import SGLDSettings

WORKLOADS = ("matmul", "sgld", "chi", "llc", "study")
flags.DEFINE_integer("seconds", 60, "How long each worker calls its program.")
flags.DEFINE_multi_enum(
  "program", ["matmul", "sgld", "chi"], WORKLOADS, "The programs to run (study: see above)."
)
flags.DEFINE_string("run_one", None, "Internal: 'program,ynn' with ynn 'on' or 'off' (a worker).")
FLAGS = flags.FLAGS
WARMUP_S = 10.0


def resident_mb() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def program(workload: str, options: dict):
  """A no-argument function that runs the workload once and blocks until it is done."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh
  from jax.sharding import PartitionSpec as P

  mesh = Mesh(np.array(jax.devices()), ("d",))
  if workload == "matmul":
    w = jax.random.normal(jax.random.key(0), (128, 128)) / 12
    x = jax.random.normal(jax.random.key(1), (2 * 128, 128))

    def body(x, w):
      return jax.lax.scan(lambda x, _: (jnp.tanh(x @ w), None), x, None, length=256)[0]

    run = jax.jit(
      jax.shard_map(body, mesh=mesh, in_specs=(P("d"), P()), out_specs=P("d")),
      compiler_options=options,
    )
    return lambda: jax.block_until_ready(run(x, w))
  if workload == "study":
    import tempfile

    from benchmarks import susceptibility_vs_devinterp
    from mechjax import sharding

    sharding.CPU_COMPILER_OPTIONS.clear()
    sharding.CPU_COMPILER_OPTIONS.update(options)
    inputs = susceptibility_vs_devinterp.make_inputs(susceptibility_vs_devinterp.study_config())
    out = os.path.join(tempfile.mkdtemp(), "chi.npz")
    return lambda: susceptibility_vs_devinterp.run_mechjax(inputs, 8, 600, out)
  if workload == "llc":
    import warnings

    from benchmarks import llc_vs_devinterp as bench
    from mechjax import sharding
    from mechjax import slt

    warnings.simplefilter("ignore", slt.ChainsNotMixedWarning)
    sharding.CPU_COMPILER_OPTIONS.clear()
    sharding.CPU_COMPILER_OPTIONS.update(options)
    ids = np.random.default_rng(1).integers(0, bench.VOCAB, (bench.NUM_SEQUENCES, bench.SEQ))
    weights, _ = bench.pretrain(bench.init_weights(), ids.astype(np.int32))
    params = {k: jnp.asarray(v) for k, v in weights.items()}
    data = {"input_ids": jnp.asarray(ids, jnp.int32)}
    return lambda: slt.estimate_llc(
      bench.jax_loss, params, data, key=jax.random.key(0), num_chains=16, num_draws=5000,
      **bench.SETTINGS,
    )  # fmt: skip
  from benchmarks import attention_workload
  from mechjax import sharding
  from mechjax.models import transformer
  from mechjax.slt import sgld

  chains = Mesh(mesh.devices, ("chains",))
  sharding.CPU_COMPILER_OPTIONS.clear()
  sharding.CPU_COMPILER_OPTIONS.update(options)
  net, params, tokens = attention_workload.inputs()
  loss = attention_workload.mean_loss(net)
  s = SGLDSettings(**attention_workload.SGLD, num_chains=4, num_draws=100, mala=False)
  if workload == "sgld":
    return lambda: jax.block_until_ready(
      sgld.sample_chains(loss, params, tokens, jax.random.key(2), s, mesh=chains)
    )
  from mechjax import slt

  per_token = attention_workload.token_losses(net)
  heads = transformer.head_masks(params, 2, 4)
  return lambda: slt.estimate_susceptibilities(
    per_token,
    params,
    tokens,
    tokens[:64],
    key=jax.random.key(3),
    components={"full": None, **heads},
    settings=s,
    batch_size=64,
    mesh=chains,
  )


def worker(workload: str, ynn: str) -> dict:
  import jax

  jax.config.update("jax_num_cpu_devices", 2)
  options = {} if ynn == "on" else {"xla_cpu_experimental_ynn_fusion_type": ""}
  run = program(workload, options)
  start = time.perf_counter()
  samples, calls, done = [], 0, threading.Event()

  def watch():
    while not done.wait(2.0):
      samples.append((time.perf_counter() - start, resident_mb()))

  threading.Thread(target=watch, daemon=True).start()
  while time.perf_counter() - start < FLAGS.seconds:
    run()
    calls += 1
  done.set()
  samples.append((time.perf_counter() - start, resident_mb()))
  warm = [(t, m) for t, m in samples if t >= WARMUP_S] or samples[-1:]
  (t0, m0), (t1, m1) = warm[0], samples[-1]
  return {
    "calls": calls,
    "rss_after_warmup_mb": m0,
    "rss_end_mb": m1,
    "growth_mb_per_s": (m1 - m0) / max(t1 - t0, 1e-9),
    "jax": jax.__version__,
    "jaxlib": __import__("jaxlib").__version__,
  }


def main(argv):
  del argv
  if FLAGS.run_one:
    workload, ynn = FLAGS.run_one.split(",")
    print(json.dumps(worker(workload, ynn)))
    return
  print(
    f"{'program':>8s} {'YNN':>4s} {'calls':>6s} {'RSS at 10 s (MB)':>17s} {'at end':>8s} "
    f"{'growth (MB/s)':>14s}"
  )
  for workload in FLAGS.program:
    for ynn in ("on", "off"):
      _, out = timing.run_worker(
        "benchmarks.ynn_memory", f"--run_one={workload},{ynn}", f"--seconds={FLAGS.seconds}"
      )
      print(
        f"{workload:>8s} {ynn:>4s} {out['calls']:6d} {out['rss_after_warmup_mb']:17.0f} "
        f"{out['rss_end_mb']:8.0f} {out['growth_mb_per_s']:14.2f}",
        flush=True,
      )
  print(f"\njax {out['jax']}, jaxlib {out['jaxlib']}; two CPU devices, {os.cpu_count()} cores")


if __name__ == "__main__":
  cli.positive_int("seconds")
  app.run(main)
