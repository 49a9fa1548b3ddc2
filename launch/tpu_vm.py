"""Cloud TPU VM backend: the commands that set up a TPU VM (or pod slice) and run each sweep member
on it.

Every command goes through ``gcloud compute tpus tpu-vm ssh NAME --zone=ZONE --worker=all
--command=...``, so each host of a pod slice runs the same program, as big_vision does. On a
multi-host slice the experiments need ``MECHJAX_DISTRIBUTED=1``, which makes them call
``jax.distributed.initialize()`` (the TPU runtime supplies the coordinator); only process 0 writes
metrics, summaries and figures, so ``--root`` should be on storage every host sees (a mounted bucket
or NFS) if you want the files in one place. Members run one after another, each on the whole slice.

The setup does not trust the image's Python: it makes a uv environment with Python ≥ 3.11 in the
checkout (:func:`setup_command`), and every member runs with that environment's interpreter.
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


PYTHON = "3.11"  # the oldest Python the pinned stack supports (pyproject.toml: requires-python)
VENV = ".venv"


def setup_command(
  name: str,
  zone: str,
  repo: str,
  *,
  project: str | None = None,
  directory: str = "mechjax",
  python: str = PYTHON,
) -> list[str]:
  """Clone (or update) the repository on every worker and make it an environment with Python
  ``python`` (or newer) whatever the image ships.

  TPU VM images carry the system ``python3`` of their Ubuntu release (3.10 on 22.04), older than the
  pinned jax and numpy accept. So the setup installs uv for the user (its standalone installer
  into ``~/.local/bin``, or, where that fails, the image's own pip from PyPI), lets uv create
  ``directory/.venv`` with a Python that satisfies ``>= python`` (uv downloads a managed build
  when the image has none), and installs the lock file and ``jax[tpu]`` at the pinned version
  into it. The members then run with that environment's interpreter (:func:`run_command`), never
  with the system ``python3``."""
  d = shlex.quote(directory)
  uv = "$HOME/.local/bin/uv"
  venv_python = f"{d}/{VENV}/bin/python"
  remote = (
    "set -e; "
    f"if [ -d {d}/.git ]; then git -C {d} pull --ff-only; else git clone {shlex.quote(repo)} {d}; "
    "fi; "
    f"[ -x {uv} ] || {{ curl -LsSf https://astral.sh/uv/install.sh -o /tmp/uv-install.sh "
    "&& sh /tmp/uv-install.sh; } || python3 -m pip install --user --upgrade uv; "
    f"{uv} venv --allow-existing --python '>={python}' {d}/{VENV}; "
    f"{uv} pip install --python {venv_python} -r {d}/requirements.txt; "
    f"{uv} pip install --python {venv_python} 'jax[tpu]=={jax_version()}'; "
    f"{venv_python} -c 'import sys; assert sys.version_info >= {tuple(map(int, python.split('.')))}"
    ", sys.version; print(sys.version)'"
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
  """Run one member on every worker of the slice (multi-host JAX initialised by the experiment),
  with the interpreter of the environment :func:`setup_command` made."""
  args = " ".join(shlex.quote(a) for a in member.args(root))
  remote = (
    f"cd {shlex.quote(directory)} && MECHJAX_DISTRIBUTED=1 {VENV}/bin/python -m "
    f"{member.experiment} {args}"
  )
  return _ssh(name, zone, project, remote)
