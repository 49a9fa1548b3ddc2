"""The run folder: ``config.json``, ``metrics.jsonl``, ``summary.json``, ``figures/``,
``checkpoints/``.

Rules, so that nothing is silently lost or overwritten:

* a new folder gets ``config.json`` (every setting, by flag name) and ``metadata.json`` (versions,
  commit, devices, command line: :mod:`mechjax.studies.runinfo`);
* a folder with ``config.json`` and no ``summary.json`` is an unfinished run: it resumes, and its
  settings must match, or the run stops with the names of the settings that differ; a resume on
  another device count or package version is recorded and warned about;
* a folder with ``summary.json`` is a finished run: nothing is retrained or rewritten;
* ``--overwrite`` deletes a folder that holds a mechjax run (it has ``config.json``) and starts
  afresh; a non-empty folder that is not a mechjax run is never deleted;
* a new run that fails before it writes anything is released (:func:`release`): it leaves no
  ``config.json`` behind, so the corrected command starts without ``--overwrite``.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
from typing import Any

from mechjax import config as config_lib
from mechjax.errors import InputError
from mechjax.studies import runinfo
from mechjax.train import distributed
from mechjax.train import metrics as metrics_lib

IGNORED_KEYS = ("workdir", "overwrite")


class WorkdirError(InputError, RuntimeError):
  """The workdir cannot be used as asked; the message says why and what to do."""


class Status(enum.Enum):
  NEW = "new"
  RESUME = "resume"
  COMPLETE = "complete"


def paths(workdir: str) -> dict[str, str]:
  return {
    name: os.path.join(workdir, name)
    for name in ("config.json", "metrics.jsonl", "summary.json", "figures", "checkpoints")
  }


def prepare(workdir: str, config: Any, overwrite: bool = False) -> Status:
  """Creates, validates or clears ``workdir`` for a run with ``config``; returns what the run should
  do.

  A saved value is compared after conversion to the setting's type, so a ``config.json`` that wrote
  ``["0", "1"]`` for ``(0.0, 1.0)`` still matches.

  Args:
    workdir: the run folder.
    config: a study's config (a :class:`mechjax.config.Settings`, written as its flat settings,
      flag names as keys) or a plain dict of flag values.
    overwrite: delete the run in ``workdir`` (a folder with ``config.json``) and start afresh.

  Returns:
    :class:`Status`: ``NEW``, ``RESUME`` or ``COMPLETE`` (``summary.json`` exists).

  Raises:
    WorkdirError: the folder holds a run with other settings (naming them), is not a mechjax run,
      or is not a folder.
  """
  settings = config if isinstance(config, config_lib.Settings) else None
  fresh = metrics_lib.to_jsonable(settings.to_flat() if settings is not None else config)
  p = paths(workdir)
  is_run = os.path.exists(p["config.json"])
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirError(f"--workdir={workdir} exists and is not a folder")
  if os.path.isdir(workdir) and os.listdir(workdir) and not is_run:
    raise WorkdirError(
      f"--workdir={workdir} is a non-empty folder that holds no mechjax run (no config.json); "
      "choose another --workdir"
    )
  if overwrite and is_run:
    if distributed.is_writer():
      shutil.rmtree(workdir)
    is_run = False
  if is_run:
    with open(p["config.json"]) as f:
      saved = json.load(f)
    if settings is not None:
      saved = {
        k: metrics_lib.to_jsonable(config_lib.normalise_flat(type(settings), k, v))
        for k, v in saved.items()
      }
      flags = {spec.key for spec in config_lib.flat_specs(type(settings)) if spec.flag}
    else:
      flags = set(fresh) | set(saved)
    diff = sorted(
      k for k in set(saved) | set(fresh) if k not in IGNORED_KEYS and saved.get(k) != fresh.get(k)
    )
    if diff:
      shown = ", ".join(
        f"{'--' if k in flags else ''}{k}={saved.get(k, '(unset)')!r} (now "
        f"{fresh.get(k, '(unset)')!r})"
        for k in diff
      )
      raise WorkdirError(
        f"--workdir={workdir} holds a run with other settings: {shown}; "
        "pass --overwrite (overwrite=True from Python) to start afresh, or choose another --workdir"
      )
    if os.path.exists(p["summary.json"]):
      return Status.COMPLETE
    runinfo.record_resume(workdir)
    return Status.RESUME
  if distributed.is_writer():
    os.makedirs(workdir, exist_ok=True)
    metrics_lib.write_json(
      p["config.json"], fresh
    )  # first, so the folder is always recognisably a run
    os.makedirs(p["figures"], exist_ok=True)
  runinfo.record_start(workdir)
  return Status.NEW


def release(workdir: str, created: bool) -> bool:
  """Undoes :func:`prepare` for a new run that failed before it wrote anything (a checkpoint that
  does not load, a corpus that does not exist): removes ``config.json``, ``metadata.json`` and the
  empty ``figures/``, and the folder itself when ``created`` (prepare made it). The corrected
  command then starts without ``--overwrite``. A folder holding anything else (a metric, a stage, a
  checkpoint) is kept, and resumes. Returns whether the folder was released."""
  if not distributed.is_writer() or not os.path.isdir(workdir):
    return False
  claimed = {"config.json", runinfo.FILE, "figures"}
  entries = set(os.listdir(workdir))
  figures = os.path.join(workdir, "figures")
  if not entries <= claimed or (os.path.isdir(figures) and os.listdir(figures)):
    return False
  for name in entries:
    path = os.path.join(workdir, name)
    if os.path.isdir(path):
      os.rmdir(path)
    else:
      os.remove(path)
  if created:
    os.rmdir(workdir)
  return True
