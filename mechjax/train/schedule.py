"""When a training run stops between steps: the ends of its chunks, the power-of-two pieces that run
irregular chunks with few compiled programs, and checkpoint steps packed early.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def chunk_ends(
  start: int, steps: int, log_every: int, checkpoint_every: int, extra: Sequence[int] = ()
) -> list[int]:
  """Steps after ``start`` where a chunk ends: multiples of ``log_every`` or ``checkpoint_every``,
  the ``extra`` steps (within ``(0, steps]``), and ``steps``.

  The ends depend only on the flags, not on ``start``, so a resumed run cuts the remaining steps
  exactly as the uninterrupted run did (its logged metrics, chunk means included, are the same).
  """
  ends = (
    set(range(log_every, steps, log_every))
    | set(range(checkpoint_every, steps, checkpoint_every))
    | {steps}
  )
  ends |= {int(e) for e in extra if 0 < e <= steps}
  return sorted(e for e in ends if e > start)


def binary_pieces(n: int, cap: int) -> list[int]:
  """``n`` as a sum of powers of two, none above the largest power of two ``<= cap``, largest first:
  every chunk of any length is then run by at most ``log2(cap) + 1`` distinct compiled programs."""
  top = 1 << max(0, int(cap).bit_length() - 1)
  pieces = [top] * (n // top)
  rest = n % top
  pieces += [1 << b for b in range(rest.bit_length() - 1, -1, -1) if rest >> b & 1]
  return pieces


def power_schedule(steps: int, num: int, power: float) -> list[int]:
  """Checkpoint steps packed early, where the weights move fastest: ``round(steps · (k/num)^power)``
  for ``k = 1..num``, deduplicated and never step 0. Pass them as :func:`train`'s
  ``checkpoint_steps``, with ``binary_chunks=True`` (their gaps are irregular).

  Args:
    steps: the run's length, the last checkpoint.
    num: checkpoints before deduplication.
    power: ``> 1`` packs them early; ``1`` spaces them evenly.
  """
  ks = np.arange(1, num + 1) / num
  return sorted({max(1, int(round(steps * k**power))) for k in ks})
