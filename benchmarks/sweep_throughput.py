"""A seed sweep as separate processes against the same seeds in one vmapped program.

    python -m benchmarks.sweep_throughput  # 8 seeds of the Fourier amplitude task

Both sides run ``experiments.fourier_phase`` on the amplitude task with the same flags, as a user
would:

* **separate**: ``--members`` sweep members, each ``--num_seeds=1`` in its own process (what a naive
  sweep over seeds does), through the local backend of ``launch.sweep``, ``--parallel=1`` and
  ``--parallel=2``;
* **vmapped**: one process with ``--num_seeds=<members>``, every seed in one compiled program.

Wall times include process start, JAX import, compilation, training, evaluation and writing the
results: the whole cost of a sweep. Reported side by side, with the ratio separate / vmapped.
"""

import os
import subprocess
import sys
import tempfile
import time

from absl import flags

from launch import lib
from mechjax import cli

flags.DEFINE_integer("members", 8, "Seeds in the sweep.")
flags.DEFINE_integer("steps", 3000, "Training steps per seed.")
cli.positive_int("members", minimum=2)
cli.positive_int("steps")
FLAGS = flags.FLAGS

EXPERIMENT = "experiments.fourier_phase"


def _common():
  return {
    "tasks": "amplitude",
    "steps": FLAGS.steps,
    "log_every": FLAGS.steps // 4,
    "checkpoint_every": FLAGS.steps,
    "eval_samples": 1024,
  }


def _timed(cmd, cwd):
  t = time.perf_counter()
  done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
  if done.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
  return time.perf_counter() - t


def main(argv):
  del argv
  n = FLAGS.members
  with tempfile.TemporaryDirectory() as tmp:
    sweep = os.path.join(tmp, "sweep.py")
    with open(sweep, "w") as f:
      f.write(
        f"EXPERIMENT = {EXPERIMENT!r}\n\ndef get_sweep():\n  return "
        f"{[{**_common(), 'num_seeds': 1, 'seed': i} for i in range(n)]!r}\n"
      )
    rows = []
    for parallel in (1, 2):
      cmd = [
        sys.executable,
        "-m",
        "launch.sweep",
        f"--sweep={sweep}",
        f"--root={os.path.join(tmp, f'p{parallel}')}",
        f"--parallel={parallel}",
      ]
      rows.append((f"{n} processes, --parallel={parallel}", _timed(cmd, lib.ROOT_DIR)))
    member = lib.Member(EXPERIMENT, {**_common(), "num_seeds": n})
    vmapped = _timed(member.command(os.path.join(tmp, "vmapped")), lib.ROOT_DIR)
  print(
    f"{EXPERIMENT} (amplitude task, {FLAGS.steps} steps per seed), {n} seeds, {os.cpu_count()} CPU "
    "cores"
  )
  print(f"{'':34s}{'wall (s)':>10s}{'separate / vmapped':>20s}")
  print(f"{'1 process, --num_seeds=' + str(n) + ' (vmapped)':34s}{vmapped:10.1f}")
  for name, t in rows:
    print(f"{name:34s}{t:10.1f}{t / vmapped:19.2f}x")


if __name__ == "__main__":
  cli.execute(main)
