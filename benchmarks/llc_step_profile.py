"""Where one SGLD chain step of the pythia-14m-shaped LLC benchmark spends its time, from XLA's own
op times, for docs/benchmarks.md "Where the pythia-14m-shaped LLC run's time goes".

    python -m benchmarks.llc_step_profile

The model is ``benchmarks.pretrained_llc_vs_devinterp``'s architecture (GPT-NeoX with pythia-14m's
shape, vocabulary 50,304) with random weights, on 1,024 random windows of 32 tokens, sampled by
:func:`mechjax.slt.estimate_llc` with that benchmark's settings (batch 32, ε = 1e-4, nβ = 30,
γ = 100) after ``mechjax.use_all_cpu_cores()``. The call runs once to compile, then again under
``jax.profiler``; every op of the trace that belongs to the sampler's compiled program is given a
part of the step by the op name JAX recorded for it in that program's optimised HLO (dumped with
``--xla_dump_to``): the head (the loop over the vocabulary in ``logsumexp_head``), the MLPs, the
attention, the Langevin noise (threefry and its conversion to normals), and the rest. The ops'
own times are summed; the step's wall time is the sampling call's time over the steps.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

from absl import app
from absl import flags

from mechjax import cli
from mechjax.slt import noise

flags.DEFINE_integer("num_draws", 16, "Steps of the chain that is traced.")
flags.DEFINE_integer("num_chains", 1, "Chains (run one after another on a CPU).")
flags.DEFINE_bool("mala", True, "The sampler's MALA check (every 16th step by default).")
cli.positive_int("num_draws")
cli.positive_int("num_chains")
FLAGS = flags.FLAGS

PARTS = (  # (part, a pattern of the op names that belong to it), the first match wins
  ("noise", rf"{noise.SCOPE}|_uniform|_normal|threefry"),
  ("MLPs", r"/mlp_\d"),
  ("attention", r"/attn_\d|/attention"),
  ("head", r"DecoderLM/while"),
)


def op_names(dump: str, events: list) -> dict[str, str]:
  """``{op: op_name}`` of the dumped sampler program (a ``jit_run`` module's optimised HLO in
  ``dump``) whose ops cover the most of the traced ops' time; ``"?"`` for ops that recorded none."""
  best, covered = {}, -1.0
  for path in glob.glob(os.path.join(dump, "*jit_run.cpu_after_optimizations.txt")):
    names = {}
    with open(path) as f:
      for line in f:
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = .*?metadata=\{([^}]*)\}", line)
        if m:
          op = re.search(r'op_name="([^"]*)"', m.group(2))
          names[m.group(1)] = op.group(1) if op else "?"
    time_in = sum(e["dur"] for e in events if e["name"] in names)
    if time_in > covered:
      best, covered = names, time_in
  if not best:
    sys.exit(f"error: no sampler program was dumped to {dump}")
  return best


def part_of(op_name: str) -> str:
  for part, pattern in PARTS:
    if re.search(pattern, op_name):
      return part
  return "rest"


def main(argv):
  del argv
  dump = tempfile.mkdtemp(prefix="mechjax-profile-")
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
    " --xla_dump_hlo_pass_re=^$"
  ).strip()
  import warnings

  import mechjax

  mechjax.use_all_cpu_cores()
  import jax
  import jax.numpy as jnp
  import numpy as np

  from benchmarks import pythia
  from mechjax import slt
  from mechjax.models import pretrained

  model = pythia.model(pythia.PYTHIA_14M)
  params = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  loss_fn, _ = pretrained.lm_losses(model)
  windows = np.random.default_rng(0).integers(0, 50304, (1024, 32)).astype(np.int32)

  def run():
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # a 16-step chain has not mixed, and is not meant to
      t = time.perf_counter()
      slt.estimate_llc(
        loss_fn, params, windows, key=jax.random.key(0), num_burnin=0, num_draws=FLAGS.num_draws,
        num_chains=FLAGS.num_chains, batch_size=32, step_size=1e-4, nbeta=30.0,
        localization=100.0, mala=FLAGS.mala,
      )  # fmt: skip
      return time.perf_counter() - t

  run()
  trace = tempfile.mkdtemp(prefix="mechjax-trace-")
  jax.profiler.start_trace(trace)
  wall = run()
  jax.profiler.stop_trace()
  path = glob.glob(os.path.join(trace, "**", "*.trace.json.gz"), recursive=True)[0]
  with gzip.open(path) as f:
    events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
  names = op_names(dump, events)
  seconds = collections.Counter()
  for e in events:
    if e["name"] in names:
      seconds[part_of(names[e["name"]])] += e["dur"] / 1e6
  steps = FLAGS.num_draws * FLAGS.num_chains
  print(
    f"{steps} chain steps; the sampling call {wall:.2f} s in all ({wall / steps:.3f} s per step, "
    "the loss at w* over the windows and the checks included)"
  )
  print(f"{'part':>10s} {'s per step':>11s}")
  for part, _ in (*PARTS, ("rest", "")):
    print(f"{part:>10s} {seconds[part] / steps:11.3f}")
  print(f"{'ops in all':>10s} {sum(seconds.values()) / steps:11.3f}")
  if sum(seconds.values()) < 0.5 * wall:
    print(
      "note: under half of the call's time was matched to the sampler's program's ops, so the "
      "parts above are not the step's (more than one chain runs as programs of their own)"
    )


if __name__ == "__main__":
  app.run(main)
