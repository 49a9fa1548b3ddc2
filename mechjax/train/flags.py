"""Shared absl flags, their validators, and the app runner every experiment uses.

Every experiment calls :func:`define_shared_flags` once, with its own defaults, and runs its ``main``
through :func:`run`. The shared names (``--workdir --seed --num_seeds --steps --checkpoint_every
--log_every --overwrite``) are relied on by launchers and tests: keep them.

Errors a user can cause print exactly one line on stderr and exit non-zero, with no traceback:

* a bad flag value: ``error: flag --steps=0: must be an integer >= 1`` (exit 2);
* a workdir that cannot be used (:class:`mechjax.train.workdir.WorkdirError`, exit 2);
* a non-finite loss (:class:`mechjax.train.loop.NonFiniteError`, exit 1).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Callable

from absl import app
from absl import flags
from absl import logging

from mechjax.train.loop import NonFiniteError
from mechjax.train import workdir as workdir_lib
from mechjax.train.workdir import WorkdirError

FLAGS = flags.FLAGS


def cpu_cores_as_devices() -> bool:
  """Makes every CPU core a JAX device, so that SGLD chains are sharded over the cores
  (:func:`mechjax.slt.sgld.sample_chains`): XLA runs one CPU device's elementwise work on one core. Call it
  before JAX runs anything. Returns False, changing nothing, when JAX has already started (as in an
  in-process test). Accelerator backends are not affected; single-device programs run as before."""
  import jax  # local: flag parsing itself does not need JAX

  try:
    jax.config.update("jax_num_cpu_devices", os.cpu_count() or 1)
  except RuntimeError:
    return False
  return True

def initialize_distributed() -> bool:
  """Multi-host JAX, behind an environment variable: with ``MECHJAX_DISTRIBUTED=1`` this calls
  ``jax.distributed.initialize()``. On Cloud TPU and SLURM the coordinator is found automatically;
  elsewhere set ``MECHJAX_COORDINATOR`` (``host:port``), ``MECHJAX_NUM_PROCESSES`` and
  ``MECHJAX_PROCESS_ID``. Returns whether it initialised. Only process 0 writes files
  (:func:`mechjax.train.metrics.is_writer`)."""
  if os.environ.get("MECHJAX_DISTRIBUTED", "").lower() not in ("1", "true", "yes"):
    return False
  import jax  # local: flag parsing itself does not need JAX

  kwargs = {}
  if os.environ.get("MECHJAX_COORDINATOR"):
    kwargs["coordinator_address"] = os.environ["MECHJAX_COORDINATOR"]
  for env, key in (("MECHJAX_NUM_PROCESSES", "num_processes"), ("MECHJAX_PROCESS_ID", "process_id")):
    if os.environ.get(env):
      try:
        kwargs[key] = int(os.environ[env])
      except ValueError:
        raise WorkdirError(f"{env}={os.environ[env]!r} must be an integer") from None
  jax.distributed.initialize(**kwargs)
  return True


def positive_int(name: str, minimum: int = 1) -> None:
  flags.register_validator(name, lambda v: v is not None and v >= minimum, message=f"must be an integer >= {minimum}")


def positive_float(name: str, allow_zero: bool = False) -> None:
  ok = (lambda v: v >= 0) if allow_zero else (lambda v: v > 0)
  what = ">= 0" if allow_zero else "> 0"
  flags.register_validator(name, lambda v: v is not None and math.isfinite(v) and ok(v),
                           message=f"must be a finite number {what}")


def float_list(name: str, minimum: float | None = None) -> None:
  """Validates a DEFINE_list flag whose items must be finite floats (``>= minimum`` if given)."""

  def check(values):
    try:
      xs = [float(v) for v in values]
    except (TypeError, ValueError):
      return False
    return bool(xs) and all(math.isfinite(x) and (minimum is None or x >= minimum) for x in xs)

  what = f"finite numbers >= {minimum}" if minimum is not None else "finite numbers"
  flags.register_validator(name, check, message=f"must be a comma-separated list of {what}, e.g. 0,1,2")


def choice_list(name: str, choices: tuple[str, ...]) -> None:
  flags.register_validator(name, lambda vs: bool(vs) and all(v in choices for v in vs),
                           message=f"must be a comma-separated list of {', '.join(choices)}")


def define_shared_flags(experiment: str, *, steps: int, num_seeds: int = 4, log_every: int = 100,
                        checkpoint_every: int = 1000) -> None:
  """Defines the shared flags with this experiment's defaults; ``--workdir`` defaults to ``runs/<experiment>``."""
  flags.DEFINE_string("workdir", os.path.join("runs", experiment),
                      "Output folder: config.json, metrics.jsonl, summary.json, figures/, checkpoints/. "
                      "A folder holding an unfinished run is resumed.")
  flags.DEFINE_integer("seed", 0, "Base random seed; seed i of the vmapped run uses fold_in(PRNGKey(seed), i).")
  flags.DEFINE_integer("num_seeds", num_seeds, "Independent seeds trained together in one vmapped program.")
  flags.DEFINE_integer("steps", steps, "Optimizer steps per run.")
  flags.DEFINE_integer("checkpoint_every", checkpoint_every, "Save a checkpoint every this many steps.")
  flags.DEFINE_integer("log_every", log_every, "Write metrics and a progress line every this many steps.")
  flags.DEFINE_bool("overwrite", False, "Delete an existing run in --workdir and start afresh.")
  positive_int("seed", minimum=0)
  for name in ("num_seeds", "steps", "checkpoint_every", "log_every"):
    positive_int(name)
  flags.register_validator("workdir", lambda v: bool(v and v.strip()), message="must be a non-empty path")


def flag_values() -> dict:
  """Every flag defined outside absl itself (the shared flags and the experiment's own), as a dict."""
  names = {f.name for module, fs in FLAGS.flags_by_module_dict().items() if _ours(module) for f in fs}
  return {n: FLAGS[n].value for n in sorted(names)}


def _ours(module: str) -> bool:
  """Flags of this project, however the entry point was started (``python -m`` or a path)."""
  name = module.replace("/", ".").replace("\\", ".")
  return name == "__main__" or any(part in name for part in ("mechjax.", "experiments.", "theory.", "benchmarks."))


def start(argv: list[str]) -> dict | None:
  """The common start of an experiment's ``main``: refuse positional arguments, then prepare ``--workdir``.

  Returns the flag values, or None (after saying so) when ``--workdir`` holds a finished run.
  """
  if len(argv) > 1:
    raise WorkdirError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  values = flag_values()
  if workdir_lib.prepare(FLAGS.workdir, values, overwrite=FLAGS.overwrite) is workdir_lib.Status.COMPLETE:
    print(f"{FLAGS.workdir}: this run is complete (summary.json exists); nothing to do. "
          "Pass --overwrite to start afresh.")
    return None
  return values


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing that reports a bad value in one line (no help banner, no traceback), exit 2."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    print(f"{os.path.basename(argv[0])}: error: {_one_line(e)}", file=sys.stderr)
    sys.exit(2)


def run(main: Callable[[list[str]], None]) -> None:
  """``absl.app.run`` with one-line errors for bad flags, unusable workdirs and non-finite losses."""

  def wrapped(argv):
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO.
    try:
      initialize_distributed()
      main(argv)
    except WorkdirError as e:
      print(f"error: {_one_line(e)}", file=sys.stderr)
      sys.exit(2)
    except NonFiniteError as e:
      print(f"error: {_one_line(e)}", file=sys.stderr)
      sys.exit(1)

  app.run(wrapped, flags_parser=parse_flags)
