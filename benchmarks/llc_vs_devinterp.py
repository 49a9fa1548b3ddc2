"""LLC estimation, mechjax against devinterp 2.0.1, whole process against whole process.

    pip install -r benchmarks/requirements.txt        # torch 2.13.0 (CPU build) and devinterp 2.0.1
    python -m benchmarks.llc_vs_devinterp

The reference model is a next-token model: vocabulary 64, embedding 64 (tied with the unembedding),
one residual 256-wide ReLU MLP, 37,184 parameters; the data are 2,048 random sequences of 17 tokens
(16 predicted positions). This parent process trains the model briefly (full-batch Adam in JAX) so
that ``w*`` sits near a minimum, writes the weights and the data to one ``.npz``, and then, for each
workload, starts a fresh Python process per tool that loads them, builds its model, estimates the
LLC and prints it. The wall time of each child, from start to exit, is the measured time: it
includes importing the framework and, for mechjax, tracing and compiling (one program per
configuration).

Both tools use the same sampler settings (devinterp's convention, ``Δw = −(ε/2)[nβ∇L_B + γ(w − w*)]
+ √ε·ξ``): batch 32, ε = 1e-4, nβ = 10, γ = 100, no burn-in. The estimators differ by design:
devinterp subtracts an init loss averaged over 32 batches from each draw's minibatch loss; mechjax
subtracts the same minibatch's loss at ``w*`` (taken from per-sample losses at ``w*`` computed once,
since this loss is a mean over sequences; see :mod:`mechjax.slt.llc`). torch uses all cores by
itself. mechjax runs three ways:

* ``mechjax``: the README's path, ``mechjax.use_all_cpu_cores()`` and then ``estimate_llc`` with its
  defaults (the MALA diagnostic on every 16th step, the ``w*`` path chosen automatically);
* ``mechjax_one_device``: the same call without ``use_all_cpu_cores()`` (one CPU device);
* ``mechjax_tuned``: the defaults plus ``mala=False`` and ``star_loss="per_sample"`` (no automatic
  check).

The FLOP count of one mechjax run is XLA's own (``cost_analysis`` of the compiled program); the
matmul peak is the best of a few square float32 matmuls measured in the parent.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
from absl import app
from absl import flags

from benchmarks import peers
from benchmarks import timing
from mechjax import cli
from mechjax.slt import chain as chain_lib
from mechjax.slt import placement
from mechjax.slt.settings import SGLDSettings

VOCAB, EMBED, HIDDEN, SEQ, NUM_SEQUENCES = 64, 64, 256, 17, 2048
SETTINGS = dict(step_size=1e-4, nbeta=10.0, localization=100.0, batch_size=32)
WORKLOADS = {"4x200": (4, 200), "16x1000": (16, 1000)}

flags.DEFINE_list(
  "workloads", list(WORKLOADS), f"Chains × draws to run: any of {', '.join(WORKLOADS)}."
)
flags.DEFINE_integer(
  "repeats", 2, "Whole-process runs per tool and workload, alternating tools; the best is kept."
)
flags.DEFINE_enum(
  "worker",
  None,
  ["mechjax", "mechjax_one_device", "mechjax_tuned", "devinterp"],
  "Internal: run one tool in this process.",
)
flags.DEFINE_string("inputs", None, "Internal: the .npz with the weights and the data.")
flags.DEFINE_string("workload", None, "Internal: the workload of a worker.")
cli.list_of("workloads", WORKLOADS)
cli.positive_int("repeats")
FLAGS = flags.FLAGS


# ----------------------------------------------------------------------------------------------
# the model
def init_weights(seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {
    "embed": rng.normal(0, EMBED**-0.5, (VOCAB, EMBED)).astype(np.float32),
    "w1": rng.normal(0, EMBED**-0.5, (EMBED, HIDDEN)).astype(np.float32),
    "b1": np.zeros(HIDDEN, np.float32),
    "w2": rng.normal(0, HIDDEN**-0.5, (HIDDEN, EMBED)).astype(np.float32),
    "b2": np.zeros(EMBED, np.float32),
  }


def jax_loss(params, batch):
  """Mean next-token cross-entropy; logits at all 17 positions, as devinterp computes them, 16
  scored."""
  import jax
  import jax.numpy as jnp

  ids = batch["input_ids"]
  e = params["embed"][ids]
  h = e + jax.nn.relu(e @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
  logp = jax.nn.log_softmax(h @ params["embed"].T)[:, :-1]
  return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1))


def pretrain(weights, ids, steps=300, lr=1e-2):
  """Full-batch Adam from ``weights``, so that the sampled point is near a minimum of the loss."""
  import jax
  import optax

  params = jax.tree.map(np.asarray, weights)
  opt = optax.adam(lr)
  state = opt.init(params)

  @jax.jit
  def step(p, s):
    loss, g = jax.value_and_grad(jax_loss)(p, {"input_ids": ids})
    u, s = opt.update(g, s)
    return optax.apply_updates(p, u), s, loss

  for _ in range(steps):
    params, state, _ = step(params, state)
  return jax.tree.map(np.asarray, params), float(jax_loss(params, {"input_ids": ids}))


# ----------------------------------------------------------------------------------------------
# workers
def run_mechjax(inputs: dict, chains: int, draws: int, variant: str) -> dict:
  """``variant``: ``"defaults"`` is the README's path (``mechjax.use_all_cpu_cores()``, then
  ``estimate_llc`` with its defaults); ``"one_device"`` skips the first call; ``"tuned"`` adds
  ``mala=False`` and ``star_loss="per_sample"`` to the defaults."""
  import mechjax

  if variant != "one_device":
    mechjax.use_all_cpu_cores()  # every core a device: chains are sharded over them
  import jax
  import jax.numpy as jnp

  from mechjax.slt import llc

  params = {k: jnp.asarray(inputs[k]) for k in ("embed", "w1", "b1", "w2", "b2")}
  data = {"input_ids": jnp.asarray(inputs["input_ids"])}
  extra = dict(mala=False, star_loss="per_sample") if variant == "tuned" else {}
  res = llc.estimate_llc(
    jax_loss,
    params,
    data,
    key=jax.random.PRNGKey(0),
    num_chains=chains,
    num_draws=draws,
    **extra,
    **SETTINGS,
  )
  return {
    "llc_mean": res.llc_mean,
    "llc_std": res.llc_std,
    "platform": jax.devices()[0].platform,
    "devices": len(jax.devices()),
    "star_loss": res.diagnostics["star_loss"],
    "mala_steps": res.diagnostics.get("mala_steps", 0),
  }


def mechjax_flops(inputs: dict, chains: int, draws: int, mala: bool, per_sample: bool) -> float:
  """XLA's FLOP count of the compiled sampling program (compiled here, in the parent, outside any
  timing).

  XLA's cost analysis counts the body of a ``while`` loop once, whatever its trip count (checked:
  the count is the same for 10 and 100 draws), so the body's count is multiplied by the number of
  steps, and the chains are counted vmapped (a ``lax.map`` over them would be one more loop).
  With MALA every ``k``-th step, the count of a step with the acceptance and of one without are
  weighted by how often each runs; the per-sample losses at ``w*`` (one pass over the data) are
  added once."""
  import jax
  import jax.numpy as jnp

  params = {k: jnp.asarray(inputs[k]) for k in ("embed", "w1", "b1", "w2", "b2")}
  data = {"input_ids": jnp.asarray(inputs["input_ids"])}
  keys = chain_lib.chain_keys(jax.random.PRNGKey(0), chains)
  star = placement.per_sample_star_losses(jax_loss, params, data) if per_sample else None

  def flops(program, *args):
    cost = program.lower(*args).compile().cost_analysis()
    return float((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])

  def step_flops(with_mala: bool) -> float:
    # The chains vmapped, whatever the run used: a lax.map over them is another while loop, whose
    # body XLA would count once. The arithmetic of the chains is the same either way.
    settings = SGLDSettings(
      mala=with_mala, mala_every=1, num_chains=chains, num_draws=2, chain_loop="vmap", **SETTINGS
    )
    program = placement.chains_program(jax_loss, settings, False, None, None, None, per_sample)
    return flops(program, params, data, keys, None, None, star)

  every = SGLDSettings(**SETTINGS).mala_every
  plain = step_flops(False)
  per_step = plain + (step_flops(True) - plain) / every if mala else plain
  total = per_step * draws
  if per_sample:
    total += flops(placement.per_sample_program(jax_loss, 256), params, data)
  return total


def torch_model(inputs: dict):
  """The same network in torch, with the weights of ``inputs`` copied in."""
  import torch

  class NextToken(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.embed = torch.nn.Embedding(VOCAB, EMBED)
      self.fc1 = torch.nn.Linear(EMBED, HIDDEN)
      self.fc2 = torch.nn.Linear(HIDDEN, EMBED)

    def forward(self, input_ids):
      e = self.embed(input_ids)
      h = e + self.fc2(torch.relu(self.fc1(e)))
      return h @ self.embed.weight.T

  model = NextToken()
  with torch.no_grad():  # torch's Linear stores (out, in): the transposes of the JAX matrices.
    model.embed.weight.copy_(torch.from_numpy(inputs["embed"]))
    model.fc1.weight.copy_(torch.from_numpy(inputs["w1"].T.copy()))
    model.fc1.bias.copy_(torch.from_numpy(inputs["b1"]))
    model.fc2.weight.copy_(torch.from_numpy(inputs["w2"].T.copy()))
    model.fc2.bias.copy_(torch.from_numpy(inputs["b2"]))
  return model


def check_same_loss(inputs: dict) -> tuple[float, float]:
  """The loss of both models on the whole dataset, through devinterp's own per-token loss: the
  weights were copied correctly only if they agree."""
  import jax.numpy as jnp
  import torch
  from devinterp.slt.lm_loss import compute_per_token_loss

  ids = inputs["input_ids"]
  with torch.no_grad():
    ours_torch = float(
      compute_per_token_loss(torch_model(inputs), torch.from_numpy(ids).long()).mean()
    )
  ours_jax = float(
    jax_loss(
      {k: jnp.asarray(inputs[k]) for k in ("embed", "w1", "b1", "w2", "b2")},
      {"input_ids": jnp.asarray(ids)},
    )
  )
  if not abs(ours_torch - ours_jax) <= 1e-4 * abs(ours_jax):
    raise AssertionError(f"the torch and JAX models disagree: loss {ours_torch} vs {ours_jax}")
  return ours_torch, ours_jax


def run_devinterp(inputs: dict, chains: int, draws: int) -> dict:
  import torch

  out = peers.devinterp_llc(
    torch_model(inputs),
    inputs["input_ids"],
    lr=SETTINGS["step_size"],
    n_beta=SETTINGS["nbeta"],
    num_chains=chains,
    num_draws=draws,
    batch_size=SETTINGS["batch_size"],
    localization=SETTINGS["localization"],
  )
  return {**out, "platform": "cuda" if torch.cuda.is_available() else "cpu"}


# ----------------------------------------------------------------------------------------------
# the parent
def matmul_peak_gflops(size: int = 1024, repeats: int = 20) -> float:
  """Best float32 ``size × size`` matmul rate of this machine, in GFLOP/s (through XLA)."""
  import jax

  from benchmarks.timing import best_time

  a = jax.random.normal(jax.random.PRNGKey(0), (size, size))
  f = jax.jit(lambda x: x @ x)
  return 2 * size**3 / best_time(lambda: f(a), repeats) / 1e9


def child(tool: str, inputs_path: str, workload: str) -> tuple[float, dict]:
  return timing.run_worker(
    "benchmarks.llc_vs_devinterp",
    f"--worker={tool}",
    f"--inputs={inputs_path}",
    f"--workload={workload}",
  )


def main(argv):
  del argv
  if FLAGS.worker:
    inputs = dict(np.load(FLAGS.inputs))
    chains, draws = WORKLOADS[FLAGS.workload]
    if FLAGS.worker == "devinterp":
      out = run_devinterp(inputs, chains, draws)
    else:
      variant = {"mechjax": "defaults"}.get(FLAGS.worker, FLAGS.worker.removeprefix("mechjax_"))
      out = run_mechjax(inputs, chains, draws, variant)
    print(json.dumps(out))
    return
  try:
    import devinterp  # noqa: F401
    import torch
  except ImportError as e:
    sys.exit(
      f"error: this benchmark needs torch and devinterp ({e}); install them with "
      "`pip install -r benchmarks/requirements.txt`"
    )
  import jax

  ids = np.random.default_rng(1).integers(0, VOCAB, (NUM_SEQUENCES, SEQ)).astype(np.int32)
  weights, loss = pretrain(init_weights(), ids)
  loss_torch, _ = check_same_loss({"input_ids": ids, **weights})
  peak = matmul_peak_gflops()
  print(
    f"platform: {jax.devices()[0].platform} ({os.cpu_count()} cores); torch {torch.__version__}, "
    "devinterp "
    f"{__import__('importlib.metadata').metadata.version('devinterp')}; matmul peak {peak:.0f} "
    "GFLOP/s "
    f"(float32 1024², before the runs)"
  )
  print(
    f"model: {sum(v.size for v in weights.values()):,} parameters, pretrained to loss {loss:.4f} "
    f"(devinterp's loss of the copied torch model: {loss_torch:.4f}; uniform: "
    f"{np.log(VOCAB):.4f}); data: {NUM_SEQUENCES} sequences of {SEQ} tokens"
  )
  print(
    f"settings: batch {SETTINGS['batch_size']}, ε = {SETTINGS['step_size']:g}, nβ = "
    f"{SETTINGS['nbeta']:g}, "
    f"γ = {SETTINGS['localization']:g}; times are whole processes, best of {FLAGS.repeats}\n"
  )
  tools = ["devinterp", "mechjax", "mechjax_one_device", "mechjax_tuned"]
  header = (
    f"{'workload':>9s} {'tool':>18s} {'wall (s)':>9s} {'LLC mean ± sd (chains)':>24s} "
    f"{'speed-up':>9s} {'GFLOP/s':>8s} {'of peak':>8s} {'peak memory (MiB)':>18s}"
  )
  header += "\n(GFLOP/s: XLA's FLOP count of the sampling program over the whole-process wall time)"
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "inputs.npz")
    np.savez(path, input_ids=ids, **weights)
    for workload in FLAGS.workloads:
      best = {}
      for r in range(FLAGS.repeats):
        for tool in (
          tools if r % 2 == 0 else tools[::-1]
        ):  # alternate the order: drift hits both sides
          wall, out = child(tool, path, workload)
          if tool not in best or wall < best[tool][0]:
            best[tool] = (wall, out)
      for tool in tools:
        if tool != "devinterp":
          best[tool][1]["flops"] = mechjax_flops(
            dict(np.load(path)),
            *WORKLOADS[workload],
            mala=tool != "mechjax_tuned",
            per_sample=best[tool][1]["star_loss"] == "per_sample",
          )
      rows.append((workload, best))
  peak = max(
    peak, matmul_peak_gflops()
  )  # measured again after the runs: the best of both is the peak
  print(f"matmul peak (best of before and after the runs): {peak:.0f} GFLOP/s\n")
  print(header)
  summary = {}
  for workload, best in rows:
    base = best["devinterp"][0]
    for tool in tools:
      wall, out = best[tool]
      rate = out.get("flops", float("nan")) / wall / 1e9 if tool != "devinterp" else float("nan")
      frac = f"{rate / peak:8.0%}" if np.isfinite(rate) else f"{'':>8s}"
      rate_s = f"{rate:8.1f}" if np.isfinite(rate) else f"{'':>8s}"
      print(
        f"{workload:>9s} {tool:>18s} {wall:9.1f} {out['llc_mean']:14.2f} ± {out['llc_std']:7.2f} "
        f"{base / wall:8.2f}x {rate_s} {frac} {out['peak_rss_mib']:18.0f}"
      )
      summary[f"{workload}/{tool}"] = {"wall_s": wall, **out}
  print("\n" + json.dumps({"matmul_peak_gflops": peak, "results": summary}))


if __name__ == "__main__":
  app.run(main)
