"""Metrics on the host: ``metrics.jsonl`` (one JSON object per logged step) and atomic JSON files.

A line is ``{"run": name, "step": s, "<metric>": [one value per seed], ...}``. Several runs of one
experiment (one per condition) share one file, told apart by ``"run"``. When a run resumes from the
checkpoint at step ``s``, its lines after ``s`` (written before the process died) are dropped, so
the file always describes exactly the state that training continues from.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax.train import distributed


def to_jsonable(value: Any) -> Any:
  """Converts numpy/JAX scalars and arrays to plain Python; non-finite floats become None."""
  if isinstance(value, dict):
    return {str(k): to_jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_jsonable(v) for v in value]
  if isinstance(value, (np.ndarray, jax.Array)):
    return to_jsonable(np.asarray(value).tolist())
  if isinstance(value, (np.floating, float)):
    return float(value) if math.isfinite(value) else None
  if isinstance(value, np.integer):
    return int(value)
  if isinstance(value, np.bool_):
    return bool(value)
  return value


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Writes ``obj`` as indented JSON via a temporary file and a rename, so a reader never sees half
  a file."""
  if not distributed.is_writer():
    return
  tmp = f"{os.fspath(path)}.tmp"
  with open(tmp, "w") as f:
    json.dump(to_jsonable(obj), f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  """All complete lines of a JSONL file (a torn last line from a killed writer is ignored)."""
  if not os.path.exists(path):
    return []
  rows = []
  with open(path) as f:
    for line in f:
      try:
        rows.append(json.loads(line))
      except json.JSONDecodeError:
        continue
  return rows


def first_step(
  history: list[dict], key: str, threshold: float, members: int | slice = slice(None)
) -> int | None:
  """The first logged step of ``history`` (a run's metrics rows) at which ``key``, averaged over
  ``members`` (an index or a slice of the seed axis; all seeds by default), reaches ``threshold``;
  None if it never does."""
  return next(
    (r["step"] for r in history if np.mean(np.asarray(r[key])[members]) >= threshold), None
  )


def crossing_step(steps, values, threshold: float) -> float | None:
  """The first step at which ``values`` (logged at ``steps``) is at or below ``threshold``,
  interpolated linearly between the logged steps around it; None if it never is."""
  below = np.nonzero(np.asarray(values) <= threshold)[0]
  if below.size == 0:
    return None
  i = int(below[0])
  if i == 0:
    return float(steps[0])
  s0, s1, l0, l1 = steps[i - 1], steps[i], values[i - 1], values[i]
  return float(s0 + (s1 - s0) * (l0 - threshold) / (l0 - l1))


def crossing_steps(history: list[dict], key: str, threshold: float) -> list[float | None]:
  """:func:`crossing_step` of every seed of a run's ``history`` (metrics rows with ``"step"`` and
  ``key`` holding one value per seed)."""
  steps = np.array([h["step"] for h in history], float)
  values = np.array([h[key] for h in history], float)
  return [crossing_step(steps, values[:, s], threshold) for s in range(values.shape[1])]


def paired_shift(values: list, baseline: list) -> dict:
  """``values`` minus ``baseline``, seed by seed, over the seeds where both are not None:
  ``per_seed``, their ``mean`` and ``sd`` (None with too few seeds), ``seeds_compared``, and how
  many moved below (``earlier_in``) or above (``later_in``) the baseline."""
  d = np.array([a - b for a, b in zip(values, baseline) if a is not None and b is not None])
  return {
    "per_seed": d,
    "mean": d.mean() if d.size else None,
    "sd": d.std(ddof=1) if d.size > 1 else None,
    "seeds_compared": d.size,
    "earlier_in": np.sum(d < 0),
    "later_in": np.sum(d > 0),
  }


def finite_mean(xs) -> float | None:
  """The mean, as a Python float computed in float64, of the values of ``xs`` that are neither None
  nor NaN/±inf; None when no value is left."""
  xs = [float(x) for x in xs if x is not None and np.isfinite(x)]
  return float(np.mean(xs)) if xs else None


def bonferroni(p_values) -> float:
  """The Bonferroni-combined p-value of several tests of one hypothesis: ``min(1, m · min p)`` for
  ``m`` p-values."""
  p_values = list(p_values)
  return min(1.0, len(p_values) * min(p_values))


def spread(values) -> dict:
  """How a sample of numbers spreads: its ``min``, ``median``, ``max`` and ``sd`` (with Bessel's
  correction; 0.0 for a single value)."""
  v = np.asarray(values)
  sd = v.std(ddof=1) if v.size > 1 else 0.0
  return {"min": v.min(), "median": np.median(v), "max": v.max(), "sd": sd}


def pool_tests(tests: list[dict], level: float = 0.05) -> dict:
  """One row of a table from several results of one hypothesis test (each a dict with ``"value"``,
  ``"null_mean"`` and ``"p_value"``, as :func:`mechjax.align.haar.haar_test` gives per statistic,
  e.g. one per seed pair): the mean statistic ``value_mean`` and its null's ``null_mean``
  (:func:`finite_mean`), the median p-value ``p_median`` and ``fraction_rejected``, the share of
  the tests with p ≤ ``level``."""
  ps = np.array([t["p_value"] for t in tests])
  return {
    "value_mean": finite_mean([t["value"] for t in tests]),
    "null_mean": finite_mean([t["null_mean"] for t in tests]),
    "p_median": np.median(ps),
    "fraction_rejected": np.mean(ps <= level),
  }


def mean_or_none(xs):
  """The mean of ``xs``, or None as soon as one value is None (e.g. the step at which a seed that
  never got there reached a threshold)."""
  return None if any(x is None for x in xs) else np.mean(xs)


def cross_entropy_accuracy(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The mean softmax cross-entropy of ``logits`` ``(N, classes)`` against integer ``labels``
  ``(N,)``, and the fraction of rows whose largest logit is at the label (traceable)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
  return ce, jnp.mean(jnp.argmax(logits, -1) == labels)


def progress_line(row: dict, fields: dict[str, str], digits: int = 3) -> str:
  """One logged row of a run as a line of the progress log: ``"<name> <value> | …"``, one entry per
  ``name: key`` of ``fields``, the value being the mean over the seeds of ``row[key]`` with
  ``digits`` decimals."""
  return " | ".join(f"{name} {np.mean(row[key]):.{digits}f}" for name, key in fields.items())


class MetricsWriter:
  """Appends the lines of one run to a shared ``metrics.jsonl``.

  With ``tensorboard=True`` every line is also written as TensorBoard scalars (tensorboardX) under
  ``<folder of metrics.jsonl>/tensorboard/<run>/``: a per-seed value ``name: [v0, v1, …]`` as
  ``name/seed_0``, ``name/seed_1``, … and its mean as ``name/mean``. ``metrics.jsonl`` stays the
  source of truth; after a resume the event files' steps past the checkpoint are purged, as the
  lines of ``metrics.jsonl`` are.

  Args:
    path: the ``metrics.jsonl`` file, shared by every training run of a workdir.
    run: this run's name (the ``run`` field of its lines).
    tensorboard: also write TensorBoard event files.
  """

  def __init__(self, path: str | os.PathLike, run: str, tensorboard: bool = False):
    self.path = os.fspath(path)
    self.run = run
    self.tensorboard = tensorboard
    self._tb = None
    self._purge_step: int | None = None

  def history(self) -> list[dict]:
    """This run's lines, in step order."""
    return sorted(
      (r for r in read_jsonl(self.path) if r.get("run") == self.run), key=lambda r: r["step"]
    )

  def truncate_after(self, step: int) -> None:
    """Drops this run's lines with ``step > step`` (and any torn line); other runs' lines are
    kept."""
    if not distributed.is_writer() or not os.path.exists(self.path):
      return
    rows = read_jsonl(self.path)
    self._purge_step = step + 1
    keep = [r for r in rows if r.get("run") != self.run or r.get("step", 0) <= step]
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in keep)
    os.replace(tmp, self.path)

  def write(self, step: int, metrics: dict[str, Any]) -> dict:
    row = {"run": self.run, "step": int(step), **to_jsonable(metrics)}
    if distributed.is_writer():
      with open(self.path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
      if self.tensorboard:
        self._write_tensorboard(row)
    return row

  def _write_tensorboard(self, row: dict) -> None:
    if self._tb is None:
      try:
        from tensorboardX import SummaryWriter
      except ImportError as e:
        raise ImportError(
          "--tensorboard needs tensorboardX: pip install tensorboardX (or mechjax[tensorboard])"
        ) from e
      folder = os.path.join(os.path.dirname(os.path.abspath(self.path)), "tensorboard", self.run)
      # A unique suffix: two writers in one second of one process would otherwise share a file name.
      self._tb = SummaryWriter(
        folder, purge_step=self._purge_step, filename_suffix=f".{time.time_ns()}"
      )
    step = row["step"]
    for name, value in row.items():
      if name in ("run", "step"):
        continue
      if isinstance(value, (int, float)) and not isinstance(value, bool):
        self._tb.add_scalar(name, value, step)
      elif isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        for i, v in enumerate(value):
          self._tb.add_scalar(f"{name}/seed_{i}", v, step)
        self._tb.add_scalar(f"{name}/mean", sum(value) / len(value), step)
    self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
