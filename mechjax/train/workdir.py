"""The run folder: ``config.json``, ``metrics.jsonl``, ``summary.json``, ``figures/``, ``checkpoints/``.

Rules, so that nothing is silently lost or overwritten:

* a new folder gets ``config.json`` (every flag value);
* a folder with ``config.json`` and no ``summary.json`` is an unfinished run: it resumes, and its flags
  must match (``--workdir`` and ``--overwrite`` excepted), or the run stops with the names of the flags
  that differ;
* a folder with ``summary.json`` is a finished run: nothing is retrained or rewritten;
* ``--overwrite`` deletes a folder that holds a mechjax run (it has ``config.json``) and starts afresh;
  a non-empty folder that is not a mechjax run is never deleted.
"""

from __future__ import annotations

import enum
import json
import os
import shutil

from mechjax.train import metrics as metrics_lib

IGNORED_KEYS = ("workdir", "overwrite")


class WorkdirError(RuntimeError):
  """The workdir cannot be used as asked; the message says why and what to do."""


class Status(enum.Enum):
  NEW = "new"
  RESUME = "resume"
  COMPLETE = "complete"


def paths(workdir: str) -> dict[str, str]:
  return {name: os.path.join(workdir, name) for name in
          ("config.json", "metrics.jsonl", "summary.json", "figures", "checkpoints")}


def prepare(workdir: str, config: dict, overwrite: bool = False) -> Status:
  """Creates, validates or clears ``workdir`` for a run with ``config``; returns what the run should do."""
  p = paths(workdir)
  is_run = os.path.exists(p["config.json"])
  if os.path.isdir(workdir) and os.listdir(workdir) and not is_run:
    raise WorkdirError(f"--workdir={workdir} is a non-empty folder that holds no mechjax run (no config.json); "
                       "choose another --workdir")
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirError(f"--workdir={workdir} exists and is not a folder")
  if overwrite and is_run:
    if metrics_lib.is_writer():
      shutil.rmtree(workdir)
    is_run = False
  if is_run:
    with open(p["config.json"]) as f:
      saved = json.load(f)
    fresh = metrics_lib.to_jsonable(config)
    diff = sorted(k for k in set(saved) | set(fresh)
                  if k not in IGNORED_KEYS and saved.get(k) != fresh.get(k))
    if diff:
      shown = ", ".join(f"--{k}={saved.get(k)!r} (now {fresh.get(k)!r})" for k in diff)
      raise WorkdirError(f"--workdir={workdir} holds a run with other flags: {shown}; "
                         "pass --overwrite to start afresh, or choose another --workdir")
    return Status.COMPLETE if os.path.exists(p["summary.json"]) else Status.RESUME
  if metrics_lib.is_writer():
    os.makedirs(workdir, exist_ok=True)
    metrics_lib.write_json(p["config.json"], config)  # first, so the folder is always recognisably a run
    os.makedirs(p["figures"], exist_ok=True)
  return Status.NEW
