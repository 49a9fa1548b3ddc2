"""Seeds in one vmapped program vs. the same jitted single-seed program called once per seed.

    python -m benchmarks.train_throughput  # 64 seeds, 2000 steps each

Both sides run the identical compiled training chunk from mechjax.train.loop (lax.scan over steps,
on-device data from the Fourier amplitude task, a two-layer tanh net); the baseline differs only in
being called once per seed instead of vmapped. Compilation is excluded (each side is warmed up), and
the best of --repeats timings is kept. FLOP/s is
compared with this machine's matmul peak, measured in the same run. FLOPs are the model's matmuls
(forward and backward); the on-device data generation (RNG, FFTs) is real work that is not counted.
"""

import functools

import jax
import jax.numpy as jnp
import optax
from absl import flags

from benchmarks.timing import best_time
from mechjax import cli
from mechjax.models.mlp import TwoLayer
from mechjax.studies.fourier import fourier_phase
from mechjax.train import loop

flags.DEFINE_integer("num_seeds", 64, "Seeds.")
flags.DEFINE_integer("steps", 2000, "Steps per seed.")
flags.DEFINE_integer("dim", 32, "Input dimension N.")
flags.DEFINE_integer("width", 64, "Hidden units.")
flags.DEFINE_integer("batch_size", 32, "Batch size.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions per side; the best is reported.")
for _name in ("num_seeds", "steps", "dim", "width", "batch_size", "repeats"):
  cli.positive_int(_name)
FLAGS = flags.FLAGS


def matmul_peak(n=2048, repeats=5):
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  f = jax.jit(lambda a: a @ a)
  return 2 * n**3 / best_time(lambda: f(a), repeats)


def compare(problem, opt, keys, n, repeats):
  """(seconds for the per-seed loop, seconds for the vmapped program) on identical compiled
  chunks."""
  state = jax.jit(jax.vmap(functools.partial(loop.init_state, problem, opt)))(keys)
  singles = [jax.tree.map(lambda x: x[i], state) for i in range(keys.shape[0])]
  vmapped = loop.make_chunk_fn(problem, opt, vmapped=True, donate=False)
  single = loop.make_chunk_fn(problem, opt, vmapped=False, donate=False)
  t_vmap = best_time(lambda: vmapped(state, n), repeats)
  t_loop = best_time(lambda: [single(s, n) for s in singles], repeats)
  return t_loop, t_vmap


def main(argv):
  del argv
  cfg = fourier_phase.Config(
    tasks=("amplitude",),
    shape=(FLAGS.dim,),
    width=FLAGS.width,
    activation="tanh",
    batch_size=FLAGS.batch_size,
    eval_samples=2,
  )
  full = fourier_phase.make_problem(cfg, fourier_phase.conditions(cfg)[0])
  online = loop.Problem(full.init, full.loss)  # train steps only: no evaluation in the timing
  # The same network on one fixed batch: isolates what vmap does for the model from the data
  # generation.
  x_fixed, y_fixed = fourier_phase.make_sampler(cfg, fourier_phase.conditions(cfg)[0])(
    jax.random.PRNGKey(1), FLAGS.batch_size
  )
  model = TwoLayer(cfg.width, cfg.activation)
  fixed = loop.Problem(
    full.init,
    lambda p, key: (
      jnp.mean(optax.sigmoid_binary_cross_entropy(model.apply(p, x_fixed), y_fixed)),
      {},
    ),
  )
  opt = optax.sgd(cfg.learning_rate)
  keys = loop.seed_keys(0, FLAGS.num_seeds)
  n = FLAGS.steps
  # Model FLOPs: the two matmuls (forward 2·B·(N·W + W), backward twice that); data generation not
  # counted.
  flops = 6.0 * FLAGS.batch_size * (FLAGS.dim * FLAGS.width + FLAGS.width) * FLAGS.num_seeds * n
  peak = matmul_peak()
  total = FLAGS.num_seeds * n
  device = jax.devices()[0]
  print(f"device: {device.platform} ({device.device_kind}), {jax.device_count()} device(s)")
  print(
    f"problem: two-layer tanh net, N={FLAGS.dim}, width {FLAGS.width}, batch {FLAGS.batch_size}, "
    f"{FLAGS.num_seeds} seeds x {n} steps; matmul peak {peak / 1e9:.1f} GFLOP/s"
  )
  print(
    f"{'data':22s}{'per-seed loop (s)':>19s}{'vmap (s)':>10s}{'speed-up':>10s}"
    f"{'vmap GFLOP/s':>14s}{'of peak':>9s}"
  )
  results = {}
  for name, problem in (("online (fresh batch)", online), ("one fixed batch", fixed)):
    t_loop, t_vmap = results[name] = compare(problem, opt, keys, n, FLAGS.repeats)
    rate = flops / t_vmap
    print(
      f"{name:22s}{t_loop:19.3f}{t_vmap:10.3f}{t_loop / t_vmap:9.2f}x"
      f"{rate / 1e9:14.1f}{rate / peak:9.1%}"
    )
  t_online = results["online (fresh batch)"][1]
  print(
    f"(online, vmapped: {total / t_online:,.0f} seed-steps/s; FLOPs count the model's matmuls only)"
  )


if __name__ == "__main__":
  cli.execute(main)
