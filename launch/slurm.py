"""SLURM backend: the sweep's members as one submitit job array.

Each array task runs one member's command (``python -m EXPERIMENT ... --workdir=ROOT/<id>``) in the
repository, so a re-submitted sweep resumes exactly as a local one does. submitit writes its scripts
and logs to ``ROOT/slurm/``. ``executor="debug"`` (or ``"local"``) runs the same array without a
cluster, which is how the tests check it.
"""

from __future__ import annotations

import os
import shlex
import subprocess

from launch import lib


def run_member(command: list[str]) -> int:
  """The function each array task runs: the member's command, from the repository root."""
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [lib.ROOT_DIR, os.environ.get("PYTHONPATH")])),
  }
  done = subprocess.run(command, cwd=lib.ROOT_DIR, env=env)
  if done.returncode != 0:
    raise RuntimeError(f"member failed with exit status {done.returncode}: {shlex.join(command)}")
  return done.returncode


def parameters(
  *,
  partition: str | None,
  timeout_min: int,
  gpus_per_node: int,
  cpus_per_task: int,
  array_parallelism: int,
  job_name: str,
) -> dict:
  p = {
    "timeout_min": timeout_min,
    "gpus_per_node": gpus_per_node,
    "cpus_per_task": cpus_per_task,
    "slurm_array_parallelism": array_parallelism,
    "name": job_name,
  }
  if partition:
    p["slurm_partition"] = partition
  return p


def describe(members: list[lib.Member], root: str, params: dict, python: str = "python3") -> str:
  """What ``--dry_run`` prints: the executor's parameters and every array task's command."""
  lines = [
    f"submitit.AutoExecutor(folder={os.path.join(root, 'slurm')!r}).update_parameters("
    + ", ".join(f"{k}={v!r}" for k, v in params.items())
    + ")",
    f"job array of {len(members)} task(s), run from {lib.ROOT_DIR}:",
  ]
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
  return ex.map_array(run_member, commands)
