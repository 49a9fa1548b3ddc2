"""Parenthesis balancing with two algorithms that agree on the training data and disagree on probes.

A string over ``(`` and ``)`` is *balanced* when no prefix has more ``)`` than ``(`` and the counts
are equal. Two algorithms classify strings:

* **equal counts** (``"counts"``): the number of ``(`` equals the number of ``)``;
* **counts and prefix** (``"prefix"``): additionally, no prefix goes negative (true balance).

The training set holds balanced strings (label 1) and strings with *unequal* counts (label 0), and
no string with equal counts and a negative prefix, so both algorithms are perfect on it. The probe
set holds exactly those strings, such as ``())(``: ``counts`` calls them balanced and ``prefix``
does not, so a model's answers on the probes tell which algorithm it learned.

Tokens: ``0 = (``, ``1 = )``; every string has the same even length. Everything is drawn with NumPy
from a seed, so a dataset is a pure function of its arguments.

**The prefix cue.** Drawn uniformly, most unequal-count strings also have a negative prefix (about
81% at length 20, and 52% start with ``)``), so "a negative prefix means unbalanced" is a cheap rule
that already rejects most negatives, and models trained on such data learn the prefix algorithm.
``neg_prefix_fraction`` sets the share of negatives that carry the cue: ``0`` draws every negative
from the unequal-count strings whose prefixes never go negative (such as ``((()(``), where the cue
says nothing, ``1`` draws every one with a negative prefix, and ``None`` keeps the uniform draw.
"""

from __future__ import annotations

import numpy as np

OPEN, CLOSE = 0, 1
ALGORITHMS = ("counts", "prefix")


def prefix_sums(tokens: np.ndarray) -> np.ndarray:
  """Running ``#( − #)`` after each token, ``(..., L)``."""
  return np.cumsum(np.where(np.asarray(tokens) == OPEN, 1, -1), axis=-1)


def equal_counts(tokens: np.ndarray) -> np.ndarray:
  return prefix_sums(tokens)[..., -1] == 0


def balanced(tokens: np.ndarray) -> np.ndarray:
  s = prefix_sums(tokens)
  return (s[..., -1] == 0) & (s.min(axis=-1) >= 0)


def label(tokens: np.ndarray, algorithm: str) -> np.ndarray:
  """What ``algorithm`` answers (1: balanced) for each string."""
  if algorithm == "counts":
    return equal_counts(tokens).astype(np.int32)
  if algorithm == "prefix":
    return balanced(tokens).astype(np.int32)
  raise ValueError(f"algorithm must be one of {ALGORITHMS}; got {algorithm!r}")


def _check_length(length: int) -> int:
  if not (isinstance(length, (int, np.integer)) and length >= 4 and length % 2 == 0):
    raise ValueError(f"length must be an even integer >= 4; got {length!r}")
  return int(length)


def _equal_count_strings(rng: np.random.Generator, num: int, length: int) -> np.ndarray:
  """Uniform strings with ``length/2`` of each token."""
  base = np.array([OPEN] * (length // 2) + [CLOSE] * (length // 2), np.int32)
  return rng.permuted(np.broadcast_to(base, (num, length)).copy(), axis=1)


def _draw(rng, num: int, length: int, accept, make) -> np.ndarray:
  out, have = [np.zeros((0, length), np.int32)], 0
  while have < num:
    cand = make(rng, max(4 * (num - have), 64), length)
    cand = cand[accept(cand)]
    out.append(cand)
    have += len(cand)
  return np.concatenate(out)[:num]


def sample_balanced(rng: np.random.Generator, num: int, length: int) -> np.ndarray:
  """Uniform balanced strings (rejection from uniform equal-count strings; acceptance 1/(length/2 +
  1))."""
  return _draw(rng, num, _check_length(length), balanced, _equal_count_strings)


def sample_probes(
  rng: np.random.Generator, num: int, length: int, inner: bool = False
) -> np.ndarray:
  """Uniform equal-count strings with a negative prefix: where the two algorithms disagree.

  With ``inner``, only probes that start with ``(`` and end with ``)``, so that neither end gives
  the answer away: the first ``num`` such of ``16 · num`` probes, refused when fewer are (short
  strings have few).
  """
  if not inner:
    disagree = lambda t: equal_counts(t) & ~balanced(t)
    return _draw(rng, num, _check_length(length), disagree, _equal_count_strings)
  pool = sample_probes(rng, 16 * num, length)
  kept = pool[(pool[:, 0] == OPEN) & (pool[:, -1] == CLOSE)]
  if len(kept) < num:
    raise ValueError(
      f"only {len(kept)} of {16 * num} probes start with ( and end with ); ask for fewer probes "
      "or longer strings"
    )
  return kept[:num]


def has_negative_prefix(tokens: np.ndarray) -> np.ndarray:
  """Whether some prefix has more ``)`` than ``(``: the cue the prefix algorithm reads."""
  return prefix_sums(tokens).min(axis=-1) < 0


def sample_unequal(
  rng: np.random.Generator, num: int, length: int, neg_prefix_fraction: float | None = None
) -> np.ndarray:
  """Strings whose counts differ (label 0 for both algorithms).

  With ``neg_prefix_fraction=None`` they are uniform over such strings. Otherwise
  ``round(num · neg_prefix_fraction)`` of them are uniform over the unequal-count strings with a
  negative prefix and the rest uniform over those without one, in random order.
  """
  length = _check_length(length)
  uniform = lambda r, n, l: r.integers(0, 2, (n, l)).astype(np.int32)
  if neg_prefix_fraction is None:
    return _draw(rng, num, length, lambda t: ~equal_counts(t), uniform)
  if not 0 <= neg_prefix_fraction <= 1:
    raise ValueError(f"neg_prefix_fraction must be in [0, 1] or None; got {neg_prefix_fraction!r}")
  with_cue = int(round(num * neg_prefix_fraction))
  cue = _draw(rng, with_cue, length, lambda t: ~equal_counts(t) & has_negative_prefix(t), uniform)
  plain = _draw(
    rng, num - with_cue, length, lambda t: ~equal_counts(t) & ~has_negative_prefix(t), uniform
  )
  out = np.concatenate([cue, plain])
  return out[rng.permutation(num)]


def make_dataset(
  seed: int | np.random.Generator,
  num: int,
  length: int,
  balanced_fraction: float = 0.5,
  neg_prefix_fraction: float | None = None,
) -> dict[str, np.ndarray]:
  """A training set of ``num`` strings: ``balanced_fraction`` balanced (label 1), the rest with
  unequal counts (label 0, :func:`sample_unequal` with ``neg_prefix_fraction``), shuffled, drawn
  from ``seed`` (an int, or a NumPy generator such as :func:`mechjax.rng.numpy`). Both algorithms
  label every string the same (checked)."""
  if not 0 < balanced_fraction < 1:
    raise ValueError(f"balanced_fraction must be in (0, 1); got {balanced_fraction!r}")
  rng = np.random.default_rng(seed)
  num_pos = int(round(num * balanced_fraction))
  tokens = np.concatenate(
    [
      sample_balanced(rng, num_pos, length),
      sample_unequal(rng, num - num_pos, length, neg_prefix_fraction),
    ]
  )
  tokens = tokens[rng.permutation(num)]
  y = label(tokens, "prefix")
  assert np.array_equal(y, label(tokens, "counts"))
  return {"tokens": tokens, "label": y}


def features(tokens: np.ndarray) -> dict[str, np.ndarray]:
  """Per-string features used to group training strings for re-weighting: the first token, the count
  difference ``#( − #)``, the minimum prefix sum and the maximum nesting depth."""
  s = prefix_sums(tokens)
  return {
    "first_close": (np.asarray(tokens)[..., 0] == CLOSE).astype(np.int32),
    "count_difference": s[..., -1],
    "min_prefix": np.minimum(s.min(axis=-1), 0),
    "max_depth": np.maximum(s.max(axis=-1), 0),
  }


def groups(tokens: np.ndarray) -> tuple[np.ndarray, list[str]]:
  """Groups of strings for re-weighting by :mod:`mechjax.slt.patterning`: strings that share their
  label, first token, depth of the most negative prefix (clipped at 3) and ``|#( − #)| // 2``
  (clipped at 3). So no group mixes labels, and a weight moved onto a group moves the features the
  two algorithms read.

  Returns:
    ``(ids, names)``: each string's group id (``0 .. G−1``, in sorted order of the keys) and one
    name per group, e.g. ``"uneq )… min2 Δ4"``.
  """
  f = features(tokens)
  keys = np.stack(
    [
      label(tokens, "prefix"),
      f["first_close"],
      np.minimum(-f["min_prefix"], 3),
      np.minimum(np.abs(f["count_difference"]) // 2, 3),
    ],
    1,
  )
  uniq, ids = np.unique(keys, axis=0, return_inverse=True)
  names = [
    f"{'bal' if b else 'uneq'} {')' if c else '('}… min{-m} Δ{2 * d}" + ("+" if d == 3 else "")
    for b, c, m, d in uniq
  ]
  return ids.reshape(-1), names
