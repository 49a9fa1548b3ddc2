"""Dyck-k bracket sequences with next-token, depth and validity targets, generated on the device.

Tokens: ``PAD = 0``, ``BOS = 1``, opening bracket ``i`` is ``2 + i`` and closing bracket ``i`` is
``2 + k + i`` (``i < k``), so the vocabulary has ``2 + 2k`` tokens (8 for Dyck-3). A sequence is
``BOS`` followed by ``length − 1`` brackets.

Generation: a random walk on the nesting depth. At depth 0 the next bracket opens; at ``max_depth``
it closes; otherwise it opens with probability ``p_open`` (type uniform in ``k``) or closes the
innermost open bracket. With probability ``p_corrupt`` a sequence has one bracket, at a uniform
position, replaced by a uniformly chosen *different* bracket token. A corruption does not always
break the prefix (an opening bracket in place of a closing one is still a valid prefix), so validity
is computed, not assumed.

Targets, per position ``t`` (computed by :func:`check`, a stack machine over the emitted tokens):

* ``next_token[t]`` = ``tokens[t + 1]`` (``PAD`` at the last position; ``mask`` marks the real
  ones);
* ``depth[t]`` ∈ ``[0, max_depth]``: opens minus closes up to and including ``t`` (clipped);
* ``valid[t]``: whether ``tokens[1..t]`` is a valid Dyck prefix (every close matches the innermost
  open bracket, and the depth never exceeds ``max_depth``). Once invalid, a prefix stays invalid.

:func:`losses` scores a model's predictions of the three.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

PAD, BOS = 0, 1


def vocab_size(k: int) -> int:
  return 2 + 2 * k


def check(tokens_T: jax.Array, k: int, max_depth: int) -> tuple[jax.Array, jax.Array]:
  """Depth and prefix validity of one token sequence ``(T,)``; ``BOS``/``PAD`` positions keep the
  state."""

  def step(state, tok):
    stack, depth, valid = state
    is_open = (tok >= 2) & (tok < 2 + k)
    is_close = (tok >= 2 + k) & (tok < 2 + 2 * k)
    kind = jnp.where(is_open, tok - 2, tok - 2 - k)
    top = stack[jnp.maximum(depth - 1, 0)]
    overflow = is_open & (depth >= max_depth)
    bad_close = is_close & ((depth == 0) | (top != kind))
    valid = valid & ~overflow & ~bad_close
    push = is_open & ~overflow
    stack = jnp.where(push, stack.at[jnp.minimum(depth, max_depth - 1)].set(kind), stack)
    depth = jnp.where(push, depth + 1, jnp.where(is_close & (depth > 0), depth - 1, depth))
    return (stack, depth, valid), (depth, valid)

  init = (jnp.zeros(max_depth, jnp.int32), jnp.zeros((), jnp.int32), jnp.ones((), bool))
  _, (depth, valid) = jax.lax.scan(step, init, tokens_T.astype(jnp.int32))
  return depth, valid


def _generate(
  key: jax.Array, length: int, k: int, max_depth: int, p_open: float, p_corrupt: float
) -> jax.Array:
  k_walk, k_corrupt, k_pos, k_tok = jax.random.split(key, 4)

  def step(state, key):
    stack, depth = state
    k_u, k_kind = jax.random.split(key)
    opens = (depth == 0) | ((depth < max_depth) & (jax.random.uniform(k_u) < p_open))
    kind = jax.random.randint(k_kind, (), 0, k)
    top = stack[jnp.maximum(depth - 1, 0)]
    tok = jnp.where(opens, 2 + kind, 2 + k + top)
    stack = jnp.where(opens, stack.at[jnp.minimum(depth, max_depth - 1)].set(kind), stack)
    depth = jnp.where(opens, depth + 1, depth - 1)
    return (stack, depth), tok

  init = (jnp.zeros(max_depth, jnp.int32), jnp.zeros((), jnp.int32))
  _, brackets = jax.lax.scan(step, init, jax.random.split(k_walk, length - 1))
  pos = jax.random.randint(k_pos, (), 0, length - 1)
  offset = jax.random.randint(
    k_tok, (), 1, 2 * k
  )  # a different bracket token: shift within the 2k brackets
  wrong = 2 + (brackets[pos] - 2 + offset) % (2 * k)
  corrupt = jax.random.uniform(k_corrupt) < p_corrupt
  brackets = jnp.where(corrupt, brackets.at[pos].set(wrong), brackets)
  return jnp.concatenate([jnp.array([BOS], jnp.int32), brackets.astype(jnp.int32)])


def sample_dyck(
  key: jax.Array,
  num_samples: int,
  *,
  length: int = 64,
  k: int = 3,
  max_depth: int = 8,
  p_open: float = 0.5,
  p_corrupt: float = 0.5,
) -> dict[str, jax.Array]:
  """A batch of Dyck-k sequences and their targets.

  Returns a dict of ``(num_samples, length)`` arrays: ``tokens`` and ``next_token`` (int32),
  ``depth`` (int32, ``max_depth + 1`` classes), ``valid`` and ``mask`` (bool; ``mask`` is False
  where ``next_token`` is padding).
  """
  if k < 1 or max_depth < 1 or length < 2:
    raise ValueError(
      f"need k >= 1, max_depth >= 1 and length >= 2; got k={k}, max_depth={max_depth}, "
      f"length={length}"
    )
  if not (0.0 < p_open < 1.0 and 0.0 <= p_corrupt <= 1.0):
    raise ValueError(
      f"need 0 < p_open < 1 and 0 <= p_corrupt <= 1; got p_open={p_open}, p_corrupt={p_corrupt}"
    )
  keys = jax.random.split(key, num_samples)
  tokens = jax.vmap(lambda kk: _generate(kk, length, k, max_depth, p_open, p_corrupt))(keys)
  depth, valid = jax.vmap(lambda t: check(t, k, max_depth))(tokens)
  next_token = jnp.concatenate([tokens[:, 1:], jnp.full((num_samples, 1), PAD, jnp.int32)], axis=1)
  mask = jnp.arange(length) < length - 1
  return {
    "tokens": tokens,
    "next_token": next_token,
    "depth": depth,
    "valid": valid,
    "mask": jnp.broadcast_to(mask, tokens.shape),
  }


def losses(logits: dict[str, jax.Array], batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Mean cross-entropy and accuracy of a model's predictions of a batch's targets:
  ``logits["token"]`` of ``next_token`` (at the positions ``mask`` marks), ``logits["depth"]`` of
  ``depth`` and ``logits["valid"]`` of ``valid`` (two classes), each ``(B, T, classes)``. Returns
  ``{"token_loss", "token_acc", "depth_loss", ...}``."""
  ce = optax.softmax_cross_entropy_with_integer_labels
  ones = jnp.ones(batch["depth"].shape, jnp.float32)
  out = {}
  for head, target, w in (
    ("token", batch["next_token"], batch["mask"].astype(jnp.float32)),
    ("depth", batch["depth"], ones),
    ("valid", batch["valid"].astype(jnp.int32), ones),
  ):
    out[f"{head}_loss"] = jnp.sum(ce(logits[head], target) * w) / jnp.sum(w)
    out[f"{head}_acc"] = jnp.sum((jnp.argmax(logits[head], -1) == target) * w) / jnp.sum(w)
  return out
