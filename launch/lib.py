"""Sweeps: a list of flag dicts for one experiment, run as separate processes, aggregated into one
table.

A sweep file (``launch/sweeps/<name>.py``) defines

* ``EXPERIMENT``: the module of an experiment, e.g. ``"experiments.fourier_phase"``;
* ``get_sweep()``: a list of flag dicts for it, e.g. ``product(seed=[0, 1], alpha=[0.0, 2.0])``;
* optionally ``FIGURE = {"x": <flag>, "y": <summary key>}``: plot that summary value against that
  flag; or a function ``FIGURE(root, rows) -> path`` that draws ``ROOT/results.png`` itself from
  the rows of ``results.json`` (and the members' workdirs under ``root``);
* optionally ``OUTPUT_FLAG`` (default ``"workdir"``) and ``DONE_FILE`` (default ``"summary.json"``)
  for modules with another contract, such as ``theory.phase_sample_complexity`` (``--out``,
  ``result.json``). With ``OUTPUT_FLAG = None`` (a theory check that only prints), the launcher
  records the exit status and the PASS/FAIL verdict in ``ROOT/<id>/launch_result.json``.

Each member runs as ``python -m EXPERIMENT --flag=value ... --workdir=ROOT/<id>``, where ``<id>`` is
a stable hash of the experiment and its flags, so the same member always lands in the same folder.
The experiments already resume an unfinished workdir and skip a finished one (``summary.json``),
which is what makes a sweep re-runnable: finished members are skipped, interrupted ones resume from
their checkpoints. Logs go to ``ROOT/logs/<id>.log``; ``ROOT/sweep.json`` lists the members.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib.util
import itertools
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Iterable

from mechjax import report

STATES = ("pending", "running", "done", "failed")
LAUNCH_RESULT = (
  "launch_result.json"  # written by the launcher for modules that write nothing themselves
)
ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SweepError(ValueError):
  """A sweep file or its members are malformed; the message names the file and the member."""


# ----------------------------------------------------------------------------------------------
# Building sweeps.


def product(**axes: Iterable[Any]) -> list[dict[str, Any]]:
  """Every combination: ``product(a=[1, 2], b=["x"])`` → ``[{a: 1, b: "x"}, {a: 2, b: "x"}]``."""
  names = list(axes)
  values = [list(v) for v in axes.values()]
  return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def zipped(**axes: Iterable[Any]) -> list[dict[str, Any]]:
  """Axes advanced together: ``zipped(a=[1, 2], b=[3, 4])`` → ``[{a: 1, b: 3}, {a: 2, b: 4}]``."""
  values = [list(v) for v in axes.values()]
  if len({len(v) for v in values}) > 1:
    raise SweepError(
      f"zipped axes must have equal lengths; got {dict(zip(axes, map(len, values)))}"
    )
  return [dict(zip(axes, combo)) for combo in zip(*values)]


def with_all(members: list[dict[str, Any]], **fixed: Any) -> list[dict[str, Any]]:
  """The same members with ``fixed`` flags added to each (a member's own value wins)."""
  return [{**fixed, **m} for m in members]


# ----------------------------------------------------------------------------------------------
# Members.


@dataclasses.dataclass(frozen=True)
class Member:
  experiment: str
  flags: dict[str, Any]
  output_flag: str | None = (
    "workdir"  # the flag that gets ROOT/<id>; None: the module writes nothing
  )
  done_file: str = "summary.json"  # in ROOT/<id>: present once the member has finished

  @property
  def id(self) -> str:
    """A stable hash of the experiment and its flags (order-independent)."""
    text = json.dumps({"experiment": self.experiment, "flags": self.flags}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]

  def args(self, root: str) -> list[str]:
    """The module's command-line arguments, its output flag (``--workdir``) included."""
    out = [f"--{self.output_flag}={os.path.join(root, self.id)}"] if self.output_flag else []
    return [flag_arg(k, v) for k, v in sorted(self.flags.items())] + out

  def command(self, root: str, python: str = sys.executable) -> list[str]:
    return [python, "-m", self.experiment, *self.args(root)]


def flag_arg(name: str, value: Any) -> str:
  if isinstance(value, bool):
    return f"--{name}" if value else f"--no{name}"
  if isinstance(value, (list, tuple)):
    return f"--{name}={','.join(str(v) for v in value)}"
  return f"--{name}={value}"


def load_sweep(path: str) -> tuple[str, list[Member], dict | None]:
  """``(EXPERIMENT, members, FIGURE)`` of the sweep file at ``path``; SweepError if it is
  malformed."""
  if not os.path.isfile(path):
    raise SweepError(f"--sweep={path}: no such file; sweep files live in launch/sweeps/<name>.py")
  spec = importlib.util.spec_from_file_location(f"_sweep_{abs(hash(os.path.abspath(path)))}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  experiment = getattr(module, "EXPERIMENT", None)
  if not isinstance(experiment, str) or not experiment:
    raise SweepError(
      f"{path}: EXPERIMENT must be an experiment module name such as 'experiments.fourier_phase'"
    )
  if importlib.util.find_spec(experiment) is None:
    raise SweepError(f"{path}: EXPERIMENT = {experiment!r} is not an importable module")
  output_flag = getattr(module, "OUTPUT_FLAG", "workdir")
  done_file = getattr(
    module, "DONE_FILE", "summary.json" if output_flag == "workdir" else LAUNCH_RESULT
  )
  if output_flag is not None and (not isinstance(output_flag, str) or not output_flag):
    raise SweepError(
      f"{path}: OUTPUT_FLAG must be a flag name (the member's folder) or None; got {output_flag!r}"
    )
  if not isinstance(done_file, str) or not done_file or os.sep in done_file:
    raise SweepError(f"{path}: DONE_FILE must be a file name; got {done_file!r}")
  if not callable(getattr(module, "get_sweep", None)):
    raise SweepError(f"{path}: define get_sweep() returning a list of flag dicts for {experiment}")
  raw = module.get_sweep()
  if not isinstance(raw, list) or not raw:
    raise SweepError(
      f"{path}: get_sweep() must return a non-empty list of flag dicts; got {type(raw).__name__}"
    )
  members = []
  for i, flags in enumerate(raw):
    if not isinstance(flags, dict) or not all(isinstance(k, str) and k for k in flags):
      raise SweepError(f"{path}: member {i} must be a dict of flag names to values; got {flags!r}")
    owned = {"workdir", "overwrite"} | ({output_flag} if output_flag else set())
    if owned & set(flags):
      raise SweepError(
        f"{path}: member {i} sets --{sorted(owned & set(flags))[0]}; the launcher owns "
        f"{', '.join('--' + o for o in sorted(owned))} (each member's folder is ROOT/<hash of its "
        "flags>)"
      )
    for k, v in flags.items():
      if not isinstance(v, (str, int, float, bool, list, tuple)) or (
        isinstance(v, float) and not math.isfinite(v)
      ):
        raise SweepError(
          f"{path}: member {i}, flag {k!r}: {v!r} is not a string, number, bool or list"
        )
    members.append(Member(experiment, dict(flags), output_flag, done_file))
  ids = [m.id for m in members]
  dup = sorted({x for x in ids if ids.count(x) > 1})
  if dup:
    first = next(m for m in members if m.id == dup[0])
    raise SweepError(
      f"{path}: the same member appears twice ({first.flags}); each member must differ"
    )
  figure = getattr(module, "FIGURE", None)
  plain = isinstance(figure, dict) and set(figure) == {"x", "y"}
  if figure is not None and not (plain or callable(figure)):
    raise SweepError(
      f"{path}: FIGURE must be {{'x': <flag>, 'y': <summary key>}} or a function "
      f"FIGURE(root, rows) -> path; got {figure!r}"
    )
  return experiment, members, figure


def member_state(root: str, member: Member) -> str:
  return "done" if os.path.exists(os.path.join(root, member.id, member.done_file)) else "pending"


def record_result(root: str, member: Member, log_path: str) -> None:
  """For a module that writes nothing (a theory check): ``ROOT/<id>/launch_result.json`` with its
  verdict (the last PASS or FAIL line it printed) and the end of its output."""
  os.makedirs(os.path.join(root, member.id), exist_ok=True)
  text = tail(log_path, 40)
  verdicts = [line.strip() for line in text.splitlines() if line.strip() in ("PASS", "FAIL")]
  result = {"returncode": 0, "verdict": verdicts[-1] if verdicts else None, "output_tail": text}
  with open(os.path.join(root, member.id, member.done_file), "w") as f:
    json.dump(result, f, indent=1)


def write_manifest(root: str, experiment: str, members: list[Member]) -> None:
  """``ROOT/sweep.json``: every member of every sweep run into ``root`` (kept across runs)."""
  path = os.path.join(root, "sweep.json")
  known = {}
  if os.path.exists(path):
    with open(path) as f:
      known = {m["id"]: m for m in json.load(f)["members"]}
  for m in members:
    known[m.id] = {"id": m.id, "experiment": m.experiment, "flags": m.flags, "args": m.args(root)}
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump({"members": list(known.values())}, f, indent=1)
  os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# The local backend.


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
  """Linux: the member gets SIGTERM if the launcher dies, even by SIGKILL (no orphans on the
  workdir)."""
  try:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def tail(path: str, lines: int) -> str:
  if not os.path.exists(path):
    return "(no log)"
  with open(path, errors="replace") as f:
    return "".join(f.readlines()[-lines:]).rstrip()


def status_table(members: list[Member], states: dict[str, str]) -> str:
  counts = " | ".join(f"{s} {sum(v == s for v in states.values())}" for s in STATES)
  rows = [
    f"  {m.id}  {states[m.id]:8s} {' '.join(flag_arg(k, v) for k, v in sorted(m.flags.items()))}"
    for m in members
  ]
  return "\n".join([f"sweep: {counts}", *rows])


def run_local(
  members: list[Member],
  root: str,
  *,
  parallel: int = 1,
  tail_lines: int = 20,
  poll: float = 0.2,
  print_fn: Callable[[str], None] = print,
) -> dict[str, str]:
  """Runs the members as subprocesses, at most ``parallel`` at a time; returns ``{id: final
  state}``.

  Finished members (``summary.json``) are skipped; a member whose previous launcher is still alive
  (its pid file) is left to it and reported failed here. A member that exits non-zero is marked
  failed and the end of its log is printed; the others go on.
  """
  logs = os.path.join(root, "logs")
  os.makedirs(logs, exist_ok=True)
  states = {m.id: member_state(root, m) for m in members}
  queue = [m for m in members if states[m.id] == "pending"]
  running: dict[str, tuple[subprocess.Popen, Any, Member]] = {}
  print_fn(status_table(members, states))
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [ROOT_DIR, os.environ.get("PYTHONPATH")])),
  }

  def stop_all(signum, frame):  # pragma: no cover - exercised by killing the launcher
    for proc, _, _ in running.values():
      proc.terminate()
    raise SystemExit(128 + signum)

  old = signal.signal(signal.SIGTERM, stop_all) if _is_main_thread() else None
  try:
    while queue or running:
      while queue and len(running) < parallel:
        m = queue.pop(0)
        pid_path = os.path.join(logs, f"{m.id}.pid")
        if os.path.exists(pid_path):
          with open(pid_path) as f:
            other = int(f.read().strip() or 0)
          if other and other != os.getpid() and _alive(other):
            states[m.id] = "failed"
            print_fn(f"{m.id}: failed: another launcher (pid {other}) is running this member")
            continue
        log = open(os.path.join(logs, f"{m.id}.log"), "a")
        log.write(f"$ {shlex.join(m.command(root))}\n")
        log.flush()
        proc = subprocess.Popen(
          m.command(root),
          cwd=ROOT_DIR,
          env=env,
          stdout=log,
          stderr=subprocess.STDOUT,
          preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        with open(pid_path, "w") as f:
          f.write(str(os.getpid()))
        running[m.id] = (proc, log, m)
        states[m.id] = "running"
        print_fn(f"{m.id}: running ({len(running)} running, {len(queue)} pending)")
      time.sleep(poll)
      for mid, (proc, log, m) in list(running.items()):
        rc = proc.poll()
        if rc is None:
          continue
        log.close()
        del running[mid]
        os.remove(os.path.join(logs, f"{mid}.pid"))
        if rc == 0 and m.done_file == LAUNCH_RESULT:
          record_result(root, m, os.path.join(logs, f"{mid}.log"))
        if rc == 0 and member_state(root, m) == "done":
          states[mid] = "done"
          print_fn(f"{mid}: done")
        else:
          states[mid] = "failed"
          why = f"exit status {rc}" if rc != 0 else f"exit status 0 but no {m.done_file}"
          print_fn(
            f"{mid}: failed ({why}); last lines of {os.path.join(logs, mid + '.log')}:\n"
            + "\n".join(
              "    " + line
              for line in tail(os.path.join(logs, f"{mid}.log"), tail_lines).splitlines()
            )
          )
  finally:
    if old is not None:
      signal.signal(signal.SIGTERM, old)
  print_fn(status_table(members, states))
  return states


def _is_main_thread() -> bool:
  import threading

  return threading.current_thread() is threading.main_thread()


# ----------------------------------------------------------------------------------------------
# Aggregation.


flatten = report.flatten  # a nested summary's scalars as {"a.b.c": value}


def aggregate(
  root: str, members: list[Member], states: dict[str, str], figure: dict | None = None
) -> list[dict]:
  """``ROOT/results.csv``, ``ROOT/results.json`` and ``ROOT/report.html``: one row per member
  (flags, state, flattened summary); the report links each member's own ``report.html``."""
  rows = []
  for m in members:
    row = {"id": m.id, "experiment": m.experiment, "state": states.get(m.id, member_state(root, m))}
    row.update({f"flag.{k}": v for k, v in m.flags.items()})
    summary_path = os.path.join(root, m.id, m.done_file)
    if os.path.exists(summary_path):
      with open(summary_path) as f:
        row.update(flatten(json.load(f)))
    rows.append(row)
  with open(os.path.join(root, "results.json"), "w") as f:
    json.dump(rows, f, indent=1)
  columns = list(dict.fromkeys(k for r in rows for k in r))
  with open(os.path.join(root, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=columns)
    w.writeheader()
    for r in rows:
      w.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})
  if callable(figure):
    figure(root, rows)
  elif figure is not None:
    plot_results(root, rows, figure)
  report.write_sweep_report(root, rows)
  return rows


def plot_results(root: str, rows: list[dict], figure: dict) -> str | None:
  """``ROOT/results.png``: summary value ``figure["y"]`` against flag ``figure["x"]``, one line per
  setting of the other flags. Returns the path, or None when no finished member has both."""
  from mechjax import plotting  # local: matplotlib only when a figure is asked for

  x_key, y_key = f"flag.{figure['x']}", figure["y"]
  done = [
    r
    for r in rows
    if r["state"] == "done" and x_key in r and isinstance(r.get(y_key), (int, float))
  ]
  if not done:
    return None
  groups: dict[str, list[tuple[float, float]]] = {}
  for r in done:
    rest = ", ".join(
      f"{k[5:]}={v}" for k, v in sorted(r.items()) if k.startswith("flag.") and k != x_key
    )
    groups.setdefault(rest or "all", []).append((r[x_key], r[y_key]))
  plt = plotting.plt
  fig, ax = plt.subplots(figsize=(6, 4))
  for label, pts in sorted(groups.items()):
    pts.sort()
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
  ax.set_xlabel(figure["x"])
  ax.set_ylabel(y_key)
  if len(groups) > 1:
    ax.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(root, "results.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
