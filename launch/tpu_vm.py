"""Cloud TPU VM backend: the commands that set up a TPU VM (or pod slice) and run each sweep member
on it.

Every command goes through ``gcloud compute tpus tpu-vm ssh NAME --zone=ZONE --worker=all
--command=...``, so each host of a pod slice runs the same program, as big_vision does. On a
multi-host slice the experiments need ``MECHJAX_DISTRIBUTED=1``, which makes them call
``jax.distributed.initialize()`` (the TPU runtime supplies the coordinator); only process 0 writes
metrics, summaries and figures, so ``--root`` should be on storage every host sees (a mounted bucket
or NFS) if you want the files in one place. Members run one after another, each on the whole slice.
"""

from __future__ import annotations

import os
import re
import shlex

from launch import lib


def jax_version(requirements: str = os.path.join(lib.ROOT_DIR, "requirements.txt")) -> str:
  with open(requirements) as f:
    m = re.search(r"^jax==([\w.]+)\s*$", f.read(), flags=re.M)
  if not m:
    raise lib.SweepError(f"{requirements} has no jax==<version> pin")
  return m.group(1)


def _ssh(name: str, zone: str, project: str | None, remote: str) -> list[str]:
  cmd = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", name, f"--zone={zone}"]
  if project:
    cmd.append(f"--project={project}")
  return cmd + ["--worker=all", f"--command={remote}"]


def setup_command(
  name: str, zone: str, repo: str, *, project: str | None = None, directory: str = "mechjax"
) -> list[str]:
  """Clone (or update) the repository on every worker and install the pinned stack with
  ``jax[tpu]``."""
  d = shlex.quote(directory)
  remote = (
    f"set -e; if [ -d {d}/.git ]; then git -C {d} pull --ff-only; else git clone "
    f"{shlex.quote(repo)} {d}; fi; cd {d} && python3 -m pip install -r requirements.txt "
    f"&& python3 -m pip install 'jax[tpu]=={jax_version()}'"
  )
  return _ssh(name, zone, project, remote)


def run_command(
  member: lib.Member,
  root: str,
  name: str,
  zone: str,
  *,
  project: str | None = None,
  directory: str = "mechjax",
) -> list[str]:
  """Run one member on every worker of the slice (multi-host JAX initialised by the experiment)."""
  args = " ".join(shlex.quote(a) for a in member.args(root))
  remote = (
    f"cd {shlex.quote(directory)} && MECHJAX_DISTRIBUTED=1 python3 -m {member.experiment} {args}"
  )
  return _ssh(name, zone, project, remote)
