"""The command line: flags generated from a study's ``Config``, and the app runner every entry point
uses.

An experiment is two lines (:func:`experiment`): it defines one absl flag per setting of its study's
``Config`` (:mod:`mechjax.config`; the default, help text and choices come from there), plus
``--workdir`` and ``--overwrite``, and its main parses them into a ``Config`` and calls
``study.run(cfg, workdir)``. The shared names (``--workdir --seed --num_seeds --steps
--checkpoint_every --log_every --overwrite``) are relied on by launchers and tests: keep them.

Errors a user can cause print exactly one line on stderr and exit non-zero, with no traceback:

* a bad flag value: ``error: flag --steps=0: must be an integer >= 1`` (exit 2), the text of the
  same :class:`mechjax.config.ConfigError` that ``Config(...)`` raises in Python;
* any other input that cannot be used, a :class:`mechjax.errors.InputError`: a workdir, a
  checkpoint directory, a token file (exit 2);
* a non-finite loss (:class:`mechjax.train.loop.NonFiniteError`, exit 1).

The theory scripts define their own flags with absl and use :func:`positive_int` and friends and
:func:`execute` (``absl.app.run`` with these one-line errors).
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
import warnings
from typing import Callable

from absl import app
from absl import flags
from absl import logging

import mechjax
from mechjax import config as config_lib
from mechjax.errors import InputError
from mechjax.studies.frame import Study
from mechjax.studies.frame import StudyStopped
from mechjax.train import distributed
from mechjax.train.loop import NonFiniteError

FLAGS = flags.FLAGS


def positive_int(name: str, minimum: int = 1) -> None:
  flags.register_validator(
    name, lambda v: v is not None and v >= minimum, message=f"must be an integer >= {minimum}"
  )


def positive_float(name: str, allow_zero: bool = False) -> None:
  ok = (lambda v: v >= 0) if allow_zero else (lambda v: v > 0)
  what = ">= 0" if allow_zero else "> 0"
  flags.register_validator(
    name,
    lambda v: v is not None and math.isfinite(v) and ok(v),
    message=f"must be a finite number {what}",
  )


def list_of(name: str, choices, flag_values: flags.FlagValues = FLAGS) -> None:
  """A non-empty comma-separated list flag whose every item is one of ``choices``."""
  choices = list(choices)
  flags.register_validator(
    name,
    lambda v: bool(v) and all(item in choices for item in v),
    message=f"must be a comma-separated list of {', '.join(map(str, choices))}",
    flag_values=flag_values,
  )


class FlagError(InputError):
  """A flag value (or a combination of them) that the config refuses; the message names the
  flags."""


def define(
  config_cls: type, *, module_name: str, workdir: str, flag_values: flags.FlagValues = FLAGS
) -> None:
  """Defines ``--workdir`` (default ``workdir``), ``--overwrite`` and one flag per setting of
  ``config_cls`` that has a flag name, each with its default and help text; ``module_name`` (the
  experiment's module, or its path when it is ``__main__``) makes ``--help`` list them.
  ``flag_values`` other than the global ``FLAGS`` is for tests."""
  kw = dict(module_name=module_name, flag_values=flag_values)
  flags.DEFINE_string(
    "workdir",
    workdir,
    "Output folder: config.json, metrics.jsonl, summary.json, figures/, "
    "checkpoints/. A folder holding an unfinished run is resumed.",
    **kw,
  )
  flags.DEFINE_bool(
    "overwrite", False, "Delete an existing run in --workdir and start afresh.", **kw
  )
  flags.DEFINE_bool(
    "tensorboard",
    False,
    "Also write the metrics as TensorBoard event files in --workdir/tensorboard/ "
    "(metrics.jsonl stays the record; needs tensorboardX).",
    **kw,
  )
  flags.register_validator(
    "workdir",
    lambda v: bool(v and v.strip()),
    message="must be a non-empty path",
    flag_values=flag_values,
  )
  for spec in config_lib.flat_specs(config_cls):
    if spec.flag is None:
      continue
    kind, default = spec.kind, spec.default
    if default is None:
      default = spec.unset
    if kind.base is tuple:
      extra = f" Any of: {', '.join(spec.choices)}." if spec.choices else ""
      flags.DEFINE_list(
        spec.flag,
        [f"{v:g}" if isinstance(v, float) else str(v) for v in default],
        spec.help + extra,
        **kw,
      )
    elif kind.base is str and spec.choices:
      flags.DEFINE_enum(spec.flag, default, list(spec.choices), spec.help, **kw)
    else:
      define_fn = {
        bool: flags.DEFINE_bool,
        int: flags.DEFINE_integer,
        float: flags.DEFINE_float,
        str: flags.DEFINE_string,
      }[kind.base]
      help_text = spec.help if spec.unset is None else f"{spec.help} ({spec.unset} means unset)"
      define_fn(spec.flag, default, help_text, **kw)


def config_from_flags(config_cls: type, flag_values: flags.FlagValues = FLAGS):
  """The parsed flags as a ``config_cls``. A value the config refuses raises :class:`FlagError` with
  the config's own message, naming the flags as they were given (``flag --steps=0: must be an
  integer >= 1``)."""
  values = {}
  for spec in config_lib.flat_specs(config_cls):
    if spec.flag is not None:
      value = flag_values[spec.flag].value
      values[spec.flag] = None if spec.unset is not None and value == spec.unset else value
  try:
    return config_cls.from_flat(values)
  except config_lib.ConfigError as e:
    given = [flag_values[n].serialize() if n in flag_values else n for n in e.names]
    raise FlagError(
      f"flag{'s' if len(given) > 1 else ''} {', '.join(given)}: {e.message}"
    ) from None


def experiment(study: Study, module_name: str):
  """The entry point of ``python -m experiments.<name>``: defines the flags of ``study.config``
  and returns ``main``.

  ``main()`` parses the flags into a ``Config``, calls ``study.run(cfg, --workdir,
  overwrite=--overwrite)`` (which applies the workdir contract itself, so a call from Python obeys
  the same rules), and prints ``study.report(summary)``, the study's verdict, and then, last,
  where the outputs are,
  naming ``report.html``. A study with ``cpu_cores_as_devices`` makes every CPU core a JAX device
  first (:func:`mechjax.use_all_cpu_cores`). Use it as::

      main = cli.experiment(fourier_phase.STUDY, __name__)
      if __name__ == "__main__":
        main()
  """
  if not isinstance(study, Study):
    raise TypeError(f"cli.experiment takes a study's STUDY (a frame.Study); got {study!r}")
  define(
    study.config,
    module_name=sys.argv[0] if module_name == "__main__" else module_name,
    workdir=os.path.join("runs", study.name),
  )

  def body(argv):
    if len(argv) > 1:
      raise FlagError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
    if study.cpu_cores_as_devices:
      mechjax.use_all_cpu_cores()
    cfg = config_from_flags(study.config)
    summary = study.run(
      cfg, FLAGS.workdir, overwrite=FLAGS.overwrite, tensorboard=FLAGS.tensorboard
    )
    for line in study.report(summary):
      print(line)
    if study.verdict is not None:
      for paragraph in study.verdict(summary):
        print(textwrap.fill(paragraph, 100, initial_indent="  ", subsequent_indent="  "))
    figures = f" and figures/ ({', '.join(summary['figures'])})" if summary.get("figures") else ""
    print(f"wrote {FLAGS.workdir}/summary.json{figures}; open {FLAGS.workdir}/report.html")

  return lambda: execute(body)


def flag_values() -> dict:
  """Every flag defined outside absl itself (the entry point's own flags), as a dict."""
  names = {
    f.name for module, fs in FLAGS.flags_by_module_dict().items() if _ours(module) for f in fs
  }
  return {n: FLAGS[n].value for n in sorted(names)}


def _ours(module: str) -> bool:
  """Flags of this project, however the entry point was started (``python -m`` or a path)."""
  name = module.replace("/", ".").replace("\\", ".")
  return name == "__main__" or any(
    part in name for part in ("mechjax.", "experiments.", "theory.", "benchmarks.")
  )


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


def parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing that reports a bad value in one line (no help banner, no traceback), exit
  2."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    print(f"{os.path.basename(argv[0])}: error: {_one_line(e)}", file=sys.stderr)
    sys.exit(2)


_DEFAULT_FORMAT = warnings.formatwarning


def _format_warning(message, category, filename, lineno, line=None) -> str:
  """mechjax's own warnings (a corpus that cannot be checked, chains that did not mix) as one line,
  ``warning: <message>``, without the file and source line; others as Python prints them."""
  if category.__module__.startswith("mechjax"):
    return f"warning: {message}\n"
  return _DEFAULT_FORMAT(message, category, filename, lineno, line)


def execute(main: Callable[[list[str]], None]) -> None:
  """``absl.app.run`` with one-line errors: exit 2 for every :class:`mechjax.errors.InputError` (a
  bad flag, a refused config, a checkpoint, corpus or workdir that cannot be used), exit 1 for
  non-finite losses and studies that stop without a result. Anything else is a defect and keeps its
  traceback."""

  def wrapped(argv):
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO.
    warnings.formatwarning = _format_warning
    try:
      distributed.initialize_distributed()
      main(argv)
    except InputError as e:  # a flag, a file, a folder or a setting that cannot be used
      print(f"error: {_one_line(e)}", file=sys.stderr)
      sys.exit(2)
    except (NonFiniteError, StudyStopped) as e:
      print(f"error: {_one_line(e)}", file=sys.stderr)
      sys.exit(1)

  app.run(wrapped, flags_parser=parse_flags)
