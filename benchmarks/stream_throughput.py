"""The LLC with its windows streamed from a token file on disk (``slt.Streamed``) against the same
windows held in memory, side by side in one process.

    python -m benchmarks.stream_throughput            # 8 chains × 1,000 draws, best of 2

The corpus is written to a temporary token file first: ``--tokens`` ids of a seeded random bigram
chain over :mod:`benchmarks.attention_workload`'s vocabulary (64), cut into non-overlapping windows
of 16 (``tokens.disk_windows``: 65,536 of them by default). The model is that module's attention-
only transformer (42,176 parameters, random weights). Both calls take ``estimate_llc``'s defaults
and the same key, after :func:`mechjax.use_all_cpu_cores`: here the per-sample path for ``L_B(w*)``
in both (the streamed call first streams the corpus once through the loss at ``w*``, inside its
timed call). The in-memory call gets the windows as an int32 array, the streamed one
``Streamed(disk_windows(ids, 16), dtype=np.int32)`` with its default part of 64 steps. Each is
called once to compile, then ``--repeats`` times alternately; the best sampling times are compared.
The two estimates are the same chains, so they must agree to float rounding (1e-6 relative), which
the benchmark checks. The weights are random, so ``w*`` is no minimum and the LLC's value means
nothing here."""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from absl import app
from absl import flags

from benchmarks import attention_workload
from mechjax import cli

flags.DEFINE_integer("chains", 8, "SGLD chains.")
flags.DEFINE_integer("draws", 1000, "SGLD draws per chain.")
flags.DEFINE_integer("tokens", 2**20, "Ids in the token file.")
flags.DEFINE_integer("repeats", 2, "Timed calls of each, alternating; the best is kept.")
FLAGS = flags.FLAGS


def bigram_ids(num: int, vocab: int, seed: int = 0) -> np.ndarray:
  """``num`` ids of a random bigram chain: each id has four successors, drawn uniformly."""
  rng = np.random.default_rng(seed)
  successors = rng.integers(1, vocab, (vocab, 4))
  ids = np.empty(num, np.int64)
  ids[0] = 1
  choices = rng.integers(0, 4, num)
  for i in range(1, num):
    ids[i] = successors[ids[i - 1], choices[i]]
  return ids


def main(argv):
  del argv
  import mechjax

  mechjax.use_all_cpu_cores()
  import jax

  from mechjax import slt
  from mechjax.data import tokens

  net, params, _ = attention_workload.inputs()
  loss = attention_workload.mean_loss(net)
  settings = slt.SGLDSettings(
    **attention_workload.SGLD, num_chains=FLAGS.chains, num_draws=FLAGS.draws
  )
  with tempfile.TemporaryDirectory() as tmp:
    path = tokens.write_tokens(
      os.path.join(tmp, "corpus.tokens"),
      [bigram_ids(FLAGS.tokens - 1, attention_workload.VOCAB)],
      0,
      vocab_size=attention_workload.VOCAB,
    )
    windows = tokens.disk_windows(tokens.read_tokens(path), attention_workload.LENGTH)
    data = {
      "in memory": np.asarray(windows, np.int32),
      "streamed": slt.Streamed(windows, dtype=np.int32),
    }
    key = jax.random.key(2)
    run = lambda d: slt.estimate_llc(loss, params, d, key=key, settings=settings)  # noqa: E731
    results = {name: run(d) for name, d in data.items()}  # compiles
    best = {name: float("inf") for name in data}
    for r in range(FLAGS.repeats):
      for name in data if r % 2 == 0 else list(data)[::-1]:
        t = time.perf_counter()
        results[name] = run(data[name])
        best[name] = min(best[name], time.perf_counter() - t)
  a, b = results["in memory"], results["streamed"]
  gap = float(np.max(np.abs(a.llc_per_chain - b.llc_per_chain) / np.abs(a.llc_per_chain)))
  print(
    f"platform: {jax.devices()[0].platform} × {len(jax.devices())} devices ({os.cpu_count()} "
    f"cores), jax {jax.__version__}; {FLAGS.chains} chains × {FLAGS.draws} draws, batch 32; "
    f"{len(windows):,} windows of {attention_workload.LENGTH} from a token file of "
    f"{FLAGS.tokens:,} ids; star loss {a.diagnostics['star_loss']} and "
    f"{b.diagnostics['star_loss']}\n"
  )
  print(f"{'data':>10s} {'sampling (s)':>13s} {'steps/s':>9s}")
  steps = FLAGS.chains * settings.num_steps
  for name in data:
    print(f"{name:>10s} {best[name]:13.2f} {steps / best[name]:9.0f}")
  print(
    f"\nstreamed throughput / in-memory throughput: {best['in memory'] / best['streamed']:.2f}; "
    f"the per-chain LLCs agree to {gap:.1e} relative"
  )
  # The same chains: with XLA's default optimizations the parts' programs round a few ulps
  # differently from the one long scan (with the test suite's compile settings they are equal).
  if not gap <= 1e-6:
    raise AssertionError(f"the estimates differ: {a.llc_per_chain} vs {b.llc_per_chain}")


if __name__ == "__main__":
  for name in ("chains", "draws", "tokens", "repeats"):
    cli.positive_int(name)
  app.run(main)
