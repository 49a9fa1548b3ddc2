"""A folder of checkpoint directories, one per training step: a run's exports (``step0``,
``step1``, ...) or a model's revisions as the hub names them (Pythia's ``step1000``), each found,
ordered by its step, and identified by a hash of its weights.

Some public revision series serve the same weights under several step names; :func:`revisions`
reports each such group, so that a study estimates them once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re

import numpy as np

from mechjax.models.pretrained.arch import CheckpointError
from mechjax.models.pretrained.checkpoint import read_weights

_STEP = re.compile(r"(\d+)(?!.*\d)")  # the last number in a folder's name


@dataclasses.dataclass(frozen=True)
class Revision:
  """One checkpoint directory of the folder: its ``step`` (the last number in its name), its
  ``path``, and ``weights``, the SHA-256 of its tensors (:func:`weights_hash`)."""

  step: int
  path: str
  weights: str

  @property
  def name(self) -> str:
    return os.path.basename(self.path)


def weights_hash(directory: str | os.PathLike) -> str:
  """The SHA-256 hex digest of a checkpoint's tensors, by name in sorted order: each name, dtype,
  shape and bytes. The same weights give the same hash whatever the file layout (one file or
  shards); any changed element gives another."""
  h = hashlib.sha256()
  tensors = read_weights(os.fspath(directory))
  for name in sorted(tensors):
    a = np.ascontiguousarray(tensors[name])
    h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
  return h.hexdigest()


def revisions(folder: str | os.PathLike) -> tuple[list[Revision], dict[str, list[int]]]:
  """``(revisions, duplicates)``: every subfolder of ``folder`` that holds a ``config.json``, as a
  :class:`Revision`, ordered by step; and, for each hash shared by several of them,
  ``{hash: [their steps]}``. Refuses, in one line, a folder that does not exist or holds no
  checkpoint, a subfolder whose name has no step number, and two subfolders of one step."""
  folder = os.fspath(folder)
  if not os.path.isdir(folder):
    raise CheckpointError(
      f"{folder} is not a folder; pass a folder of checkpoint directories (step0/, step1000/, ...)"
    )
  found = sorted(
    n
    for n in os.listdir(folder)
    if not n.endswith(".partial") and os.path.isfile(os.path.join(folder, n, "config.json"))
  )
  if not found:
    hint = (
      "; it is itself a checkpoint: pass the folder that holds it and its siblings"
      if os.path.isfile(os.path.join(folder, "config.json"))
      else ""
    )
    raise CheckpointError(
      f"{folder} holds no checkpoint directories (subfolders with config.json){hint}"
    )
  steps = {}
  for name in found:
    m = _STEP.search(name)
    if m is None:
      raise CheckpointError(
        f"{os.path.join(folder, name)}: no step number in the folder's name; name checkpoint "
        "folders by their training step, as step1000"
      )
    step = int(m.group(1))
    if step in steps:
      raise CheckpointError(f"{folder}: {steps[step]} and {name} both name step {step}")
    steps[step] = name
  out = [
    Revision(s, os.path.join(folder, steps[s]), weights_hash(os.path.join(folder, steps[s])))
    for s in sorted(steps)
  ]
  groups: dict[str, list[int]] = {}
  for r in out:
    groups.setdefault(r.weights, []).append(r.step)
  return out, {h: s for h, s in groups.items() if len(s) > 1}
