"""What a run ran on: ``metadata.json`` in every workdir.

A new workdir gets ``metadata.json`` with

* ``mechjax``: its version and, when it is imported from a git checkout, the commit and whether the
  tree was dirty (tracked files changed, or untracked files that git does not ignore);
* ``packages``: the versions of Python, jax, jaxlib, flax, optax, orbax-checkpoint and numpy;
* ``devices``: the backend, the device kind and count (all processes), the local device count and
  the process count;
* ``command``: the command line (``sys.argv``), the working directory and the start time (UTC).

A resume appends the same record, taken then, to ``resumes``, and prints a one-line warning on
stderr when the device count, the backend or a package version differs from the start: any of them
may change the numbers (docs/results.md records a patterning outcome that moved with the
device count).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from typing import Any

import jax

import mechjax
from mechjax.train import distributed

PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
FILE = "metadata.json"


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def _git(args: list[str], cwd: str) -> str | None:
  try:
    out = subprocess.run(
      ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip() if out.returncode == 0 else None


def source() -> dict[str, Any]:
  """mechjax's version, and its git commit and dirtiness when imported from a checkout (None
  otherwise, for example when installed from a wheel)."""
  folder = os.path.dirname(os.path.abspath(mechjax.__file__))
  top = _git(["rev-parse", "--show-toplevel"], folder)
  info: dict[str, Any] = {"version": mechjax.__version__, "commit": None, "dirty": None}
  # Only a checkout that holds this very package counts, not a repository around a site-packages.
  if top and os.path.isfile(os.path.join(top, "mechjax", "__init__.py")):
    info["commit"] = _git(["rev-parse", "HEAD"], top)
    status = _git(["status", "--porcelain"], top)
    info["dirty"] = None if status is None else bool(status)
  return info


def collect() -> dict[str, Any]:
  """The metadata record of this process, now (see the module docstring)."""
  devices = jax.devices()
  return {
    "mechjax": source(),
    "packages": {
      "python": platform.python_version(),
      **{name: _version(name) for name in PACKAGES},
    },
    "devices": {
      "backend": jax.default_backend(),
      "kind": devices[0].device_kind,
      "count": jax.device_count(),
      "local_count": jax.local_device_count(),
      "process_count": jax.process_count(),
    },
    "command": {
      "argv": list(sys.argv),
      "cwd": os.getcwd(),
      "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    },
  }


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
  """What differs between two records in what can change a run's numbers: the backend, the
  device count, the process count and the package versions (``"name a -> b"`` each)."""
  out = []
  for group, keys in (
    ("devices", ("backend", "count", "process_count")),
    ("packages", ("python", *PACKAGES)),
  ):
    for key in keys:
      a = before.get(group, {}).get(key)
      b = now.get(group, {}).get(key)
      if a != b:
        label = {"count": "device count", "process_count": "process count"}.get(key, key)
        out.append(f"{label} {a} -> {b}")
  if before.get("mechjax", {}).get("version") != now["mechjax"]["version"]:
    out.append(f"mechjax {before.get('mechjax', {}).get('version')} -> {now['mechjax']['version']}")
  return out


def record_start(workdir: str) -> dict[str, Any]:
  """Writes ``<workdir>/metadata.json`` for a new run; returns the record."""
  from mechjax.train import metrics as metrics_lib

  info = collect()
  metrics_lib.write_json(os.path.join(workdir, FILE), {**info, "resumes": []})
  return info


def record_resume(workdir: str) -> list[str]:
  """Appends this process's record to ``resumes`` and warns (one line on stderr) when it differs
  from the start in something that can change the numbers; returns the differences. A workdir
  without ``metadata.json`` (written before it existed) gets one, marked as started unrecorded."""
  from mechjax.train import metrics as metrics_lib

  path = os.path.join(workdir, FILE)
  now = collect()
  if not os.path.exists(path):
    metrics_lib.write_json(path, {"started_unrecorded": True, "resumes": [now]})
    return []
  with open(path) as f:
    saved = json.load(f)
  reference = saved if "devices" in saved else (saved.get("resumes") or [now])[0]
  diffs = differences(reference, now)
  if diffs and distributed.is_writer():
    print(
      f"mechjax: warning: resuming {workdir} with {', '.join(diffs)} (it started with the "
      "former); results may differ from an uninterrupted run",
      file=sys.stderr,
      flush=True,
    )
  saved.setdefault("resumes", []).append(now)
  metrics_lib.write_json(path, saved)
  return diffs
