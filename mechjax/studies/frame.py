"""What every study does around its science: the workdir contract, cached stages, and the ending.

A study module defines a ``Config`` (:mod:`mechjax.config`), its science and its report, and
exports them as one :class:`Study`, named as its module and its experiment file are::

    def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
      result = ctx.train("condition", problem, optimizer)  # checkpoints, resume, progress
      chi = ctx.stage("susceptibility", lambda: estimate(...), fmt="npz")  # reloaded on a rerun
      return frame.Outputs(summary, figures=lambda folder: plot_all(cfg, ..., folder))

    STUDY = frame.Study("my_study", Config, science, report)
    run = STUDY.run

:meth:`Study.run` is called ``run(cfg, workdir, *, overwrite=False, progress=True) -> summary``,
from Python and from the command line alike (:func:`mechjax.cli.experiment`), and does, around the
science:

1. **prepare** the workdir (:func:`mechjax.studies.workdir.prepare`): a new folder gets
   ``config.json``; a folder whose ``config.json`` differs is refused, naming the settings;
   ``overwrite=True`` starts afresh; a finished run (``summary.json`` exists) is not recomputed: its
   summary is returned; a new run whose science fails before writing anything is released
   (:func:`mechjax.studies.workdir.release`), so the corrected command needs no ``overwrite``;
2. run the science, whose training resumes from checkpoints and whose :meth:`Context.stage`
   results are reloaded, so an interrupted run or analysis picks up where it stopped;
3. **finish**, on the writer process only (process 0 under multi-host JAX): the figures, the extra
   files, ``report.html`` (config, metadata, summary and figures on one page) and, last,
   ``summary.json``, whose presence marks the run finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from mechjax import config as config_lib
from mechjax import report
from mechjax.studies import workdir as workdir_lib
from mechjax.train import distributed
from mechjax.train import loop
from mechjax.train import metrics as metrics_lib
from mechjax.train import progress as progress_lib

FORMATS = ("json", "npz")


class StudyStopped(RuntimeError):
  """A study cannot give a result with these settings; the message says why and what to change
  (the command line prints it as one line)."""


@dataclasses.dataclass
class Context:
  """What a study's body gets besides its config: where to write, whether to print progress, how to
  train with its run settings, and stages."""

  workdir: str
  progress: bool = True
  run_settings: config_lib.RunSettings | None = None  # the study's ``cfg.run``
  tensorboard: bool = False  # also write TensorBoard event files (``--tensorboard``)
  seconds: dict[str, float] = dataclasses.field(default_factory=dict)  # summary["seconds"]
  _plan: progress_lib.Plan | None = dataclasses.field(default=None, init=False, repr=False)

  def plan(self, total: int, noun: str = "run") -> None:
    """Declares that the study trains ``total`` runs (``noun`` names one: "condition", ...), so that
    every :meth:`train` progress line gives its position, "condition 3/10", and the ETA of all of
    them."""
    self._plan = progress_lib.Plan(total, noun)

  def train(self, name: str, problem: loop.Problem, optimizer, **overrides) -> loop.TrainResult:
    """:func:`mechjax.train.loop.train` of run ``name`` in this workdir, with the study's run
    settings: seed keys from ``--seed`` and ``--num_seeds``, ``--steps``, ``--log_every``,
    ``--checkpoint_every``, and this context's progress lines. ``overrides`` replace any of them
    (``keys=``, ``steps=``, ...) or add :func:`~mechjax.train.loop.train`'s other arguments
    (``keep_checkpoints=None``, ...)."""
    if self.run_settings is None:
      raise ValueError("this context has no run settings; pass run_settings=cfg.run to Context")
    r = self.run_settings
    kwargs = dict(
      keys=loop.seed_keys(r.seed, r.num_seeds),
      steps=r.steps,
      log_every=r.log_every,
      checkpoint_every=r.checkpoint_every,
      progress=self.progress,
      tensorboard=self.tensorboard,
    )
    if self._plan is not None:
      kwargs["plan"] = self._plan
      self._plan.begin()
    try:
      with self.timed(f"train {name}"):
        return loop.train(
          problem, optimizer, workdir=self.workdir, name=name, **{**kwargs, **overrides}
        )
    finally:
      if self._plan is not None:
        self._plan.end()

  @contextlib.contextmanager
  def timed(self, name: str):
    """Adds the wall-clock seconds of the ``with`` block to ``summary["seconds"][name]``.
    :meth:`train` (as ``"train <run>"``) and the stages (by name) time themselves; the frame adds
    ``"total"``. These are the seconds of this process: a stage or a training that an earlier
    process finished counts what it took to load."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

  def path(self, name: str) -> str:
    return os.path.join(self.workdir, name)

  def log(self, text: str) -> None:
    """A progress line on stdout (when ``progress``)."""
    if self.progress:
      print(text, flush=True)

  def saved(self, name: str, fmt: str = "json") -> bool:
    """Whether stage ``name`` (:meth:`stage`) is saved in the workdir, so that it loads."""
    return os.path.exists(self.path(f"{name}.{fmt}"))

  def stage(self, name: str, compute: Callable[[], Any], fmt: str = "json") -> Any:
    """The result of ``compute()``, saved as ``<workdir>/<name>.<fmt>`` the first time and loaded
    from there on every later call with this workdir (a rerun after an interruption, or of a
    finished run's analysis).

    ``fmt="json"`` stores a tree of dicts, lists, numbers and strings (arrays become lists; load
    gives lists back); ``fmt="npz"`` stores a flat dict of arrays (load gives NumPy arrays). Every
    process computes; only the writer saves.
    """
    if fmt not in FORMATS:
      raise ValueError(f"fmt must be one of {FORMATS}; got {fmt!r}")
    path = self.path(f"{name}.{fmt}")
    with self.timed(name):
      if os.path.exists(path):
        if fmt == "npz":
          with np.load(path) as f:
            return dict(f)
        with open(path) as f:
          return json.load(f)
      result = compute()
      _write(path, result)
      return result

  def rows(
    self,
    name: str,
    items: Sequence[Hashable],
    compute: Callable[[list], dict[Any, list[dict]]],
    chunk: int = 1,
  ) -> dict[Any, list[dict]]:
    """An incremental stage: ``{item: rows}`` for every item in ``items`` (JSON numbers or
    strings, a checkpoint's step, say), kept in ``<workdir>/<name>.jsonl`` one line per item,
    ``{"item": item, "rows": [...]}``.

    Items already in the file are read back; the others are computed ``chunk`` at a time,
    ``compute(list_of_items) -> {item: rows}``, and each chunk's lines are appended before the next
    starts. So an interrupted analysis resumes after its last finished chunk, and a line torn by a
    kill is computed again. Every process computes; only the writer appends.
    """
    path = self.path(f"{name}.jsonl")
    with self.timed(name):
      done = {r["item"]: r["rows"] for r in metrics_lib.read_jsonl(path) if "item" in r}
      todo = [i for i in items if i not in done]
      for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        new = compute(part)
        if sorted(map(str, new)) != sorted(map(str, part)):
          raise ValueError(f"stage {name!r}: compute({part}) returned rows for {list(new)}")
        lines = [metrics_lib.to_jsonable({"item": i, "rows": new[i]}) for i in part]
        if distributed.is_writer():
          with open(path, "a") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
        done.update((line["item"], line["rows"]) for line in lines)
      return {i: done[i] for i in items}


@dataclasses.dataclass
class Outputs:
  """What a study's body returns.

  Attributes:
    summary: the headline numbers, written last as ``summary.json``.
    figures: ``figures(folder) -> [file names]``, called on the writer with ``<workdir>/figures``;
      the names are recorded in the summary under ``"figures"``.
    files: extra outputs by file name: ``.json`` (a tree), ``.npz`` (a dict of arrays) or text
    (``.md``, ...).
    captions: one line per figure file name, saying what its curves and shaded bands are
      (report.html shows it under the figure).
  """

  summary: dict
  figures: Callable[[str], list[str]] | None = None
  files: dict[str, Any] = dataclasses.field(default_factory=dict)
  captions: dict[str, str] = dataclasses.field(default_factory=dict)


def _write(path: str, obj: Any) -> None:
  if not distributed.is_writer():
    return
  if path.endswith(".json"):
    metrics_lib.write_json(path, obj)
  elif path.endswith(".npz"):
    np.savez(path, **obj)
  else:
    with open(path, "w") as f:
      f.write(obj if obj.endswith("\n") else obj + "\n")


def finish(
  workdir: str,
  outputs: Outputs,
  report_lines: Callable | None = None,
  seconds: dict[str, float] | None = None,
  verdict: Callable | None = None,
) -> dict:
  """Writes the figures, the extra files, ``report.html`` (:mod:`mechjax.report`; led by
  ``report_lines(summary)``, the study's results) and ``summary.json`` (last), on the writer
  process; returns the summary (with ``"figures"`` on the writer) in its JSON form, as a rerun reads
  it back from ``summary.json``: arrays and NumPy numbers as lists and Python numbers, tuples as
  lists, keys as strings, non-finite floats as None. So a caller gets the same summary from a first
  run as from a finished one. ``seconds`` (:meth:`Context.timed`) becomes ``summary["seconds"]``."""
  summary = dict(outputs.summary)
  if seconds is not None:
    if "seconds" in summary:
      raise ValueError('summary["seconds"] is the frame\'s; time a part with ctx.timed(name)')
    summary["seconds"] = seconds
  if distributed.is_writer():
    if outputs.figures is not None:
      folder = os.path.join(workdir, "figures")
      os.makedirs(folder, exist_ok=True)
      summary["figures"] = [os.path.basename(f) for f in outputs.figures(folder)]
    for name, obj in outputs.files.items():
      _write(os.path.join(workdir, name), obj)
    lines = [] if report_lines is None else report_lines(summary)
    said = (
      [] if verdict is None else verdict(json.loads(json.dumps(metrics_lib.to_jsonable(summary))))
    )
    report.write_run_report(workdir, summary, lines=lines, captions=outputs.captions, verdict=said)
    metrics_lib.write_json(os.path.join(workdir, "summary.json"), summary)
  return json.loads(json.dumps(metrics_lib.to_jsonable(summary)))


@dataclasses.dataclass(frozen=True, eq=False)
class Study:
  """A study, as its experiment file, the command line and Python see it; each study module
  exports one as ``STUDY`` (and its :meth:`run` as ``run``).

  Attributes:
    name: the study's one name: its module ``mechjax.studies.<name>``, its experiment
      ``experiments/<name>.py`` and its default workdir ``runs/<name>``.
    config: its ``Config`` class (:mod:`mechjax.config`); the flags come from it.
    science: ``science(cfg, ctx) -> Outputs``: build the problem, train, analyse.
    report: ``report(summary) -> lines``, what the command line prints and ``report.html`` leads
      with.
    required: ``{setting: what to pass}`` for the settings without a usable default (a checkpoint
      directory), refused by name while unset.
    cpu_cores_as_devices: the command line makes every CPU core a JAX device before JAX starts
      (:func:`mechjax.use_all_cpu_cores`), for a study whose SGLD chains run over them.
    verdict: ``verdict(summary) -> paragraphs``, the answer and how far to trust it, in a few
      sentences: ``report.html`` opens with them and the command line prints them last. The
      summary it gets is in its JSON form, with ``"seconds"``.
  """

  name: str
  config: type
  science: Callable[[Any, Context], Outputs]
  report: Callable[[dict], list[str]] = lambda summary: []
  required: dict[str, str] = dataclasses.field(default_factory=dict)
  cpu_cores_as_devices: bool = False
  verdict: Callable[[dict], list[str]] | None = None

  def run(
    self,
    cfg,
    workdir: str | os.PathLike,
    *,
    overwrite: bool = False,
    progress: bool = True,
    tensorboard: bool = False,
  ) -> dict:
    """The study's science with the workdir contract around it (the module docstring): returns
    the summary, from this run or, for a finished workdir, from its ``summary.json``."""
    if not isinstance(cfg, self.config):
      raise TypeError(
        f"cfg must be the study's Config, {self.config.__name__}; got {type(cfg).__name__}"
      )
    missing = [k for k in self.required if not getattr(cfg, k)]
    if missing:
      raise config_lib.ConfigError(
        missing,
        "required; pass " + "; and ".join(f"--{k}: {self.required[k]}" for k in missing),
      )
    workdir = os.fspath(workdir)
    existed = os.path.exists(workdir)
    status = workdir_lib.prepare(workdir, cfg, overwrite=overwrite)
    if status is workdir_lib.Status.COMPLETE:
      if progress:
        print(
          f"{workdir}: this run is complete (summary.json exists); nothing to do. Pass --overwrite "
          "(overwrite=True) to start afresh.",
          flush=True,
        )
      with open(os.path.join(workdir, "summary.json")) as f:
        return json.load(f)
    ctx = Context(workdir, progress, getattr(cfg, "run", None), tensorboard)
    try:
      with ctx.timed("total"):
        outputs = self.science(cfg, ctx)
    except BaseException:
      # A new run that failed before writing anything (a bad checkpoint or corpus) leaves no
      # config.json to refuse the corrected command with.
      if status is workdir_lib.Status.NEW:
        workdir_lib.release(workdir, created=not existed)
      raise
    return finish(workdir, outputs, self.report, ctx.seconds, self.verdict)
