"""One small wrapper around orbax's CheckpointManager.

A checkpoint holds the whole train state pytree: params, optimizer state, step and PRNG keys (with
the seed axis in front when seeds are vmapped). Saving the key and the step is what makes a resumed
run bitwise the run that was never stopped: every step's randomness is ``fold_in(key, step)``.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Saves and restores train states under ``directory`` (one sub-folder per step).

  Saves are asynchronous; :meth:`close` blocks until they are on disk and re-raise any
  error of the background save. Orbax writes each step to a temporary folder and renames it when
  complete, so a process killed mid-save leaves the previous checkpoint intact.
  """

  def __init__(self, directory: str | os.PathLike, max_to_keep: int | None = 2):
    self.directory = os.path.abspath(os.fspath(directory))
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """Every committed step, ascending."""
    return sorted(self._manager.all_steps())

  def save(self, step: int, state: Any) -> None:
    self._manager.save(int(step), args=ocp.args.StandardSave(state))

  def restore(self, abstract_state: Any, step: int | None = None) -> Any:
    """Restores into ``abstract_state`` (a pytree of ``jax.ShapeDtypeStruct``, e.g. from
    ``jax.eval_shape``)."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    return self._manager.restore(step, args=ocp.args.StandardRestore(abstract_state))

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def abstract(tree: Any) -> Any:
  """The abstract (shape/dtype) version of a concrete pytree, to restore into."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
