"""The sampler's Langevin noise drawn by threefry (the default) against rbg and unsafe_rbg
(``SGLDSettings.noise_impl``), each in fresh processes, alternating.

    python -m benchmarks.noise_prng                      # 16 chains × 1,000 draws, best of 2

The workload is :mod:`benchmarks.sampler_memory`'s LLC: an attention-only transformer of 42,176
parameters (random weights), 4,096 sequences of 16, batch 32, ``mala=False`` and
``star_loss="per_sample"`` so that the step is the gradient and the noise alone. A worker calls
:func:`mechjax.slt.estimate_llc` twice after :func:`mechjax.use_all_cpu_cores`; the second call
reuses the compiled program, so its time is sampling alone. The table prints each implementation's
best sampling time and whole-process time, and threefry's time over each (above 1: faster than
threefry).
"""

from __future__ import annotations

import json
import time

from absl import app
from absl import flags

from benchmarks import attention_workload
from benchmarks import timing
from mechjax import cli

IMPLS = ("threefry", "rbg", "unsafe_rbg")
flags.DEFINE_integer("chains", 16, "SGLD chains.")
flags.DEFINE_integer("draws", 1000, "SGLD draws per chain.")
flags.DEFINE_integer("repeats", 2, "Fresh processes per implementation, alternating; best kept.")
flags.DEFINE_enum("worker", None, list(IMPLS), "Internal: run one implementation.")
FLAGS = flags.FLAGS


def worker(impl: str) -> dict:
  import jax

  import mechjax
  from mechjax import slt

  mechjax.use_all_cpu_cores()
  net, params, tokens = attention_workload.inputs()
  loss = attention_workload.mean_loss(net)
  settings = slt.SGLDSettings(
    **attention_workload.SGLD,
    num_chains=FLAGS.chains,
    num_draws=FLAGS.draws,
    mala=False,
    star_loss="per_sample",
    noise_impl=impl,
  )
  run = lambda: slt.estimate_llc(loss, params, tokens, key=jax.random.key(2), settings=settings)  # noqa: E731
  run()
  t = time.perf_counter()
  res = run()
  return {"sampling_s": time.perf_counter() - t, "llc": float(res.llc_mean)}


def main(argv):
  del argv
  if FLAGS.worker:
    print(json.dumps(worker(FLAGS.worker)))
    return
  best = {impl: (float("inf"), float("inf")) for impl in IMPLS}
  for _ in range(FLAGS.repeats):
    for impl in IMPLS:
      args = [f"--worker={impl}", f"--chains={FLAGS.chains}", f"--draws={FLAGS.draws}"]
      wall, out = timing.run_worker("benchmarks.noise_prng", *args)
      best[impl] = (min(best[impl][0], out["sampling_s"]), min(best[impl][1], wall))
      print(f"  {impl:<10} sampling {out['sampling_s']:6.2f} s, process {wall:6.2f} s", flush=True)
  base = best["threefry"][0]
  print(f"{FLAGS.chains} chains × {FLAGS.draws} draws, best of {FLAGS.repeats}:")
  for impl, (sampling, wall) in best.items():
    print(
      f"  {impl:<10} sampling {sampling:6.2f} s (threefry / this: {base / sampling:.3f}), "
      f"process {wall:6.2f} s"
    )


if __name__ == "__main__":
  for name in ("chains", "draws", "repeats"):
    cli.positive_int(name)
  app.run(main)
