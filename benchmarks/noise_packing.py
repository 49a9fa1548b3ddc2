"""The sampler's Langevin noise for a model's small leaves drawn with one Threefry hash over all
their positions (``mechjax.slt.noise.normals``, the default) against one hash per leaf (every
request drawn alone, as before the packing), each in fresh processes, alternating. The two draw
the same numbers bit for bit; what differs is the program, so the point is the compile time.

    python -m benchmarks.noise_packing                   # pythia-14m's shape, 4 chains × 50 draws
    python -m benchmarks.noise_packing --draws=10 --repeats=1

The model is a GPT-NeoX with pythia-14m's architecture (:mod:`benchmarks.pythia`; 100 leaves,
random weights) on 256 random windows of 32 tokens, batch 32, with XLA's default compile settings. A
worker calls :func:`mechjax.slt.estimate_llc` twice; the second call reuses the compiled program,
so it is sampling alone, and the first call's time over the second's is the compiling. The table
prints each variant's best of both and the per-leaf variant's compile time over the packed one's
(above 1: the packing compiles faster), and the two LLCs.
"""

from __future__ import annotations

import json

from absl import app
from absl import flags

from benchmarks import timing
from mechjax import cli

VARIANTS = ("packed", "per_leaf")
flags.DEFINE_integer("chains", 4, "SGLD chains.")
flags.DEFINE_integer("draws", 50, "SGLD draws per chain.")
flags.DEFINE_integer("repeats", 2, "Fresh processes per variant, alternating; best kept.")
flags.DEFINE_integer("layers", 6, "Layers of the pythia-14m-shaped model (6 is pythia-14m's).")
flags.DEFINE_enum("worker", None, list(VARIANTS), "Internal: run one variant.")
FLAGS = flags.FLAGS


def worker(variant: str) -> dict:
  import jax
  import numpy as np

  from benchmarks import pythia
  from mechjax import slt
  from mechjax.models import pretrained
  from mechjax.slt import noise

  if variant == "per_leaf":
    noise.PACK_MAX = 0  # no request is small enough to pack: each is drawn alone
  model = pythia.model(pythia.PYTHIA_14M, num_hidden_layers=FLAGS.layers)
  tokens = np.random.default_rng(0).integers(0, model.arch.vocab_size, (256, 32)).astype(np.int32)
  params = model.init(jax.random.key(0), tokens[:1])["params"]
  loss, _ = pretrained.lm_losses(model)
  settings = slt.SGLDSettings(
    num_chains=FLAGS.chains,
    num_draws=FLAGS.draws,
    num_burnin=0,
    step_size=1e-4,
    nbeta=30.0,
    localization=100.0,
    batch_size=32,
  )
  run = lambda: slt.estimate_llc(loss, params, tokens, key=jax.random.key(1), settings=settings)  # noqa: E731
  first_s, second_s, second = timing.first_and_second(run)
  leaves = len(jax.tree.leaves(params))
  return {
    "compile_s": first_s - second_s,
    "sampling_s": second_s,
    "llc": float(second.llc_mean),
    "leaves": leaves,
  }


def main(argv):
  del argv
  if FLAGS.worker:
    print(json.dumps(worker(FLAGS.worker)))
    return
  best = {v: {"compile_s": float("inf"), "sampling_s": float("inf")} for v in VARIANTS}
  llc = {}
  for _ in range(FLAGS.repeats):
    for v in VARIANTS:
      args = [f"--worker={v}", f"--chains={FLAGS.chains}", f"--draws={FLAGS.draws}"]
      _, out = timing.run_worker("benchmarks.noise_packing", *args, f"--layers={FLAGS.layers}")
      for k in best[v]:
        best[v][k] = min(best[v][k], out[k])
      llc[v] = out["llc"]
      print(
        f"  {v:<9} compile {out['compile_s']:6.2f} s, sampling {out['sampling_s']:6.2f} s, "
        f"LLC {out['llc']:.4f} ({out['leaves']} leaves)",
        flush=True,
      )
  print(f"{FLAGS.chains} chains × {FLAGS.draws} draws, best of {FLAGS.repeats}:")
  for v, b in best.items():
    print(f"  {v:<9} compile {b['compile_s']:6.2f} s, sampling {b['sampling_s']:6.2f} s")
  ratio = best["per_leaf"]["compile_s"] / best["packed"]["compile_s"]
  print(f"  per-leaf compile / packed compile: {ratio:.2f}")
  # The same noise, bit for bit (tests/slt/test_noise.py); the programs differ, so their rounding
  # may too.
  diff = abs(llc["packed"] - llc["per_leaf"])
  print(f"  LLC {llc['packed']:.6f} vs {llc['per_leaf']:.6f} (difference {diff:.1e})")


if __name__ == "__main__":
  for name in ("chains", "draws", "repeats", "layers"):
    cli.positive_int(name)
  app.run(main)
