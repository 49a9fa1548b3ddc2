"""Progress of a running sampler program: its chains report the steps they have taken to the host
while the program runs, and a listener turns the count into a rate and an ETA.

Inside a traced chain, :func:`tick` reports every ``every``-th step through a ``jax.debug.callback``
(one host call per ``every`` steps per chain; nothing else in the program changes, so the compiled
program is the same whoever listens). On the host, :func:`listening` installs a function that
receives the number of chain steps taken since the last call; with no listener the reports are
dropped. Chains run from several threads (:func:`mechjax.slt.placement.cpu_thread_groups`) report
under one lock.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

_LOCK = threading.Lock()
_LISTENERS: list[Callable[[int], None]] = []


def ticks(num_steps: int) -> int:
  """Steps between two reports of one chain: about 50 reports per chain, at least 1 step apart."""
  return max(1, num_steps // 50)


def tick(step: jax.Array, every: int, num_steps: int) -> None:
  """Reports the steps done since the chain's last report after its first step, after every step
  ``t`` with ``t + 1`` a multiple of ``every``, and after its last step ``num_steps − 1`` (inside
  a traced chain; under ``vmap`` each chain's report counts): every step is counted once, and the
  first report marks when the chain started, after compiling."""
  previous = jnp.maximum(1, (step // every) * every)
  done = jnp.where(step == 0, 1, step + 1 - previous).astype(jnp.int32)
  due = (step == 0) | ((step + 1) % every == 0) | (step == num_steps - 1)

  def report(_):
    jax.debug.callback(_received, done)

  jax.lax.cond(due, report, lambda _: None, None)


def _received(steps) -> None:
  done = int(np.sum(steps))
  with _LOCK:
    for listener in _LISTENERS:
      listener(done)


@contextlib.contextmanager
def listening(listener: Callable[[int], None]) -> Iterator[None]:
  """Calls ``listener(steps)`` with every report of the chains that run inside the block."""
  with _LOCK:
    _LISTENERS.append(listener)
  try:
    yield
  finally:
    with _LOCK:
      _LISTENERS.remove(listener)


class Meter:
  """A listener that prints one progress line at a time: the part running, the units (chain steps,
  say) done of ``total``, the part's rate (from its first report on, so compiling is not counted)
  and the ETA of the whole run at that rate; at most one line per ``interval`` seconds, the first
  ``settle`` seconds after the part's first report. ``print_fn`` receives each line."""

  def __init__(
    self,
    total: int,
    print_fn: Callable[[str], None],
    interval: float = 20.0,
    settle: float = 15.0,
    unit: str = "chain steps",
  ):
    self.total, self.print_fn, self.interval, self.settle = total, print_fn, interval, settle
    self.unit = unit
    self.done, self.label, self.rate, self.printed = 0, "", None, 0
    self._first = self._last = None

  def start(self, label: str) -> None:
    """Names the part that reports next (``"l1 heads"``, say), whose rate is measured anew."""
    self.label, self._first = label, None

  def skip(self, steps: int) -> None:
    """Counts steps done without running them (a part loaded from an earlier run)."""
    self.done += steps

  def __call__(self, steps: int) -> None:
    now = time.perf_counter()
    self.done += steps
    if self._first is None:  # the first report: the clock of this part starts here
      self._first = (now, self.done)
      return
    self.rate = (self.done - self._first[1]) / max(now - self._first[0], 1e-9)
    settled = now - self._first[0] >= self.settle  # chains in other threads have reported too
    if settled and (self._last is None or now - self._last >= self.interval):
      self._last = now
      self._print()

  def _print(self) -> None:
    self.printed += 1
    self.print_fn(self.line())

  def end(self) -> None:
    """Prints the line of the part that has just finished."""
    self._print()
    self._last = time.perf_counter()

  def line(self) -> str:
    left = (self.total - self.done) / self.rate if self.rate else float("nan")
    if self.rate is None:
      rate = "?"
    elif self.rate >= 1 or self.unit == "chain steps":
      rate = f"{self.rate:.3g} {self.unit.split()[-1]}/s"
    else:
      rate = f"{duration(1 / self.rate)} per {self.unit.split()[-1].rstrip('s')}"
    return (
      f"  {self.label}: {self.done:,}/{self.total:,} {self.unit}, {rate}, ETA of the run "
      f"{duration(left)}"
    )


def duration(seconds: float) -> str:
  """``"1 h 05 min"``, ``"4 min 10 s"`` or ``"12 s"``."""
  if not np.isfinite(seconds):
    return "unknown"
  s = int(round(seconds))
  if s >= 3600:
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
  if s >= 60:
    return f"{s // 60} min {s % 60:02d} s"
  return f"{s} s"
