"""SLURM backend: the sweep's members as one submitit job array.

Each array task runs one member's command (``python -m EXPERIMENT ... --workdir=ROOT/<id>``) in the
repository, so a re-submitted sweep resumes exactly as a local one does. submitit writes its scripts
and logs to ``ROOT/slurm/``. ``executor="debug"`` (or ``"local"``) runs the same array without a
cluster, which is how the tests check it; the tests also submit through submitit's SLURM executor
to a stand-in ``sbatch`` and read the batch script it writes.

A member can span several nodes and tasks (``nodes``, ``tasks_per_node``): every task then runs the
member's command as one JAX process under ``jax.distributed``, which reads SLURM's environment.
"""

from __future__ import annotations

import os
import shlex
import subprocess

from launch import lib


def run_member(command: list[str], distributed: bool = False) -> int:
  """The function each array task runs: the member's command, from the repository root. With
  ``distributed`` (a member of several tasks: ``nodes × tasks_per_node > 1``) every task runs it
  with ``MECHJAX_DISTRIBUTED=1``, so that the experiment calls ``jax.distributed.initialize()``,
  which finds its coordinator, process count and rank in SLURM's environment; only process 0
  writes files."""
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [lib.ROOT_DIR, os.environ.get("PYTHONPATH")])),
  }
  if distributed:
    env["MECHJAX_DISTRIBUTED"] = "1"
  done = subprocess.run(command, cwd=lib.ROOT_DIR, env=env)
  if done.returncode != 0:
    raise RuntimeError(f"member failed with exit status {done.returncode}: {shlex.join(command)}")
  return done.returncode


def parse_params(items: list[str] | None) -> dict[str, str]:
  """``["key=value", ...]`` (``--slurm_param``) as sbatch options for submitit's
  ``slurm_additional_parameters``; refuses an item without ``=``, naming it."""
  out = {}
  for item in items or []:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
      raise lib.SweepError(
        f"--slurm_param={item!r} is not key=value (an sbatch option without its dashes, e.g. "
        "reservation=my-reservation)"
      )
    out[key.strip()] = value.strip()
  return out


def parameters(
  *,
  partition: str | None,
  timeout_min: int,
  gpus_per_node: int,
  cpus_per_task: int,
  array_parallelism: int,
  job_name: str,
  account: str | None = None,
  qos: str | None = None,
  mem: str | None = None,
  constraint: str | None = None,
  setup: list[str] | None = None,
  additional: dict[str, str] | None = None,
  nodes: int = 1,
  tasks_per_node: int = 1,
) -> dict:
  """submitit ``AutoExecutor.update_parameters`` keywords: the generic ones (time, GPUs and CPUs,
  nodes and tasks per node) and SLURM's own (``slurm_partition``, ``slurm_account``,
  ``slurm_qos``, ``slurm_mem``, ``slurm_constraint``, ``slurm_setup``: lines run in the batch
  script before the task, e.g. ``module load cuda``; ``slurm_additional_parameters``: any other
  sbatch option). Unset options are left out, so the cluster's defaults apply."""
  p = {
    "timeout_min": timeout_min,
    "gpus_per_node": gpus_per_node,
    "cpus_per_task": cpus_per_task,
    "nodes": nodes,
    "tasks_per_node": tasks_per_node,
    "slurm_array_parallelism": array_parallelism,
    "name": job_name,
  }
  for key, value in (
    ("slurm_partition", partition),
    ("slurm_account", account),
    ("slurm_qos", qos),
    ("slurm_mem", mem),
    ("slurm_constraint", constraint),
  ):
    if value:
      p[key] = value
  if setup:
    p["slurm_setup"] = list(setup)
  if additional:
    p["slurm_additional_parameters"] = dict(additional)
  return p


def is_distributed(params: dict) -> bool:
  """Whether a member spans several tasks (and so runs under ``jax.distributed``)."""
  return params.get("nodes", 1) * params.get("tasks_per_node", 1) > 1


def describe(members: list[lib.Member], root: str, params: dict, python: str = "python3") -> str:
  """What ``--dry_run`` prints: the executor's parameters and every array task's command."""
  lines = [
    f"submitit.AutoExecutor(folder={os.path.join(root, 'slurm')!r}).update_parameters("
    + ", ".join(f"{k}={v!r}" for k, v in params.items())
    + ")",
    f"job array of {len(members)} task(s), run from {lib.ROOT_DIR}:",
  ]
  if is_distributed(params):
    lines.append(
      f"  each member: {params.get('nodes', 1)} node(s) × {params.get('tasks_per_node', 1)} "
      "task(s), one JAX process per task, with MECHJAX_DISTRIBUTED=1 (jax.distributed.initialize)"
    )
  lines += [f"  [{i}] {shlex.join(m.command(root, python=python))}" for i, m in enumerate(members)]
  return "\n".join(lines)


def submit(members: list[lib.Member], root: str, params: dict, *, executor: str = "slurm"):
  """Submits the array; returns the submitit jobs. ``executor`` is ``"slurm"``, ``"local"`` or
  ``"debug"``."""
  try:
    import submitit
  except ImportError as e:
    raise lib.SweepError(
      "the slurm backend needs submitit (pip install -r requirements.txt)"
    ) from e
  cluster = None if executor == "slurm" else executor
  ex = submitit.AutoExecutor(folder=os.path.join(root, "slurm"), cluster=cluster)
  if executor == "slurm":
    ex.update_parameters(**params)
  commands = [m.command(root) for m in members]
  return ex.map_array(run_member, commands, [is_distributed(params)] * len(commands))
