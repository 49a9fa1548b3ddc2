"""Run a sweep: every member of a sweep file, locally, on a Cloud TPU VM, or as a SLURM job array.

    python -m launch.sweep --sweep=launch/sweeps/tensor_similarity_backdoor.py \\
        --root=sweeps/backdoor --parallel=2
    python -m launch.sweep --sweep=launch/sweeps/fourier_phase.py --root=sweeps/fp \\
        --backend=tpu_vm \\
        --tpu_name=my-v5e-16 --zone=us-west4-a --repo=https://github.com/ORG/mechjax.git --dry_run
    python -m launch.sweep --sweep=launch/sweeps/polymorphism.py --root=/shared/sweeps/poly \\
        --backend=slurm \\
        --partition=gpu --account=my-lab --qos=normal --gpus_per_node=1 --dry_run

Each member's workdir is ``ROOT/<stable hash of its flags>``. Running the same command again skips
the finished members and resumes the interrupted ones from their checkpoints. At the end (local
backend) ``ROOT/results.csv`` and ``ROOT/results.json`` hold one row per member: its flags, its
state and its flattened ``summary.json``. The exit status is 1 when any member failed.
"""

from __future__ import annotations

import shlex
import sys

from absl import flags

from launch import lib
from launch import slurm
from launch import tpu_vm
from mechjax import cli

BACKENDS = ("local", "tpu_vm", "slurm")

flags.DEFINE_string("sweep", None, "Path of a sweep file (launch/sweeps/<name>.py).")
flags.DEFINE_string(
  "root", None, "Folder of the sweep: one workdir per member, logs/, results.csv and results.json."
)
flags.DEFINE_enum("backend", "local", BACKENDS, "Where the members run.")
flags.DEFINE_integer("parallel", 1, "Local backend: members running at once.")
flags.DEFINE_bool(
  "dry_run", False, "Print the commands (and the state of each member) without running anything."
)
flags.DEFINE_integer("tail_lines", 20, "Lines of a failed member's log to print.")
flags.DEFINE_string("tpu_name", None, "tpu_vm: the TPU VM (or pod slice) name.")
flags.DEFINE_string("zone", None, "tpu_vm: its zone, e.g. us-west4-a.")
flags.DEFINE_string("project", None, "tpu_vm: the Google Cloud project (default: gcloud's).")
flags.DEFINE_string("repo", None, "tpu_vm: the git URL to clone on every worker.")
flags.DEFINE_string("remote_dir", "mechjax", "tpu_vm: the checkout's folder on the workers.")
flags.DEFINE_bool("skip_setup", False, "tpu_vm: do not (re)run the clone-and-install step.")
flags.DEFINE_string("partition", None, "slurm: the partition (default: the cluster's).")
flags.DEFINE_integer("timeout_min", 240, "slurm: time limit per member, in minutes.")
flags.DEFINE_integer("gpus_per_node", 1, "slurm: GPUs per member.")
flags.DEFINE_integer("cpus_per_task", 8, "slurm: CPUs per member.")
flags.DEFINE_integer("array_parallelism", 64, "slurm: array tasks running at once.")
flags.DEFINE_string("account", None, "slurm: the account to charge (sbatch --account).")
flags.DEFINE_string("qos", None, "slurm: the quality of service (sbatch --qos).")
flags.DEFINE_string("mem", None, "slurm: memory per node, e.g. 64G (sbatch --mem).")
flags.DEFINE_string("constraint", None, "slurm: node features, e.g. a100 (sbatch --constraint).")
flags.DEFINE_multi_string(
  "slurm_setup",
  [],
  "slurm: a line the batch script runs before the member, e.g. 'module load cuda'; repeatable.",
)
flags.DEFINE_multi_string(
  "slurm_param",
  [],
  "slurm: any other sbatch option as key=value, e.g. reservation=my-res; repeatable.",
)
flags.DEFINE_integer(
  "nodes", 1, "slurm: nodes per member; with more than one task, members run on jax.distributed."
)
flags.DEFINE_integer("tasks_per_node", 1, "slurm: tasks (JAX processes) per node per member.")
flags.DEFINE_enum(
  "slurm_executor",
  "slurm",
  ("slurm", "local", "debug"),
  "slurm: submitit's executor; local and debug run the array on this machine, without a cluster.",
)
flags.mark_flags_as_required(["sweep", "root"])
cli.positive_int("parallel")
cli.positive_int("tail_lines")
cli.positive_int("timeout_min")
cli.positive_int("gpus_per_node", minimum=0)
cli.positive_int("cpus_per_task")
cli.positive_int("array_parallelism")
cli.positive_int("nodes")
cli.positive_int("tasks_per_node")
FLAGS = flags.FLAGS


def _tpu_args_or_exit():
  missing = [
    n for n in ("tpu_name", "zone") + (() if FLAGS.skip_setup else ("repo",)) if not FLAGS[n].value
  ]
  if missing:
    print("error: --backend=tpu_vm needs " + ", ".join(f"--{n}" for n in missing), file=sys.stderr)
    sys.exit(2)


def main(argv):
  if len(argv) > 1:
    print(f"error: unexpected arguments {argv[1:]}; every setting is a --flag", file=sys.stderr)
    sys.exit(2)
  try:
    experiment, members, figure = lib.load_sweep(FLAGS.sweep)
  except lib.SweepError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  root = FLAGS.root
  print(f"{FLAGS.sweep}: {len(members)} member(s) of {experiment}, root {root}")

  if FLAGS.backend == "local":
    if FLAGS.dry_run:
      states = {m.id: lib.member_state(root, m) for m in members}
      print(lib.status_table(members, states))
      for m in members:
        print(shlex.join(m.command(root)))
      return
    import os

    os.makedirs(root, exist_ok=True)
    lib.write_manifest(root, experiment, members)
    states = lib.run_local(members, root, parallel=FLAGS.parallel, tail_lines=FLAGS.tail_lines)
    lib.aggregate(root, members, states, figure)
    failed = [mid for mid, s in states.items() if s != "done"]
    print(f"wrote {root}/results.csv and results.json" + (" and results.png" if figure else ""))
    if failed:
      print(f"{len(failed)} member(s) failed: {', '.join(failed)}", file=sys.stderr)
      sys.exit(1)
    return

  if FLAGS.backend == "tpu_vm":
    _tpu_args_or_exit()
    commands = (
      []
      if FLAGS.skip_setup
      else [
        tpu_vm.setup_command(
          FLAGS.tpu_name, FLAGS.zone, FLAGS.repo, project=FLAGS.project, directory=FLAGS.remote_dir
        )
      ]
    )
    commands += [
      tpu_vm.run_command(
        m, root, FLAGS.tpu_name, FLAGS.zone, project=FLAGS.project, directory=FLAGS.remote_dir
      )
      for m in members
    ]
    if FLAGS.dry_run:
      for c in commands:
        print(shlex.join(c))
      return
    import subprocess

    failed = 0
    for c in commands:
      print(f"$ {shlex.join(c)}", flush=True)
      rc = subprocess.run(c).returncode
      if rc != 0:
        failed += 1
        print(f"error: exit status {rc}", file=sys.stderr)
        if c is commands[0] and not FLAGS.skip_setup:
          sys.exit(1)  # nothing can run without the setup
    sys.exit(1 if failed else 0)

  try:
    additional = slurm.parse_params(FLAGS.slurm_param)
  except lib.SweepError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  params = slurm.parameters(
    partition=FLAGS.partition,
    timeout_min=FLAGS.timeout_min,
    gpus_per_node=FLAGS.gpus_per_node,
    cpus_per_task=FLAGS.cpus_per_task,
    array_parallelism=FLAGS.array_parallelism,
    job_name=f"mechjax-{experiment.split('.')[-1]}",
    account=FLAGS.account,
    qos=FLAGS.qos,
    mem=FLAGS.mem,
    constraint=FLAGS.constraint,
    setup=FLAGS.slurm_setup,
    additional=additional,
    nodes=FLAGS.nodes,
    tasks_per_node=FLAGS.tasks_per_node,
  )
  pending = [m for m in members if lib.member_state(root, m) != "done"]
  if FLAGS.dry_run:
    print(slurm.describe(pending, root, params))
    return
  if not pending:
    print("every member is done")
  else:
    jobs = slurm.submit(pending, root, params, executor=FLAGS.slurm_executor)
    print(f"submitted {len(jobs)} array task(s): {jobs[0].job_id.split('_')[0]}")
    if FLAGS.slurm_executor != "slurm":
      failed = 0
      for j in jobs:
        try:
          j.result()
        except Exception as e:  # submitit re-raises the task's error
          failed += 1
          print(f"error: {e}", file=sys.stderr)
      states = {
        m.id: lib.member_state(root, m) if lib.member_state(root, m) == "done" else "failed"
        for m in members
      }
      lib.aggregate(root, members, states, figure)
      sys.exit(1 if failed else 0)


if __name__ == "__main__":
  cli.execute(main)
