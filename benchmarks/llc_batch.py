"""The LLC of many checkpoints: one program for all of them against one call per checkpoint.

    python -m benchmarks.llc_batch                     # mechjax only
    python -m benchmarks.llc_batch --devinterp         # also devinterp 2.0.1 looping
                                                       # (needs benchmarks/requirements.txt)

The workload is the LLC-over-training study's (:mod:`mechjax.studies.llc.llc_dynamics`, its
defaults): a deep linear network 5-5-5-5 learning a rank-3 teacher from ``n = 10,000`` samples,
trained by SGD here for 4000 steps with 2 seeds, and saved every 100 steps: 40 checkpoints × 2 seeds
= 80 points. Each point's LLC is estimated with 4 chains of ``--draws`` draws after ``--burnin``
steps (batch 256, ε = 1e-5, γ = 100, nβ = n / ln n), on the training set.

Every side runs in a fresh Python process that loads the same checkpoints from one ``.npz``; the
measured time is the whole process, from start to exit (imports, tracing, compiling, sampling), and
the sampling part alone is printed beside it:

* **batch**: one :func:`mechjax.slt.llc.estimate_llc_batch` call for the 80 points;
* **loop**: 80 :func:`mechjax.slt.llc.estimate_llc` calls (one compiled program, reused);
* **devinterp** (with ``--devinterp``): devinterp's ``llc`` called once per point, with the same
  sampler settings, on the same network in torch (its LLC averages burn-in draws too, and subtracts
  an init loss over 32 batches).

Both mechjax sides use the library's defaults beyond those settings and call
:func:`mechjax.use_all_cpu_cores` first, as the README's example does. Point ``b`` uses the key of
its seed on both mechjax sides, so their estimates agree to rounding; the table prints the largest
difference. devinterp's estimates come from other random numbers: the table prints their mean
difference from mechjax's over the 80 points against the chains' spread.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

from benchmarks import timing

flags.DEFINE_integer("draws", 500, "SGLD draws per chain, after burn-in.")
flags.DEFINE_integer("burnin", 100, "SGLD burn-in steps per chain.")
flags.DEFINE_bool("devinterp", False, "Also time devinterp 2.0.1 looping over the points.")
flags.DEFINE_integer("repeats", 1, "Whole-process runs per side; the best is kept.")
flags.DEFINE_enum("worker", None, ["batch", "loop", "devinterp"], "Internal: run one side.")
flags.DEFINE_string("inputs", None, "Internal: the .npz with the checkpoints and the data.")
FLAGS = flags.FLAGS

CHAINS, SEEDS, STEPS, EVERY = 4, 2, 4000, 100
SETTINGS = dict(step_size=1e-5, localization=100.0, batch_size=256)


def make_checkpoints():
  """80 points: the DLN of llc_dynamics' defaults trained by SGD, params every 100 steps."""
  import jax
  import jax.numpy as jnp

  from mechjax import rng
  from mechjax.studies.llc import llc_dynamics

  cfg = llc_dynamics.Config()
  data = llc_dynamics.make_data(cfg)
  problem = llc_dynamics.make_problem(cfg, data)
  keys = jnp.stack([rng.key(cfg.run.seed, "init", s) for s in range(SEEDS)])
  params = jax.vmap(problem.init)(keys)

  @jax.jit
  def block(params, key):
    def step(p, k):
      g = jax.grad(lambda q: problem.loss(q, k)[0])(p)
      return jax.tree.map(lambda a, b: a - cfg.learning_rate * b, p, g), None

    return jax.lax.scan(step, params, jax.random.split(key, EVERY))[0]

  saved = []
  for i in range(STEPS // EVERY):
    params = jax.vmap(block)(params, jax.vmap(lambda k: jax.random.fold_in(k, i))(keys))
    saved.append(params)
  # Points are (checkpoint, seed), checkpoint-major.
  stack = jax.tree.map(lambda *a: np.concatenate([np.asarray(x) for x in a]), *saved)
  return stack, {k: np.asarray(v) for k, v in data.items()}, float(cfg.run.seed)


def point_keys(num_points: int):
  import jax.numpy as jnp

  from mechjax import rng

  seed_keys = jnp.stack([rng.key(0, "llc", s) for s in range(SEEDS)])
  return jnp.concatenate([seed_keys] * (num_points // SEEDS))


def run_batch(inputs) -> dict:
  import mechjax

  mechjax.use_all_cpu_cores()
  import jax.numpy as jnp

  from mechjax.models import deep_linear
  from mechjax.slt import llc

  stack = {k: jnp.asarray(inputs[k]) for k in inputs if k.startswith("W")}
  data = {"x": jnp.asarray(inputs["x"]), "y": jnp.asarray(inputs["y"])}
  num_points = stack["W1"].shape[0]
  t0 = time.perf_counter()
  res = llc.estimate_llc_batch(
    deep_linear.half_mse,
    stack,
    data,
    key=point_keys(num_points),
    num_chains=CHAINS,
    num_draws=FLAGS.draws,
    num_burnin=FLAGS.burnin,
    **SETTINGS,
  )
  return {
    "sampling_s": time.perf_counter() - t0,
    "llc_mean": np.asarray(res.llc_mean).tolist(),
    "llc_std": np.asarray(res.llc_std).tolist(),
    "star_loss": res.diagnostics["star_loss"],
  }


def run_loop(inputs) -> dict:
  import mechjax

  mechjax.use_all_cpu_cores()
  import jax.numpy as jnp

  from mechjax.models import deep_linear
  from mechjax.slt import llc

  data = {"x": jnp.asarray(inputs["x"]), "y": jnp.asarray(inputs["y"])}
  names = sorted(k for k in inputs if k.startswith("W"))
  num_points = inputs["W1"].shape[0]
  keys = point_keys(num_points)
  t0 = time.perf_counter()
  means, stds = [], []
  for b in range(num_points):
    res = llc.estimate_llc(
      deep_linear.half_mse,
      {k: jnp.asarray(inputs[k][b]) for k in names},
      data,
      key=keys[b],
      num_chains=CHAINS,
      num_draws=FLAGS.draws,
      num_burnin=FLAGS.burnin,
      **SETTINGS,
    )
    means.append(res.llc_mean)
    stds.append(res.llc_std)
  return {
    "sampling_s": time.perf_counter() - t0,
    "llc_mean": means,
    "llc_std": stds,
    "star_loss": res.diagnostics["star_loss"],
  }


def run_devinterp(inputs) -> dict:
  """devinterp 2.0.1's ``llc`` once per point. Its data are a dataset of ``input_ids`` rows and its
  loss a per-token loss ``(model, input_ids) -> (batch, tokens)``; here each row holds ``[x, y]``
  and the loss is ``½‖y − f(x)‖²`` as one token, so its mean is the study's loss."""
  import torch
  from datasets import Dataset
  from devinterp.slt.llc import llc

  names = sorted(k for k in inputs if k.startswith("W"))
  x, y = inputs["x"], inputs["y"]
  d_in = x.shape[1]
  n = x.shape[0]
  rows = np.concatenate([x, y], axis=1).astype(np.float32)
  dataset = Dataset.from_dict({"input_ids": rows.tolist()}).with_format("torch")

  class DLN(torch.nn.Module):
    def __init__(self, weights):
      super().__init__()
      self.w = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in weights]
      )

    def forward(self, inp):
      for w in self.w:
        inp = inp @ w
      return inp

  def half_squared_error(model, input_ids):
    # devinterp wants a (batch, row length − 1) "per-token" loss: each sample's loss, repeated, so
    # that its mean is the mean over samples.
    out = model(input_ids[:, :d_in])
    per_sample = 0.5 * ((out - input_ids[:, d_in:]) ** 2).sum(-1, keepdim=True)
    return per_sample.expand(-1, input_ids.shape[1] - 1)

  t0 = time.perf_counter()
  means, stds = [], []
  with tempfile.TemporaryDirectory() as tmp:
    for b in range(inputs["W1"].shape[0]):
      result = llc(
        DLN([inputs[k][b] for k in names]),
        dataset,
        {},
        lr=SETTINGS["step_size"],
        n_beta=n / np.log(n),
        num_chains=CHAINS,
        num_draws=FLAGS.draws,
        num_burnin_steps=FLAGS.burnin,
        batch_size=SETTINGS["batch_size"],
        localization=SETTINGS["localization"],
        loss_fn=half_squared_error,
        output_path=os.path.join(tmp, f"point{b}.zarr"),
      )
      means.append(float(result["llc_mean"]))
      stds.append(float(result["llc_std"]))
  return {"sampling_s": time.perf_counter() - t0, "llc_mean": means, "llc_std": stds}


def child(side: str, path: str) -> tuple[float, dict]:
  return timing.run_worker(
    "benchmarks.llc_batch",
    f"--worker={side}",
    f"--inputs={path}",
    f"--draws={FLAGS.draws}",
    f"--burnin={FLAGS.burnin}",
  )


def main(argv):
  del argv
  if FLAGS.worker:
    inputs = dict(np.load(FLAGS.inputs))
    run = {"batch": run_batch, "loop": run_loop, "devinterp": run_devinterp}[FLAGS.worker]
    print(json.dumps(run(inputs)))
    return
  if FLAGS.devinterp:
    try:
      import devinterp  # noqa: F401
      import torch  # noqa: F401
    except ImportError as e:
      sys.exit(
        f"error: --devinterp needs torch and devinterp ({e}); install them with "
        "`pip install -r benchmarks/requirements.txt`"
      )
  stack, data, _ = make_checkpoints()
  num_points = stack["W1"].shape[0]
  print(
    f"{num_points} points (40 checkpoints × {SEEDS} seeds) of a 5-5-5-5 deep linear network, "
    f"{CHAINS} chains × {FLAGS.draws} draws after {FLAGS.burnin} burn-in steps each (batch "
    f"{SETTINGS['batch_size']}, ε = {SETTINGS['step_size']:g}, γ = {SETTINGS['localization']:g}); "
    f"{os.cpu_count()} cores; whole processes, best of {FLAGS.repeats}\n"
  )
  sides = ["batch", "loop"] + (["devinterp"] if FLAGS.devinterp else [])
  best = {}
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "inputs.npz")
    np.savez(path, **stack, **data)
    for r in range(FLAGS.repeats):
      for side in sides if r % 2 == 0 else sides[::-1]:
        wall, out = child(side, path)
        if side not in best or wall < best[side][0]:
          best[side] = (wall, out)
  base_wall, base = best["batch"]
  print(
    f"{'side':>10s} {'process (s)':>12s} {'sampling (s)':>13s} {'batch speed-up':>15s} "
    f"{'(sampling)':>11s} {'peak (MiB)':>11s}  LLC at the last checkpoint (seeds 0, 1)"
  )
  summary = {}
  for side in sides:
    wall, out = best[side]
    last = out["llc_mean"][-SEEDS:]
    print(
      f"{side:>10s} {wall:12.1f} {out['sampling_s']:13.1f} {wall / base_wall:14.2f}x "
      f"{out['sampling_s'] / base['sampling_s']:10.2f}x {out['peak_rss_mib']:11.0f}  "
      + ", ".join(f"{v:.2f}" for v in last)
    )
    summary[side] = {"process_s": wall, **out}
  loop_means = np.array(best["loop"][1]["llc_mean"])
  batch_means = np.array(base["llc_mean"])
  largest = np.max(np.abs(batch_means - loop_means))
  print(
    f"\nbatch vs loop, same keys: largest |Δ LLC| over the {num_points} points {largest:.2e} "
    f"(largest |LLC| {np.max(np.abs(loop_means)):.3g})"
  )
  if "devinterp" in best:
    theirs = np.array(best["devinterp"][1]["llc_mean"])
    spread = np.array(base["llc_std"])
    diff = theirs - batch_means
    print(
      f"devinterp vs mechjax, other random numbers: mean difference {np.mean(diff):+.3g}, "
      f"median |difference| / mechjax's sd over chains {np.median(np.abs(diff) / spread):.2f}"
    )
  print("\n" + json.dumps(summary))


if __name__ == "__main__":
  app.run(main)
