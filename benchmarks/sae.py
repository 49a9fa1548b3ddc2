"""TopK SAEs: the k-th-largest selection (iterative vs ``lax.top_k``) and whole training steps vs
ReLU.

    python -m benchmarks.sae  # d = 64, 256 latents, batch 256, k = 8 and 32

Side by side in one run, best of --repeats after a warm-up:

1. the selection alone, ``kth_largest`` (k − 1 masked argmaxes) vs ``lax.top_k``, on a (batch,
   latents) array;
2. --steps jitted SAE training steps (forward, backward, Adam), TopK (default selection) vs ReLU +
   L1.
"""

import jax
import optax
from absl import flags

from benchmarks.timing import best_time
from mechjax import cli
from mechjax.models import sae as sae_lib

flags.DEFINE_integer("d", 64, "Activation width.")
flags.DEFINE_integer("latents", 256, "Dictionary size.")
flags.DEFINE_integer("batch", 256, "Activations per step.")
flags.DEFINE_list("top_k", ["8", "32"], "k values to time.")
flags.DEFINE_integer("steps", 50, "Steps per timed call (one lax.scan).")
flags.DEFINE_integer("repeats", 5, "Timed repetitions; the best is kept.")
for _name in ("d", "latents", "batch", "steps", "repeats"):
  cli.positive_int(_name)
FLAGS = flags.FLAGS


def _steps_fn(model, x):
  opt = optax.adam(1e-3)

  def loss(p):
    return sae_lib.sae_loss(model, p, x)[0]

  def body(carry, _):
    p, s = carry
    g = jax.grad(loss)(p)
    u, s = opt.update(g, s, p)
    return (optax.apply_updates(p, u), s), None

  params = model.init(jax.random.PRNGKey(0), x[:1])
  run = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=FLAGS.steps)[0])
  state = opt.init(params)
  return lambda: run(params, state)


def main(argv):
  del argv
  x = jax.random.normal(jax.random.PRNGKey(1), (FLAGS.batch, FLAGS.d))
  print(
    f"device: {jax.devices()[0].platform}; d = {FLAGS.d}, latents = {FLAGS.latents}, batch = "
    f"{FLAGS.batch}, {FLAGS.steps} steps per call"
  )
  f = jax.nn.relu(jax.random.normal(jax.random.PRNGKey(2), (FLAGS.batch, FLAGS.latents)))
  ks = [int(v) for v in FLAGS.top_k]
  print(
    f"{'selection of the k-th largest':40s}{'iterative (s)':>14s}"
    f"{'lax.top_k (s)':>14s}{'ratio':>8s}"
  )
  for k in ks:
    ours = jax.jit(lambda a, k=k: sae_lib.kth_largest(a, k, iterative=True))
    ref = jax.jit(lambda a, k=k: sae_lib.kth_largest(a, k, iterative=False))
    t_ours, t_ref = (
      best_time(lambda: ours(f), FLAGS.repeats),
      best_time(lambda: ref(f), FLAGS.repeats),
    )
    print(f"{f'k={k}':40s}{t_ours:14.5f}{t_ref:14.5f}{t_ref / t_ours:7.2f}x")
  t_relu = best_time(_steps_fn(sae_lib.SAE(FLAGS.latents), x), FLAGS.repeats)
  print(f"{'training steps':40s}{'time (s)':>14s}{'/ ReLU':>14s}")
  print(f"{'ReLU + L1':40s}{t_relu:14.4f}{1.0:14.2f}")
  for k in ks:
    t_k = best_time(_steps_fn(sae_lib.SAE(FLAGS.latents, top_k=k), x), FLAGS.repeats)
    which = "iterative" if k <= sae_lib.ITERATIVE_TOP_K else "lax.top_k"
    print(f"{f'TopK k={k} ({which} selection)':40s}{t_k:14.4f}{t_k / t_relu:14.2f}")


if __name__ == "__main__":
  cli.execute(main)
