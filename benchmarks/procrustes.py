"""Procrustes fits: mechjax against scipy and against the bare matmul + SVD they both need.

    python -m benchmarks.procrustes  # n = 65,536, d = 512, K = 9

Three comparisons, each side by side in one run (ratios, since absolute times on shared machines are
noisy), best of --repeats after a warm-up:

1. one fit, ``mechjax.align.procrustes.orthogonal_procrustes`` (jitted) vs
   ``scipy.linalg.orthogonal_procrustes``, in float32 and float64;
2. the same fit vs a bare lower bound: the jitted ``Aᵀ B`` matmul plus the SVD of the d × d result,
   nothing else;
3. all K(K−1)/2 pairs of K models: one batched, jitted call vs a Python loop over scipy.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from absl import flags

from benchmarks.timing import best_time
from mechjax import cli
from mechjax.align.procrustes import procrustes_fit

flags.DEFINE_integer("n", 65_536, "Samples (rows of the activation matrices).")
flags.DEFINE_integer("d", 512, "Features.")
flags.DEFINE_integer("models", 9, "K models for the all-pairs comparison.")
flags.DEFINE_integer(
  "pairs_n", 16_384, "Samples per model in the all-pairs comparison (memory: K * n * d floats)."
)
flags.DEFINE_integer("repeats", 3, "Timed repetitions; the best is kept.")
for _name in ("n", "d", "models", "pairs_n", "repeats"):
  cli.positive_int(_name, minimum=2 if _name == "models" else 1)
FLAGS = flags.FLAGS


def main(argv):
  del argv
  n, d, reps = FLAGS.n, FLAGS.d, FLAGS.repeats
  rng = np.random.default_rng(0)
  print(f"device: {jax.devices()[0].platform}; n = {n}, d = {d}")
  print(f"{'comparison (ratio: other/mechjax; bound rows: mechjax/bound)':44s}")
  print(f"{'':44s}{'mechjax (s)':>12s}{'other (s)':>11s}{'ratio':>9s}")
  fit = jax.jit(lambda a, b: procrustes_fit(a, b).R)
  bound = jax.jit(lambda a, b: jnp.linalg.svd(a.T @ b, full_matrices=False))
  for dtype in (np.float32, np.float64):
    with jax.enable_x64(dtype == np.float64):
      a_np = rng.normal(size=(n, d)).astype(dtype)
      b_np = rng.normal(size=(n, d)).astype(dtype)
      a, b = jnp.asarray(a_np), jnp.asarray(b_np)
      t_ours = best_time(lambda: fit(a, b), reps)
      t_scipy = best_time(lambda: scipy.linalg.orthogonal_procrustes(a_np, b_np), reps)
      t_bound = best_time(lambda: bound(a, b), reps)
      name = np.dtype(dtype).name
      print(
        f"{'one fit vs scipy, ' + name:44s}{t_ours:12.3f}{t_scipy:11.3f}{t_scipy / t_ours:8.2f}x"
      )
      print(
        f"{'one fit / bare matmul+SVD bound, ' + name:44s}{t_ours:12.3f}{t_bound:11.3f}"
        f"{t_ours / t_bound:8.2f}"
      )

  k, m = FLAGS.models, FLAGS.pairs_n
  acts_np = rng.normal(size=(k, m, d)).astype(np.float32)
  acts = jnp.asarray(acts_np)
  ii, jj = map(np.array, zip(*itertools.combinations(range(k), 2)))
  all_pairs = jax.jit(lambda x: procrustes_fit(x[ii], x[jj]).R)
  t_ours = best_time(lambda: all_pairs(acts), reps)
  t_loop = best_time(
    lambda: [scipy.linalg.orthogonal_procrustes(acts_np[i], acts_np[j]) for i, j in zip(ii, jj)],
    reps,
  )
  print(
    f"{f'all {len(ii)} pairs of K={k} (n={m}), float32, vs scipy loop':44s}"
    f"{t_ours:12.3f}{t_loop:11.3f}"
    f"{t_loop / t_ours:8.2f}x"
  )


if __name__ == "__main__":
  cli.execute(main)
