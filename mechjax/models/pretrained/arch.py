"""What differs between the supported architectures: the :class:`Arch` that ``config.json`` is read
into, the activations, and the one-line :class:`CheckpointError` for what is not implemented.

Each family's module reads its own config keys into an :class:`Arch`
(:mod:`~mechjax.models.pretrained.gpt2`, :mod:`~mechjax.models.pretrained.gpt_neox`,
:mod:`~mechjax.models.pretrained.llama`); :mod:`~mechjax.models.pretrained.families` picks the
module by ``config.json``'s ``architectures``.
"""

from __future__ import annotations

import dataclasses
import math

import jax

from mechjax.errors import InputError

ACTIVATIONS = {
  "gelu": lambda x: jax.nn.gelu(x, approximate=False),
  "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
  "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
  "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
  "relu": jax.nn.relu,
  "silu": jax.nn.silu,
}


class CheckpointError(InputError):
  """A checkpoint that cannot be loaded: what is wrong, by name, and what is supported."""


@dataclasses.dataclass(frozen=True)
class Arch:
  """What differs between the supported architectures (read from ``config.json``).

  Attributes:
    family: ``"gpt2"``, ``"gpt_neox"``, ``"llama"`` or ``"qwen2"``.
    vocab_size, d_model, num_layers, num_heads, d_mlp: the sizes.
    num_kv_heads: key/value heads (fewer than ``num_heads`` for grouped-query attention).
    head_dim: the width of one head.
    max_positions: the longest sequence accepted.
    norm: ``"layernorm"`` (gain and bias) or ``"rmsnorm"`` (gain).
    norm_eps: the norms' epsilon.
    activation: a key of :data:`ACTIVATIONS`.
    gated_mlp: ``down(act(gate(x)) * up(x))`` (SwiGLU) instead of ``down(act(up(x)))``.
    learned_positions: add a learned position embedding (GPT-2); otherwise rotary.
    rotary_dim: ``int(head_dim · partial rotary factor)``, transformers' rotary dimension (0
      without rotary); ``2·⌈rotary_dim/2⌉`` dimensions of each head rotate.
    rope_theta: the rotary base.
    parallel_residual: attention and MLP both read the block's input (GPT-NeoX).
    qkv_bias, out_bias, mlp_bias: which projections have biases.
    tied_embeddings: the unembedding is the token embedding's transpose.
    unembed_bias: the unembedding has a bias (after :func:`fold_norms` of a LayerNorm model, which
      moves the final norm's bias there).
  """

  family: str
  vocab_size: int
  d_model: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  d_mlp: int
  max_positions: int
  norm: str
  norm_eps: float
  activation: str
  gated_mlp: bool
  learned_positions: bool
  rotary_dim: int
  rope_theta: float
  parallel_residual: bool
  qkv_bias: bool
  out_bias: bool
  mlp_bias: bool
  tied_embeddings: bool
  unembed_bias: bool = False


def refuse(what: str) -> None:
  """Raises :class:`CheckpointError` with ``what`` (a line that names the config key or file, and
  what is supported)."""
  raise CheckpointError(what)


def rotary_dims(head_dim: int, partial: float, whole_head: bool, key: str) -> int:
  """``int(head_dim · partial)``, the rotary dimension transformers computes, once checked: the
  rotated width ``2·⌈d/2⌉`` must fit the head, and a family that multiplies the whole head by the
  cosine (``whole_head``: Llama, Qwen2) needs it to equal the head. Else one line naming ``key``."""
  d = int(head_dim * partial)
  width = 2 * -(-d // 2)
  if width > head_dim or (whole_head and width != head_dim):
    refuse(
      f"config.json: {key}={partial:g} of head_dim {head_dim} gives a rotary width of {width}, "
      + (f"not the whole head ({head_dim})" if whole_head else f"more than the head ({head_dim})")
      + ", which transformers cannot run either; supported: a width "
      + ("equal to the head" if whole_head else "of at most the head")
    )
  return d


def fraction(rotary_dim: int, head_dim: int) -> float:
  """The partial rotary factor ``p`` for which ``int(head_dim · p)`` (transformers' rotary
  dimension, :func:`rotary_dims`) is exactly ``rotary_dim``: ``rotary_dim / head_dim``, nudged up
  by a float's last digit where the product rounds below."""
  p = rotary_dim / head_dim
  while int(head_dim * p) < rotary_dim:
    p = math.nextafter(p, 2.0)
  return p


def heads_divide(
  cfg: dict, heads_key: str, width_key: str | None, kv_key: str | None = None
) -> None:
  """Refuses, in one line, a width (``width_key``) that the heads do not divide, or query heads
  that the key/value heads (``kv_key``) do not divide: transformers refuses both, or cannot run
  them."""
  heads = cfg[heads_key]
  width = cfg[width_key] if width_key else heads
  if width % heads:
    refuse(f"config.json: {width_key}={width} is not divisible by {heads_key}={heads}")
  kv = cfg.get(kv_key) if kv_key else None
  if kv and heads % kv:
    refuse(
      f"config.json: {heads_key}={heads} is not divisible by {kv_key}={kv}; supported: query "
      "heads in equal groups per key/value head"
    )


def rope(
  cfg: dict, default_theta: float, partial_key: str | None = None, default_partial: float = 1.0
) -> tuple[float, float]:
  """``(rope_theta, partial_rotary_factor)`` from either config style: transformers v5's
  ``rope_parameters``, or the keys the hub's checkpoints were saved with; ``default_partial``
  where the config names no fraction (GPT-NeoX's is 0.25, as transformers' config class sets it)."""
  params = cfg.get("rope_parameters") or {}
  scaling = cfg.get("rope_scaling") or {}
  for source in (params, scaling):
    kind = source.get("rope_type", source.get("type", "default"))
    if kind not in ("default", None):
      refuse(f"config.json: rope type {kind!r} is not implemented; supported: 'default'")
  theta = params.get("rope_theta", cfg.get("rope_theta", cfg.get("rotary_emb_base", default_theta)))
  partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
  if partial is None and partial_key is not None:
    partial = cfg.get(partial_key)
  return float(theta), float(default_partial if partial is None else partial)
