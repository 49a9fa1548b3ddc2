"""Tensor similarity at depth 2: the Gram recursion against materialising the tensors.

    python -m benchmarks.tensor_similarity  # widths 8..48 (about a minute on 2 cores)
    python -m benchmarks.tensor_similarity --widths=8,16,32,64 --max_gib=20

Two networks ``Bilinear(d → d, hidden d) → Bilinear(d → d, hidden d)``, node-wise symmetrised,
float32. The brute-force side builds both order-5 tensors (``d⁵`` entries each) and takes their dot
product; the recursion never forms anything larger than ``d × d``. Both are jitted; each time is the
best of --repeats after a warm-up (compilation excluded), side by side in one run, and the table
reports their ratio and the relative difference of the two results. Widths whose brute force would
need more than --max_gib (estimated as 6 tensors' worth of float32: the two results and the
intermediates) are timed for the recursion only.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks.timing import best_time
from mechjax.similarity import tensor as ts
from mechjax.train import flags as shared

flags.DEFINE_list(
  "widths", ["8", "16", "24", "32", "48", "64"], "Widths d (input, hidden and output)."
)
flags.DEFINE_float("max_gib", 8.0, "Memory allowed for the brute-force side.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions; the best is kept.")
flags.register_validator(
  "widths",
  lambda v: bool(v) and all(s.isdigit() and int(s) >= 2 for s in v),
  message="must be a list of integers >= 2",
)
shared.positive_float("max_gib")
shared.positive_int("repeats")
FLAGS = flags.FLAGS


def network(rng, d):
  layer = lambda: {
    "left": rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d),
    "right": rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d),
    "out": rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d),
  }
  return [
    {k: jnp.asarray(v) for k, v in layer().items()},
    {k: jnp.asarray(v) for k, v in layer().items()},
  ]


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  recursion = jax.jit(lambda a, b: ts.tensor_inner(a, b))
  brute = jax.jit(lambda a, b: ts.brute_force_inner(a, b))
  print(
    f"device: {jax.devices()[0].platform}; depth 2 (two bilinear layers), float32, best of "
    f"{FLAGS.repeats}"
  )
  print(
    f"{'width d':>8s}{'tensor entries':>16s}{'recursion (s)':>15s}"
    f"{'brute force (s)':>17s}{'ratio':>10s}"
    f"{'rel. diff':>11s}"
  )
  for d in (int(w) for w in FLAGS.widths):
    a, b = network(rng, d), network(rng, d)
    entries = d**5
    t_rec = best_time(lambda: recursion(a, b), FLAGS.repeats)
    if 6 * entries * 4 / 2**30 > FLAGS.max_gib:
      print(f"{d:8d}{entries:16,d}{t_rec:15.2e}{'  skipped (memory)':>17s}")
      continue
    t_bf = best_time(lambda: brute(a, b), FLAGS.repeats)
    r, bf = float(recursion(a, b)), float(brute(a, b))
    print(
      f"{d:8d}{entries:16,d}{t_rec:15.2e}{t_bf:17.2e}{t_bf / t_rec:9.0f}x"
      f"{abs(r - bf) / abs(bf):11.1e}"
    )


if __name__ == "__main__":
  shared.run(main)
