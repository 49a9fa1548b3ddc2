"""The LLC of a pythia-14m-shaped language model, mechjax against devinterp 2.0.1, whole process
against whole process, and the forward pass against transformers'.

    pip install -r benchmarks/requirements.txt   # torch, devinterp, transformers (the bench extra)
    python -m benchmarks.pretrained_llc_vs_devinterp

The model is a randomly initialised ``GPTNeoXForCausalLM`` with pythia-14m's architecture (6
layers, d_model 128, 4 heads, MLP 512, partial rotary 0.25, parallel residual, vocabulary 50,304,
untied unembedding; 14.1M parameters), built by transformers in this parent process from a seed.
The data are 1,024 windows of 32 tokens from a seeded random bigram chain over 1,024 of the
vocabulary's ids (each id has 4 successors), so that there is something to learn. The parent trains
the model briefly in torch (Adam, ``--pretrain_steps``) so that ``w*`` is nearer a minimum, saves it
with ``save_pretrained`` (``config.json`` and ``model.safetensors``), and checks that
``mechjax.models.pretrained.load`` of that directory gives transformers' logits.

Then, per repeat, it starts a fresh Python process per tool, which reads the checkpoint and the
windows and prints its LLC:

* ``devinterp``: ``devinterp.slt.llc.llc`` on the transformers model (its own next-token loss);
* ``mechjax``: the README's path: ``mechjax.use_all_cpu_cores()``, ``pretrained.load`` of the same
  directory, and ``estimate_llc`` on ``pretrained.lm_losses(model)``.

Both get devinterp's defaults for the chains, draws and batch (4 chains × 200 draws, batch 32) and
the same ε = 1e-4, nβ = 30, γ = 100 and no burn-in; everything else is each tool's default. The
measured time of a tool is its whole process, start to exit (imports, loading, compiling,
sampling), and its peak memory is the process's own peak resident set. The forward rate is
measured in this process, warm, best of ``--forward_repeats``: mechjax's jitted ``apply`` against
transformers' ``model(ids)`` under ``torch.no_grad()``, on 8 windows of 256 tokens.
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

from benchmarks import peers
from benchmarks import timing
from benchmarks.pythia import PYTHIA_14M
from mechjax import cli

SEQ, NUM_WINDOWS, ACTIVE, SUCCESSORS = 32, 1024, 1024, 4
SETTINGS = dict(step_size=1e-4, nbeta=30.0, localization=100.0)
DEVINTERP_DEFAULTS = dict(num_chains=4, num_draws=200, batch_size=32)  # devinterp.slt.sampling
FORWARD_SHAPE = (8, 256)

flags.DEFINE_integer("repeats", 1, "Whole-process runs per tool, alternating; the best is kept.")
flags.DEFINE_integer("pretrain_steps", 100, "Adam steps (torch) before sampling.")
flags.DEFINE_integer("forward_repeats", 10, "Timed forward passes per tool; the best is kept.")
flags.DEFINE_enum("worker", None, ["mechjax", "devinterp"], "Internal: run one tool.")
flags.DEFINE_string("checkpoint", None, "Internal: the checkpoint directory of a worker.")
cli.positive_int("repeats")
cli.positive_int("forward_repeats")
FLAGS = flags.FLAGS


def bigram_windows(seed: int = 0) -> np.ndarray:
  """``(NUM_WINDOWS, SEQ)`` int32 windows of a random bigram chain over ``ACTIVE`` ids."""
  rng = np.random.default_rng(seed)
  ids = rng.choice(PYTHIA_14M["vocab_size"], ACTIVE, replace=False)
  successors = rng.integers(0, ACTIVE, (ACTIVE, SUCCESSORS))
  state = rng.integers(0, ACTIVE, NUM_WINDOWS)
  out = np.empty((NUM_WINDOWS, SEQ), np.int64)
  for t in range(SEQ):
    out[:, t] = state
    state = successors[state, rng.integers(0, SUCCESSORS, NUM_WINDOWS)]
  return ids[out].astype(np.int32)


# ----------------------------------------------------------------------------------------------
# workers
def run_mechjax(checkpoint: str, windows: np.ndarray) -> dict:
  import mechjax

  mechjax.use_all_cpu_cores()
  import jax

  from mechjax import slt
  from mechjax.models import pretrained

  model, params = pretrained.load(checkpoint)
  loss_fn, _ = pretrained.lm_losses(model)
  res = slt.estimate_llc(
    loss_fn,
    params,
    windows,
    key=jax.random.key(0),
    num_burnin=0,
    **DEVINTERP_DEFAULTS,
    **SETTINGS,
  )
  return {"llc_mean": res.llc_mean, "llc_std": res.llc_std, "devices": len(jax.devices())}


def run_devinterp(checkpoint: str, windows: np.ndarray) -> dict:
  from transformers import GPTNeoXForCausalLM

  return peers.devinterp_llc(
    GPTNeoXForCausalLM.from_pretrained(checkpoint),
    windows,
    lr=SETTINGS["step_size"],
    n_beta=SETTINGS["nbeta"],
    localization=SETTINGS["localization"],
  )


# ----------------------------------------------------------------------------------------------
# the parent
def build_checkpoint(folder: str, windows: np.ndarray, steps: int) -> tuple[float, float, int]:
  """Builds, briefly trains and saves the model; returns the loss before and after, and the number
  of parameters."""
  import torch
  from transformers import GPTNeoXConfig
  from transformers import GPTNeoXForCausalLM

  torch.manual_seed(0)
  model = GPTNeoXForCausalLM(GPTNeoXConfig(**PYTHIA_14M))
  ids = torch.from_numpy(windows).long()
  loss = lambda batch: model(batch, labels=batch).loss
  with torch.no_grad():
    before = float(loss(ids[:64]))
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  gen = torch.Generator().manual_seed(0)
  for _ in range(steps):
    batch = ids[torch.randint(0, len(ids), (16,), generator=gen)]
    opt.zero_grad()
    loss(batch).backward()
    opt.step()
  with torch.no_grad():
    after = float(loss(ids[:64]))
  model.save_pretrained(folder, safe_serialization=True)
  return before, after, sum(p.numel() for p in model.parameters())


def forward_rates(folder: str, repeats: int) -> tuple[float, float, float]:
  """Tokens per second of mechjax's and transformers' forward passes, and their largest logit
  difference."""
  import jax
  import torch
  from transformers import GPTNeoXForCausalLM

  from mechjax.models import pretrained

  ids = np.random.default_rng(2).integers(0, PYTHIA_14M["vocab_size"], FORWARD_SHAPE)
  ids = ids.astype(np.int32)
  model, params = pretrained.load(folder)
  forward = jax.jit(lambda p, t: model.apply({"params": p}, t))
  ours = timing.best_time(lambda: forward(params, ids), repeats)
  logits = np.asarray(forward(params, ids))
  hf = GPTNeoXForCausalLM.from_pretrained(folder).eval()
  t_ids = torch.from_numpy(ids).long()
  with torch.no_grad():
    theirs_logits = hf(t_ids, use_cache=False).logits.numpy()
    hf(t_ids, use_cache=False)
    times = []
    for _ in range(repeats):
      t = time.perf_counter()
      hf(t_ids, use_cache=False)
      times.append(time.perf_counter() - t)
  tokens = ids.size
  return tokens / ours, tokens / min(times), float(np.max(np.abs(logits - theirs_logits)))


def main(argv):
  del argv
  if FLAGS.worker:
    windows = np.load(os.path.join(FLAGS.checkpoint, "windows.npy"))
    run = run_mechjax if FLAGS.worker == "mechjax" else run_devinterp
    print(json.dumps(run(FLAGS.checkpoint, windows)))
    return
  try:
    import devinterp  # noqa: F401
    import torch
    import transformers
  except ImportError as e:
    sys.exit(
      f"error: this benchmark needs torch, transformers and devinterp ({e}); install them with "
      "`pip install -r benchmarks/requirements.txt`"
    )
  import jax

  windows = bigram_windows()
  with tempfile.TemporaryDirectory() as tmp:
    folder = os.path.join(tmp, "pythia-14m-random")
    before, after, n_params = build_checkpoint(folder, windows, FLAGS.pretrain_steps)
    np.save(os.path.join(folder, "windows.npy"), windows)
    ours_rate, theirs_rate, logit_diff = forward_rates(folder, FLAGS.forward_repeats)
    if not logit_diff <= 1e-3:
      raise AssertionError(f"mechjax's and transformers' logits differ by {logit_diff:.2e}")
    tools = ["devinterp", "mechjax"]
    best = {}
    for r in range(FLAGS.repeats):
      for tool in tools if r % 2 == 0 else tools[::-1]:
        wall, out = timing.run_worker(
          "benchmarks.pretrained_llc_vs_devinterp", f"--worker={tool}", f"--checkpoint={folder}"
        )
        if tool not in best or wall < best[tool][0]:
          best[tool] = (wall, out)
  meta = __import__("importlib.metadata").metadata.version
  print(
    f"platform: {jax.devices()[0].platform} ({os.cpu_count()} cores); torch {torch.__version__}, "
    f"transformers {transformers.__version__}, devinterp {meta('devinterp')}, jax {jax.__version__}"
  )
  print(
    f"model: GPT-NeoX with pythia-14m's shape, {n_params:,} parameters, random init then "
    f"{FLAGS.pretrain_steps} Adam steps (loss {before:.3f} → {after:.3f}; uniform "
    f"{np.log(PYTHIA_14M['vocab_size']):.3f}); data: {NUM_WINDOWS} windows of {SEQ} tokens"
  )
  print(
    f"settings: {DEVINTERP_DEFAULTS['num_chains']} chains × {DEVINTERP_DEFAULTS['num_draws']} "
    f"draws, batch {DEVINTERP_DEFAULTS['batch_size']} (devinterp's defaults), ε = "
    f"{SETTINGS['step_size']:g}, nβ = {SETTINGS['nbeta']:g}, γ = {SETTINGS['localization']:g}, no "
    f"burn-in; whole processes, best of {FLAGS.repeats}\n"
  )
  print(
    f"{'tool':>10s} {'wall (s)':>9s} {'LLC mean ± sd (chains)':>24s} {'speed-up':>9s} "
    f"{'peak memory (MiB)':>18s}"
  )
  base = best["devinterp"][0]
  for tool in tools:
    wall, out = best[tool]
    print(
      f"{tool:>10s} {wall:9.1f} {out['llc_mean']:14.2f} ± {out['llc_std']:7.2f} "
      f"{base / wall:8.2f}x {out['peak_rss_mib']:18.0f}"
    )
  (_, a), (_, b) = best["devinterp"], best["mechjax"]
  gap, spread = abs(a["llc_mean"] - b["llc_mean"]), float(np.hypot(a["llc_std"], b["llc_std"]))
  print(
    f"\nLLC difference {gap:.2f} against the chains' combined spread {spread:.2f}: "
    f"{'within' if gap <= spread else 'OUTSIDE'} it"
  )
  print(
    f"forward pass, {FORWARD_SHAPE[0]} × {FORWARD_SHAPE[1]} tokens: mechjax {ours_rate:,.0f} "
    f"tokens/s, transformers {theirs_rate:,.0f} tokens/s ({ours_rate / theirs_rate:.2f}x); logits "
    f"agree to {logit_diff:.1e}"
  )
  summary = {tool: {"wall_s": w, **o} for tool, (w, o) in best.items()}
  summary["forward_tokens_per_s"] = {"mechjax": ours_rate, "transformers": theirs_rate}
  print("\n" + json.dumps(summary))


if __name__ == "__main__":
  app.run(main)
