"""A one-line progress report per chunk, on stderr: step, steps/s and ETA."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
  seconds = int(round(max(seconds, 0.0)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f"{hours}:{minutes:02d}:{secs:02d}"


class Progress:
  """Prints ``[run] step s/T (p%) | r steps/s | ETA h:mm:ss | extra`` after each chunk.

  The rate counts only the steps run by this process (a resumed run does not claim the restored
  steps), measured from the end of the first chunk so that compilation does not distort the ETA.
  """

  def __init__(
    self, run: str, total_steps: int, start_step: int, stream=None, enabled: bool = True
  ):
    self.run = run
    self.total = total_steps
    self.enabled = enabled
    self.stream = sys.stderr if stream is None else stream
    self._t0 = time.perf_counter()
    self._s0 = start_step
    self._first = True

  def update(self, step: int, extra: str = "") -> None:
    now = time.perf_counter()
    if self._first:  # Restart the clock after the chunk that included compilation.
      rate_text, eta_text = "compiling", "?"
      self._first = False
      self._t0, self._s0 = now, step
    else:
      rate = (step - self._s0) / max(now - self._t0, 1e-9)
      rate_text = f"{rate:,.0f} steps/s"
      eta_text = format_duration((self.total - step) / rate) if rate > 0 else "?"
    if self.enabled:
      pct = 100.0 * step / self.total
      line = f"[{self.run}] step {step}/{self.total} ({pct:.0f}%) | {rate_text} | ETA {eta_text}"
      print(line + (f" | {extra}" if extra else ""), file=self.stream, flush=True)
