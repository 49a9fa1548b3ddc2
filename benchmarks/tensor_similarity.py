"""Tensor similarity: the Gram recursion against materialising the tensors, and the speed of the
depth-1 Gaussian similarity and of ``similarity_matrix``.

    python -m benchmarks.tensor_similarity  # widths 8..48 (about two minutes on 2 cores)
    python -m benchmarks.tensor_similarity --widths=8,16,32,64 --max_gib=20

**Gaussian, depth 1.** ``tensor_similarity(a, b, measure="gaussian")`` for one bilinear layer
``in → hidden → 10`` on a grid of inputs 64–784 and hidden widths 64–2048, float32 and float64: the
best warm time of a call, the path it takes (through the hidden units or through the quadratic
forms, :func:`mechjax.similarity.tensor._use_quadratic_forms`), its rate in GFLOP/s and the share of
the float32 matmul peak measured in the same run. **Matrix.** ``similarity_matrix`` of 16 networks
(in 64, hidden 64): the first call (tracing and compiling) and the next ones (compiled once per
architecture). The reference implementation is not run here.

**Recursion vs brute force.**
Two networks ``Bilinear(d → d, hidden d) → Bilinear(d → d, hidden d)``, node-wise symmetrised,
float32. The brute-force side builds both order-5 tensors (``d⁵`` entries each) and takes their dot
product; the recursion never forms anything larger than ``d × d``. Both are jitted; each time is the
best of --repeats after a warm-up (compilation excluded), side by side in one run, and the table
reports their ratio and the relative difference of the two results. Widths whose brute force would
need more than --max_gib (estimated as 6 tensors' worth of float32: the two results and the
intermediates) are timed for the recursion only.
"""

import time

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
flags.DEFINE_bool("gaussian", True, "Also time the depth-1 Gaussian similarity and the matrix.")
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


GAUSSIAN_GRID = [
  (64, 64),
  (64, 512),
  (64, 2048),
  (256, 256),
  (256, 2048),
  (784, 64),
  (784, 512),
  (784, 2048),
]
OUTPUTS = 10


def single(rng, d, h, dtype):
  return [
    {
      "left": jnp.asarray((rng.normal(size=(h, d)) / np.sqrt(d)).astype(dtype)),
      "right": jnp.asarray((rng.normal(size=(h, d)) / np.sqrt(d)).astype(dtype)),
      "out": jnp.asarray((rng.normal(size=(OUTPUTS, h)) / np.sqrt(h)).astype(dtype)),
    }
  ]


def gaussian_section(rng):
  f = jax.jit(lambda x: x @ x)
  m = jnp.ones((1024, 1024), jnp.float32)
  peak = 2 * 1024**3 / best_time(lambda: f(m), 10) / 1e9
  print(f"\nGaussian similarity, depth 1 (in → hidden → {OUTPUTS}), best of {FLAGS.repeats}")
  print(f"matmul peak {peak:.0f} GFLOP/s (float32 1024²)")
  print(
    f"{'dtype':>8s}{'in':>6s}{'hidden':>8s}{'time (s)':>11s}{'path':>16s}{'GFLOP/s':>9s}"
    f"{'of peak':>9s}"
  )
  for dtype in (np.float32, np.float64):
    if dtype == np.float64 and not jax.config.jax_enable_x64:
      print(f"{'float64':>8s}  skipped: run with JAX_ENABLE_X64=1")
      continue
    for d, h in GAUSSIAN_GRID:
      a, b = single(rng, d, h, dtype), single(rng, d, h, dtype)
      t = best_time(lambda: ts.tensor_similarity(a, b, measure="gaussian"), FLAGS.repeats)
      forms = ts._use_quadratic_forms(h, d, OUTPUTS, pairs=3, networks=2)
      work = (
        (2 * OUTPUTS * h * d * d + 3 * OUTPUTS * d * d)
        if forms
        else 3 * (4 * h * h * d + h * h * OUTPUTS)
      )
      rate = 2 * work / t / 1e9
      path = "quadratic forms" if forms else "hidden units"
      print(
        f"{np.dtype(dtype).name:>8s}{d:6d}{h:8d}{t:11.2e}{path:>16s}{rate:9.1f}{rate / peak:8.0%}"
      )
  nets = [single(rng, 64, 64, np.float32) for _ in range(16)]
  times = []
  for _ in range(3):
    t0 = time.perf_counter()
    ts.similarity_matrix(nets)
    times.append(time.perf_counter() - t0)
  print(
    f"\nsimilarity_matrix, 16 × 16 (in 64, hidden 64): first call {times[0]:.3f} s (compiles), "
    f"then {times[1]:.4f} s and {times[2]:.4f} s"
  )


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
  if FLAGS.gaussian:
    gaussian_section(rng)


if __name__ == "__main__":
  shared.run(main)
