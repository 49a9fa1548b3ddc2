"""A one-line progress report per chunk, on stderr: step, steps/s and ETA, and, for a study of
several training runs, the run's position among them and the ETA of the whole study."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
  seconds = int(round(max(seconds, 0.0)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f"{hours}:{minutes:02d}:{secs:02d}"


class Plan:
  """The training runs a study will do, for the progress line's overall position and ETA.

  A study that trains ``total`` runs (one per condition, say) makes one ``Plan(total, "condition")``
  (:meth:`mechjax.studies.frame.Context.plan`); every training run calls :meth:`begin` and
  :meth:`end`. The overall ETA is the current run's ETA plus, for each run still to come, the mean
  duration of the runs this process has trained so far, or, before any has finished, the current
  run's projected duration; while the current run compiles, its remaining time is that mean less
  its time so far. A run that a rerun finds complete takes no time and is not averaged.
  """

  def __init__(self, total: int, noun: str = "run"):
    if int(total) < 1:
      raise ValueError(f"a plan needs at least one run; got total={total}")
    self.total = int(total)
    self.noun = noun
    self.index = 0  # 1-based position of the current run; 0 before the first
    self._durations: list[float] = []
    self._started = 0.0
    self._trained = False

  def begin(self) -> None:
    self.index += 1
    self._started = time.perf_counter()
    self._trained = False

  def end(self) -> None:
    if self._trained:
      self._durations.append(time.perf_counter() - self._started)

  def position(self) -> str:
    return f"{self.noun} {min(self.index, self.total)}/{self.total}"

  def eta(self, run_remaining: float | None) -> float | None:
    """Seconds until the study's last planned run ends, given the current run's remaining time
    (None, while it is still unknown, gives None)."""
    self._trained = True
    elapsed = time.perf_counter() - self._started
    if self._durations:
      per_run = sum(self._durations) / len(self._durations)
      if run_remaining is None:  # compiling: take this run to be as long as the others
        run_remaining = max(per_run - elapsed, 0.0)
    elif run_remaining is None:
      return None
    else:
      per_run = elapsed + run_remaining
    return run_remaining + max(self.total - self.index, 0) * per_run


class Progress:
  """Prints ``[run] step s/T (p%) | r steps/s | ETA h:mm:ss | extra`` after each chunk; with a
  :class:`Plan`, ``[run] condition k/n | step s/T (p%) | r steps/s | ETA h:mm:ss (all: h:mm:ss) |
  extra``.

  The rate counts only the steps run by this process (a resumed run does not claim the restored
  steps), measured from the end of the first chunk so that compilation does not distort the ETA.
  """

  def __init__(
    self,
    run: str,
    total_steps: int,
    start_step: int,
    stream=None,
    enabled: bool = True,
    plan: Plan | None = None,
  ):
    self.run = run
    self.total = total_steps
    self.enabled = enabled
    self.plan = plan
    self.stream = sys.stderr if stream is None else stream
    self._t0 = time.perf_counter()
    self._s0 = start_step
    self._first = True

  def update(self, step: int, extra: str = "") -> None:
    now = time.perf_counter()
    remaining = None
    if self._first:  # Restart the clock after the chunk that included compilation.
      rate_text, eta_text = "compiling", "?"
      self._first = False
      self._t0, self._s0 = now, step
    else:
      rate = (step - self._s0) / max(now - self._t0, 1e-9)
      rate_text = f"{rate:,.0f} steps/s"
      if rate > 0:
        remaining = (self.total - step) / rate
        eta_text = format_duration(remaining)
      else:
        eta_text = "?"
    where = ""
    if self.plan is not None:
      where = f"{self.plan.position()} | "
      if step >= self.total:
        remaining = 0.0
      overall = self.plan.eta(remaining)
      overall = "?" if overall is None else format_duration(overall)
      eta_text += f" (all: {overall})"
    if self.enabled:
      pct = 100.0 * step / self.total
      line = (
        f"[{self.run}] {where}step {step}/{self.total} ({pct:.0f}%) | {rate_text} | ETA {eta_text}"
      )
      print(line + (f" | {extra}" if extra else ""), file=self.stream, flush=True)
