"""Random token sequences whose second half repeats the first in a fraction of them: the data on
which induction heads form (Olsson et al. 2022, "In-context learning and induction heads").

In a repeated sequence ``x[half + i] = x[i]``, so from position ``half + 1`` on every next token can
be copied from the earlier occurrence: the predictions at positions ``half … length − 2`` (of tokens
``half + 1 … length − 1``) are the *induction* predictions. Nothing else is predictable: tokens are
i.i.d. uniform, so the loss there is ``ln(vocab)`` for any model.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def _check(length: int, vocab: int, repeat_fraction: float) -> None:
  if not (isinstance(length, (int, np.integer)) and length >= 4 and length % 2 == 0):
    raise ValueError(f"length must be an even integer >= 4; got {length!r}")
  if not (isinstance(vocab, (int, np.integer)) and vocab >= 2):
    raise ValueError(f"vocab must be an integer >= 2; got {vocab!r}")
  if not 0 <= repeat_fraction <= 1:
    raise ValueError(f"repeat_fraction must be in [0, 1]; got {repeat_fraction!r}")


@functools.partial(jax.jit, static_argnames=("num", "length", "vocab", "repeat_fraction"))
def sample(
  key: jax.Array, num: int, length: int, vocab: int, repeat_fraction: float = 0.5
) -> dict[str, jax.Array]:
  """``{"tokens": (num, length) int32, "repeat": (num,) int32}``; each sequence repeats with
  probability ``repeat_fraction`` (``repeat = 1``). One compiled program per ``num``, ``length``,
  ``vocab`` and ``repeat_fraction`` (static), inlined when called inside another."""
  _check(length, vocab, repeat_fraction)
  k_tok, k_rep = jax.random.split(key)
  tokens = jax.random.randint(k_tok, (num, length), 0, vocab, dtype=jnp.int32)
  repeat = jax.random.bernoulli(k_rep, repeat_fraction, (num,))
  half = length // 2
  copied = jnp.concatenate([tokens[:, :half], tokens[:, :half]], axis=1)
  return {"tokens": jnp.where(repeat[:, None], copied, tokens), "repeat": repeat.astype(jnp.int32)}


def fixed(
  key: jax.Array | int, num: int, length: int, vocab: int, repeat: bool
) -> dict[str, jax.Array]:
  """``num`` sequences that all repeat (or all do not), drawn from ``key`` (or ``PRNGKey(key)`` for
  an int): evaluation and probe sets."""
  key = jax.random.PRNGKey(key) if isinstance(key, (int, np.integer)) else key
  return sample(key, num, length, vocab, 1.0 if repeat else 0.0)


def induction_mask(length: int) -> np.ndarray:
  """``(length − 1,)`` booleans over prediction positions ``t`` (predicting token ``t + 1``): True
  where a repeated sequence makes the next token copyable, ``t ≥ length/2``."""
  return np.arange(length - 1) >= length // 2


def token_groups(repeat_B, length: int) -> np.ndarray:
  """The group of every prediction token, ``(B, length − 1)``: ``repeat · (length − 1) + t`` for the
  prediction at position ``t`` of a sequence that repeats (``repeat = 1``) or not. Groups
  ``0 … length − 2`` are the random sequences' positions, the rest the repeated ones'."""
  t = np.arange(length - 1)
  return np.asarray(repeat_B)[:, None] * (length - 1) + t[None]


def group_shares(length: int, repeat_fraction: float) -> np.ndarray:
  """Each :func:`token_groups` group's share of the tokens of :func:`sample`: ``(2 (length − 1),)``
  shares, summing to 1."""
  kind = np.repeat([1 - repeat_fraction, repeat_fraction], length - 1)
  return kind / (length - 1)


def induction_groups(length: int) -> np.ndarray:
  """The :func:`token_groups` groups of the induction predictions of repeated sequences."""
  return length - 1 + np.nonzero(induction_mask(length))[0]


def prefix_matching_score(attention_BxHxTxT: jax.Array) -> jax.Array:
  """Per head, the mean attention from each position ``t`` of the second copy to ``t − half + 1``,
  the position right after the earlier occurrence of the current token (the induction target), over
  repeated sequences: ``(H,)``. A perfect induction head scores 1; uniform causal attention scores
  about ``Σ_t 1/(t+1)/half``."""
  t = attention_BxHxTxT.shape[-1]
  half = t // 2
  queries = jnp.arange(half, t)
  return jnp.mean(attention_BxHxTxT[:, :, queries, queries - half + 1], axis=(0, 2))
