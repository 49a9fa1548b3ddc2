"""Behavioural probes of a language model, from its own forward pass: per-head induction
(prefix-matching) scores, and the in-context-learning score.

* **Prefix matching** (Olsson et al. 2022, "In-context learning and induction heads", arXiv
  2209.11895): on sequences ``[r; r]``, a random token sequence ``r`` of length ``m`` repeated, a
  head at a query position ``i ≥ m`` in the second copy is scored by its attention to position
  ``i − m + 1``, the token that followed the current token's earlier occurrence. The score is that
  attention averaged over the second copy's positions and over sequences: 1 for a perfect
  induction head, about ``1/i`` for uniform attention.
* **Repeated-sequence loss drop**: the mean next-token loss on the first copy minus that on the
  second; a model that copies from context predicts the second copy far better.
* **In-context learning score** (Olsson et al. 2022): the loss at a late token of real text minus
  the loss at an early one, averaged over windows; more negative is more in-context learning. With
  windows of ``T`` tokens, "late" is position ``⌊0.9 T⌋`` and "early" ``⌊0.1 T⌋`` (Olsson et al.
  take the 500th and 50th tokens of 512), each averaged over 5 neighbouring positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import pretrained
from mechjax.models.sites import attention_patterns


def repeated_sequences(vocab_size: int, half: int, num: int, seed: int, low: int = 1) -> np.ndarray:
  """``(num, 2·half)`` int32: ``num`` random sequences of ``half`` tokens drawn uniformly from
  ``[low, vocab_size)`` (``low`` skips the special ids at the start of a vocabulary), each
  repeated once."""
  r = np.random.default_rng(seed).integers(low, vocab_size, size=(num, half))
  return np.concatenate([r, r], axis=1).astype(np.int32)


def prefix_matching(model, params, seqs_BxT: np.ndarray) -> jax.Array:
  """Each head's prefix-matching score on repeated sequences ``[r; r]`` (module docstring),
  ``(layers, heads)``."""
  t = seqs_BxT.shape[1]
  m = t // 2
  patterns = attention_patterns(model, params, jnp.asarray(seqs_BxT))  # (L, B, H, Tq, Tk)
  queries = np.arange(m, t)  # the second copy
  targets = queries - m + 1  # after the current token's first occurrence
  picked = patterns[:, :, :, queries, targets]  # (L, B, H, m - 1)
  return picked.mean(axis=(1, 3))


def repeat_loss_drop(model, params, seqs_BxT: np.ndarray) -> jax.Array:
  """The mean next-token loss predicting the first copy minus that predicting the second."""
  losses = pretrained.next_token_losses(model, params, jnp.asarray(seqs_BxT))  # (B, T − 1)
  m = seqs_BxT.shape[1] // 2
  # Position p predicts token p + 1: the first copy's tokens 1..m−1, the second's m+1..2m−1.
  return losses[:, : m - 1].mean() - losses[:, m:].mean()


def icl_positions(seq_len: int) -> tuple[np.ndarray, np.ndarray]:
  """The early and late positions the in-context-learning score compares (module docstring)."""
  early, late = int(0.1 * seq_len), int(0.9 * seq_len)
  span = np.arange(-2, 3)
  return np.clip(early + span, 0, seq_len - 2), np.clip(late + span, 0, seq_len - 2)


def icl_score(losses_BxT: jax.Array) -> jax.Array:
  """The loss at the late positions minus the loss at the early ones (module docstring), averaged
  over windows of real text, from their next-token losses ``(B, T − 1)``
  (:func:`mechjax.models.pretrained.next_token_losses`)."""
  early, late = icl_positions(losses_BxT.shape[1] + 1)
  return losses_BxT[:, late].mean() - losses_BxT[:, early].mean()


def measure(model, params_P, seqs_BxT: np.ndarray, text_BxT: np.ndarray, batch: int = 16) -> dict:
  """Every probe at each of ``P`` points (params with a leading axis), in batches of ``batch``
  sequences: ``{"prefix_matching": (P, L, H), "repeat_loss_drop": (P,), "icl_score": (P,),
  "loss": (P,)}``, ``loss`` the mean next-token loss on ``text_BxT``."""

  def one(params, seqs, text):
    losses = pretrained.next_token_losses(model, params, text)
    return {
      "prefix_matching": prefix_matching(model, params, seqs),
      "repeat_loss_drop": repeat_loss_drop(model, params, seqs),
      "icl_score": icl_score(losses),
      "loss": losses.mean(),
    }

  run = jax.jit(jax.vmap(one, (0, None, None)))
  parts = []
  for start in range(0, max(len(seqs_BxT), len(text_BxT)), batch):
    s, x = seqs_BxT[start : start + batch], text_BxT[start : start + batch]
    if len(s) == batch and len(x) == batch:
      parts.append(jax.tree.map(np.asarray, run(params_P, s, x)))
  if not parts:
    raise ValueError(
      f"the probes need at least {batch} repeated sequences and {batch} text windows"
    )
  return {k: np.mean([p[k] for p in parts], axis=0) for k in parts[0]}
