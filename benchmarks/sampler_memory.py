"""Peak resident memory of a sampling run against its number of draws: it must not grow.

    python -m benchmarks.sampler_memory                  # 1,000 and 5,000 draws, LLC and χ

Each run is a fresh Python process, measured from outside (``ru_maxrss`` of the process, taken by
:func:`benchmarks.timing.run_worker`), so nothing of this parent counts. Two workloads, with the
library's defaults beyond the settings named here, on an attention-only transformer (2 layers,
``d_model`` 64, 4 heads, vocabulary 64, sequences of 16: 42,176 parameters, random weights) and
4,096 sequences of :mod:`mechjax.data.repeats`:

* **llc**: :func:`mechjax.slt.estimate_llc`, 4 chains, batch 32;
* **chi**: :func:`mechjax.slt.estimate_susceptibilities` with every head a component (8) and the
  per-token losses of 8 probe sequences as observables (120 probes), 2 chains, batch 32.

What would grow with the draws if anything were kept per draw: the traces are ``(chains, draws)``
floats (80 KB at 5,000 draws for the LLC); the moments of the susceptibilities are streamed
(:mod:`mechjax.slt.moments`). The table prints each workload's peak at both lengths, their ratio and
difference, and the wall time.
"""

from __future__ import annotations

import json

from absl import app
from absl import flags

from benchmarks import attention_workload
from benchmarks import timing
from mechjax import cli

WORKLOADS = ("llc", "chi")
flags.DEFINE_list("draws", ["1000", "5000"], "Draws per chain to compare (two or more).")
flags.DEFINE_list("workloads", list(WORKLOADS), f"Any of {', '.join(WORKLOADS)}.")
flags.DEFINE_enum("worker", None, list(WORKLOADS), "Internal: run one workload.")
flags.DEFINE_integer("worker_draws", 1000, "Internal: the draws of that run.")
FLAGS = flags.FLAGS


def worker(workload: str, draws: int) -> dict:
  import jax
  import numpy as np

  from mechjax import slt
  from mechjax.data import repeats
  from mechjax.models import transformer

  net, params, tokens = attention_workload.inputs()
  settings = slt.SGLDSettings(**attention_workload.SGLD, num_draws=draws, num_burnin=0)
  per_token = attention_workload.token_losses(net)
  if workload == "llc":
    mean_loss = attention_workload.mean_loss(net)
    res = slt.estimate_llc(mean_loss, params, tokens, key=jax.random.key(2), settings=settings)
    return {"estimate": float(res.llc_mean)}
  probes = repeats.sample(
    jax.random.key(3), 8, attention_workload.LENGTH, attention_workload.VOCAB, 0.5
  )["tokens"]
  res = slt.estimate_susceptibilities(
    per_token,
    params,
    tokens,
    probes,
    key=jax.random.key(2),
    settings=settings,
    num_chains=2,
    components=transformer.head_masks(params, 2, 4),
    eval_size=256,
  )
  return {"estimate": float(np.mean(np.abs(res.chi)))}


def main(argv):
  del argv
  if FLAGS.worker:
    print(json.dumps(worker(FLAGS.worker, FLAGS.worker_draws)))
    return
  draws = [int(d) for d in FLAGS.draws]
  print(f"{'workload':<9} {'draws':>6} {'peak MiB':>9} {'wall s':>7}")
  for workload in FLAGS.workloads:
    rows = []
    for d in draws:
      wall, out = timing.run_worker(
        "benchmarks.sampler_memory", f"--worker={workload}", f"--worker_draws={d}"
      )
      rows.append((d, out["peak_rss_mib"], wall))
      print(f"{workload:<9} {d:>6} {out['peak_rss_mib']:>9.1f} {wall:>7.1f}", flush=True)
    (d0, m0, _), (d1, m1, _) = rows[0], rows[-1]
    print(
      f"{workload}: peak at {d1} draws / at {d0} draws = {m1 / m0:.3f} ({m1 - m0:+.1f} MiB)",
      flush=True,
    )


if __name__ == "__main__":
  cli.positive_int("worker_draws", minimum=1)
  app.run(main)
