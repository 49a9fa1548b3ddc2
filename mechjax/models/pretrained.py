"""Pretrained language models from a Hugging Face checkpoint directory, without torch.

``load(directory)`` reads ``config.json`` and the weights (``model.safetensors``, sharded
``model-XXXXX-of-YYYYY.safetensors`` with ``model.safetensors.index.json``, or, where torch is
installed, ``pytorch_model.bin``) and returns a flax module and its params::

    model, params = pretrained.load("checkpoints/pythia-70m")
    logits = model.apply({"params": params}, tokens_BxT)                  # (B, T, vocab)
    logits, sites = model.apply({"params": params}, tokens_BxT, return_sites=True)

Architectures (``config.json``'s ``architectures``): ``GPT2LMHeadModel``, ``GPTNeoXForCausalLM``
(Pythia), ``LlamaForCausalLM`` and ``Qwen2ForCausalLM``. A config value that would change the
function and is not implemented (a rope scaling type, a sliding window, another activation) is
refused by name.

One module, :class:`DecoderLM`, computes all of them; :class:`Arch` holds what differs. Block ``l``
(pre-norm; with ``parallel_residual``, as in Pythia, both branches read ``resid_pre``)::

    resid_mid_l  = resid_pre_l + attn_out_l,        attn_out_l = Attn(Norm(resid_pre_l))
    resid_post_l = resid_mid_l + mlp_out_l,         mlp_out_l  = MLP(Norm(resid_mid_l))
    resid_post_l = resid_pre_l + attn_out_l + mlp_out_l,  mlp_out_l = MLP(Norm'(resid_pre_l))

and ``final_norm = Norm(resid_post_{L-1})`` (kept apart from ``resid_post_{L-1}``: Hugging Face's
last ``hidden_states`` entry is taken after the final norm). ``steer={site: v}`` adds ``v`` at any
site, and everything downstream sees it. Attention weights are sown as in
:mod:`mechjax.models.transformer` (:func:`attention_patterns`).

Rotary embeddings follow Su et al. 2021 (arXiv 2104.09864) in the "rotate half" layout of GPT-NeoX
and Llama: the first ``rotary_dim`` dimensions of each head, split in halves ``(x₁, x₂)``, become
``(x₁ cos θ − x₂ sin θ, x₂ cos θ + x₁ sin θ)`` with ``θ_i = t · base^(−2i/rotary_dim)``.

Params are float32 by default; ``dtype=jnp.bfloat16`` keeps them in bf16, with the norms and the
softmax computed in float32.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from mechjax import config
from mechjax.models.transformer import leading

SAVED_ARCHITECTURE = "MechjaxDecoderLM"  # mechjax's own layout, written by save()
ARCHITECTURES = ("GPT2LMHeadModel", "GPTNeoXForCausalLM", "LlamaForCausalLM", "Qwen2ForCausalLM")
ACTIVATIONS = {
  "gelu": lambda x: jax.nn.gelu(x, approximate=False),
  "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
  "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
  "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
  "relu": jax.nn.relu,
  "silu": jax.nn.silu,
}


class CheckpointError(ValueError):
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
    rotary_dim: dimensions of each head that rotate (even; 0 without rotary).
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


def _refuse(what: str) -> None:
  raise CheckpointError(what)


def _rope(cfg: dict, default_theta: float, partial_key: str | None = None) -> tuple[float, float]:
  """``(rope_theta, partial_rotary_factor)`` from either config style: transformers v5's
  ``rope_parameters``, or the keys the hub's checkpoints were saved with."""
  params = cfg.get("rope_parameters") or {}
  scaling = cfg.get("rope_scaling") or {}
  for source in (params, scaling):
    kind = source.get("rope_type", source.get("type", "default"))
    if kind not in ("default", None):
      _refuse(f"config.json: rope type {kind!r} is not implemented; supported: 'default'")
  theta = params.get("rope_theta", cfg.get("rope_theta", cfg.get("rotary_emb_base", default_theta)))
  partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
  if partial is None and partial_key is not None:
    partial = cfg.get(partial_key)
  return float(theta), float(1.0 if partial is None else partial)


def arch_from_config(cfg: dict) -> Arch:
  """The :class:`Arch` of a ``config.json`` (as a dict). Raises :class:`CheckpointError` for an
  architecture or a config value that is not implemented."""
  archs = cfg.get("architectures") or []
  if archs == [SAVED_ARCHITECTURE]:
    saved = cfg.get("mechjax_arch") or {}
    fields = [f.name for f in dataclasses.fields(Arch)]
    if sorted(saved) != sorted(fields):
      _refuse(
        f"config.json: mechjax_arch must give exactly the fields of Arch: {', '.join(fields)}"
      )
    return Arch(**saved)
  arch = next((a for a in archs if a in ARCHITECTURES), None)
  if arch is None:
    _refuse(
      f"config.json: architecture {archs or cfg.get('model_type')!r} is not supported; supported: "
      f"{', '.join(ARCHITECTURES)}"
    )
  activation = cfg.get("activation_function", cfg.get("hidden_act"))
  if activation not in ACTIVATIONS:
    _refuse(
      f"config.json: activation {activation!r} is not implemented; supported: "
      f"{', '.join(ACTIVATIONS)}"
    )
  if arch == "GPT2LMHeadModel":
    for key in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
      if cfg.get(key):
        _refuse(f"config.json: {key}=true is not implemented; supported: false")
    if cfg.get("scale_attn_weights", True) is not True:
      _refuse("config.json: scale_attn_weights=false is not implemented; supported: true")
    d, heads = cfg["n_embd"], cfg["n_head"]
    return Arch(
      family="gpt2",
      vocab_size=cfg["vocab_size"],
      d_model=d,
      num_layers=cfg["n_layer"],
      num_heads=heads,
      num_kv_heads=heads,
      head_dim=d // heads,
      d_mlp=cfg.get("n_inner") or 4 * d,
      max_positions=cfg["n_positions"],
      norm="layernorm",
      norm_eps=cfg.get("layer_norm_epsilon", 1e-5),
      activation=activation,
      gated_mlp=False,
      learned_positions=True,
      rotary_dim=0,
      rope_theta=0.0,
      parallel_residual=False,
      qkv_bias=True,
      out_bias=True,
      mlp_bias=True,
      tied_embeddings=cfg.get("tie_word_embeddings", True),
    )
  d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
  head_dim = cfg.get("head_dim") or d // heads
  if arch == "GPTNeoXForCausalLM":
    theta, partial = _rope(cfg, 10000.0, "rotary_pct")
    return Arch(
      family="gpt_neox",
      vocab_size=cfg["vocab_size"],
      d_model=d,
      num_layers=cfg["num_hidden_layers"],
      num_heads=heads,
      num_kv_heads=heads,
      head_dim=head_dim,
      d_mlp=cfg["intermediate_size"],
      max_positions=cfg["max_position_embeddings"],
      norm="layernorm",
      norm_eps=cfg.get("layer_norm_eps", 1e-5),
      activation=activation,
      gated_mlp=False,
      learned_positions=False,
      rotary_dim=int(head_dim * partial),
      rope_theta=theta,
      parallel_residual=cfg.get("use_parallel_residual", True),
      qkv_bias=cfg.get("attention_bias", True),
      out_bias=cfg.get("attention_bias", True),
      mlp_bias=True,
      tied_embeddings=cfg.get("tie_word_embeddings", False),
    )
  if cfg.get("use_sliding_window") or (
    arch == "LlamaForCausalLM" and cfg.get("sliding_window") is not None
  ):
    _refuse("config.json: a sliding attention window is not implemented; supported: full attention")
  theta, partial = _rope(cfg, 10000.0)
  qwen = arch == "Qwen2ForCausalLM"
  return Arch(
    family="qwen2" if qwen else "llama",
    vocab_size=cfg["vocab_size"],
    d_model=d,
    num_layers=cfg["num_hidden_layers"],
    num_heads=heads,
    num_kv_heads=cfg.get("num_key_value_heads") or heads,
    head_dim=head_dim,
    d_mlp=cfg["intermediate_size"],
    max_positions=cfg["max_position_embeddings"],
    norm="rmsnorm",
    norm_eps=cfg.get("rms_norm_eps", 1e-6),
    activation=activation,
    gated_mlp=True,
    learned_positions=False,
    rotary_dim=int(head_dim * partial),
    rope_theta=theta,
    parallel_residual=False,
    qkv_bias=True if qwen else cfg.get("attention_bias", False),
    out_bias=False if qwen else cfg.get("attention_bias", False),
    mlp_bias=False if qwen else cfg.get("mlp_bias", False),
    tied_embeddings=cfg.get("tie_word_embeddings", False),
  )


# ----------------------------------------------------------------------------------------------
# The module.


class Norm(nn.Module):
  """LayerNorm (``scale``, ``bias``) or RMSNorm (``scale``), computed in float32."""

  kind: str
  eps: float

  @nn.compact
  def __call__(self, x):
    d = x.shape[-1]
    scale = self.param("scale", nn.initializers.ones, (d,))
    h = x.astype(jnp.float32)
    if self.kind == "layernorm":
      bias = self.param("bias", nn.initializers.zeros, (d,))
      h = h - jnp.mean(h, axis=-1, keepdims=True)
      h = h * jax.lax.rsqrt(jnp.mean(h**2, axis=-1, keepdims=True) + self.eps)
      h = h * leading(scale.astype(jnp.float32), h) + leading(bias.astype(jnp.float32), h)
    else:
      h = h * jax.lax.rsqrt(jnp.mean(h**2, axis=-1, keepdims=True) + self.eps)
      h = h.astype(x.dtype).astype(jnp.float32) * leading(scale.astype(jnp.float32), h)
    return h.astype(x.dtype)


def rotary(x_BxTxHxd: jax.Array, rotary_dim: int, theta: float) -> jax.Array:
  """Rotates the first ``rotary_dim`` dimensions of each head by position (module docstring)."""
  if rotary_dim == 0:
    return x_BxTxHxd
  t = x_BxTxHxd.shape[1]
  inv_freq = 1.0 / (theta ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim))
  angles = np.arange(t, dtype=np.float32)[:, None] * inv_freq[None]  # (T, rotary_dim/2)
  cos = jnp.asarray(np.concatenate([np.cos(angles)] * 2, -1))[None, :, None]
  sin = jnp.asarray(np.concatenate([np.sin(angles)] * 2, -1))[None, :, None]
  rot, rest = x_BxTxHxd[..., :rotary_dim], x_BxTxHxd[..., rotary_dim:]
  r32 = rot.astype(jnp.float32)
  half = rotary_dim // 2
  rotated = jnp.concatenate([-r32[..., half:], r32[..., :half]], axis=-1)
  out = (r32 * cos + rotated * sin).astype(x_BxTxHxd.dtype)
  return jnp.concatenate([out, rest], axis=-1)


class Attention(nn.Module):
  arch: Arch
  dtype: jnp.dtype

  @nn.compact
  def __call__(self, x_BxTxD):
    a = self.arch
    t = x_BxTxD.shape[1]
    dense = lambda heads, name: nn.DenseGeneral(
      (heads, a.head_dim), use_bias=a.qkv_bias, dtype=self.dtype, param_dtype=self.dtype, name=name
    )
    q = rotary(dense(a.num_heads, "query")(x_BxTxD), a.rotary_dim, a.rope_theta)
    k = rotary(dense(a.num_kv_heads, "key")(x_BxTxD), a.rotary_dim, a.rope_theta)
    v = dense(a.num_kv_heads, "value")(x_BxTxD)
    group = a.num_heads // a.num_kv_heads  # query heads per key/value head
    k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    scores = scores / math.sqrt(a.head_dim)
    causal = jnp.tril(jnp.ones((t, t), bool))
    weights = jax.nn.softmax(jnp.where(causal[None, None], scores, -1e30), axis=-1)
    if not self.is_initializing():
      self.sow("intermediates", "attention", weights)  # (B, H, T_q, T_k)
    z = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(v.dtype), v)
    return nn.DenseGeneral(
      a.d_model,
      axis=(-2, -1),
      use_bias=a.out_bias,
      dtype=self.dtype,
      param_dtype=self.dtype,
      name="out",
    )(z)


class MLP(nn.Module):
  arch: Arch
  dtype: jnp.dtype

  @nn.compact
  def __call__(self, x):
    a = self.arch
    dense = lambda n, name: nn.Dense(
      n, use_bias=a.mlp_bias, dtype=self.dtype, param_dtype=self.dtype, name=name
    )
    act = ACTIVATIONS[a.activation]
    if a.gated_mlp:
      h = act(dense(a.d_mlp, "gate")(x)) * dense(a.d_mlp, "up")(x)
    else:
      h = act(dense(a.d_mlp, "up")(x))
    return dense(a.d_model, "down")(h)


# Vocabulary columns per chunk of logsumexp_head: a chunk's logits for a minibatch of about a
# thousand tokens (4 MB) stay in a CPU core's cache; of 512 to 8,192, 1,024 was fastest for the
# gradient of a pythia-14m-shaped head.
VOCAB_CHUNK = 1024


def logsumexp_head(x_NxD: jax.Array, kernel_DxV: jax.Array, bias_V: jax.Array | None = None):
  """``logsumexp(x @ kernel + bias, axis=-1)``, ``(N,)`` in float32, without ever holding the
  ``(N, vocab)`` logits.

  The vocabulary is taken :data:`VOCAB_CHUNK` columns at a time under ``lax.scan``, with the
  running maximum and rescaled sum of the online softmax normaliser (Milakov & Gimelshein 2018,
  arXiv:1805.02867, algorithm 3). The gradient (a ``custom_vjp``) recomputes each chunk's logits
  and uses ``∂lse/∂logits = softmax(logits)``:

      ∂x = Σ_c P_c W_cᵀ,   ∂W_c = xᵀ P_c,   ∂b_c = 1ᵀ P_c,   P_c = g · exp(x W_c + b_c − lse)

  One chunk's logits stay in the CPU's cache, where the whole ``(N, vocab)`` block and its
  exponentials would go to memory and back several times. The dots accumulate in float32 whatever
  the params' dtype.
  """
  if bias_V is None:
    bias_V = jnp.zeros((kernel_DxV.shape[1],), jnp.float32)
  return _logsumexp_head(x_NxD, kernel_DxV, bias_V)


def _vocab_chunks(kernel_DxV, bias_V):
  """``(C, D, chunk)`` kernel and ``(C, chunk)`` float32 bias, the last chunk padded with zero
  columns whose bias is ``-inf`` (they add nothing to the sum)."""
  d, v = kernel_DxV.shape
  c = -(-v // VOCAB_CHUNK)
  pad = c * VOCAB_CHUNK - v
  kernel = jnp.pad(kernel_DxV, ((0, 0), (0, pad))).reshape(d, c, VOCAB_CHUNK).transpose(1, 0, 2)
  bias = jnp.pad(bias_V.astype(jnp.float32), (0, pad), constant_values=-jnp.inf)
  return kernel, bias.reshape(c, VOCAB_CHUNK)


def _chunk_logits(x_NxD, kernel_DxC, bias_C):
  return jnp.dot(x_NxD, kernel_DxC, preferred_element_type=jnp.float32) + bias_C[None]


@jax.custom_vjp
def _logsumexp_head(x_NxD, kernel_DxV, bias_V):
  return _logsumexp_head_fwd(x_NxD, kernel_DxV, bias_V)[0]


def _logsumexp_head_fwd(x_NxD, kernel_DxV, bias_V):
  def add_chunk(carry, chunk):
    top_N, total_N = carry
    logits = _chunk_logits(x_NxD, *chunk)
    new_top = jnp.maximum(top_N, jnp.max(logits, axis=-1))
    total_N = total_N * jnp.exp(top_N - new_top) + jnp.sum(
      jnp.exp(logits - new_top[:, None]), axis=-1
    )
    return (new_top, total_N), None

  n = x_NxD.shape[0]
  start = (jnp.full((n,), -jnp.inf, jnp.float32), jnp.zeros((n,), jnp.float32))
  (top_N, total_N), _ = jax.lax.scan(add_chunk, start, _vocab_chunks(kernel_DxV, bias_V))
  lse_N = top_N + jnp.log(total_N)
  return lse_N, (x_NxD, kernel_DxV, bias_V, lse_N)


def _logsumexp_head_bwd(residuals, g_N):
  x_NxD, kernel_DxV, bias_V, lse_N = residuals

  def chunk_grads(dx_NxD, chunk):
    kernel_DxC, bias_C = chunk
    p_NxC = jnp.exp(_chunk_logits(x_NxD, kernel_DxC, bias_C) - lse_N[:, None]) * g_N[:, None]
    dx_NxD = dx_NxD + jnp.dot(p_NxC, kernel_DxC.T.astype(jnp.float32))
    dkernel_DxC = jnp.dot(x_NxD.T.astype(jnp.float32), p_NxC)
    return dx_NxD, (dkernel_DxC, jnp.sum(p_NxC, axis=0))

  dx_NxD = jnp.zeros(x_NxD.shape, jnp.float32)
  dx_NxD, (dkernel, dbias) = jax.lax.scan(chunk_grads, dx_NxD, _vocab_chunks(kernel_DxV, bias_V))
  d, v = kernel_DxV.shape
  dkernel_DxV = dkernel.transpose(1, 0, 2).reshape(d, -1)[:, :v]
  return (
    dx_NxD.astype(x_NxD.dtype),
    dkernel_DxV.astype(kernel_DxV.dtype),
    dbias.reshape(-1)[:v].astype(bias_V.dtype),
  )


_logsumexp_head.defvjp(_logsumexp_head_fwd, _logsumexp_head_bwd)


class Unembed(nn.Module):
  """The unembedding's params, ``kernel`` ``(d_model, vocab)`` and (with ``use_bias``) ``bias``,
  returned as they are: :class:`DecoderLM` either multiplies them out into logits or hands them to
  :func:`logsumexp_head`, which never forms the logits."""

  d_model: int
  vocab_size: int
  use_bias: bool
  dtype: jnp.dtype

  @nn.compact
  def __call__(self):
    shape = (self.d_model, self.vocab_size)
    kernel = self.param("kernel", nn.initializers.lecun_normal(), shape, self.dtype)
    bias = (
      self.param("bias", nn.initializers.zeros, (self.vocab_size,), self.dtype)
      if self.use_bias
      else None
    )
    return kernel, bias


class DecoderLM(nn.Module):
  """A pretrained decoder-only language model (module docstring): ``tokens_BxT`` to logits
  ``(B, T, vocab)``, and the sites with ``return_sites``."""

  arch: Arch
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(
    self, tokens_BxT, return_sites: bool = False, steer: dict | None = None, targets_BxT=None
  ):
    """The logits ``(B, T, vocab)`` (float32), or with ``targets_BxT`` (token ids, the shape of
    ``tokens_BxT``) each position's cross-entropy ``logsumexp(logits) − logits[target]``,
    ``(B, T)``. The target logit is taken from the target's unembedding column, not gathered from
    the logits, so the gradient has no scatter over the vocabulary, and the log-sum-exp is
    :func:`logsumexp_head`'s, so the ``(B, T, vocab)`` logits are never formed."""
    a = self.arch
    check_tokens(a, tokens_BxT)
    steer = dict(steer or {})
    unknown = sorted(set(steer) - set(site_names(a)))
    if unknown:
      raise ValueError(f"cannot steer at {unknown}; sites are {site_names(a)}")
    sites = {}

    def site(name, x):
      if name in steer:
        x = x + leading(jnp.asarray(steer[name], x.dtype), x)
      sites[name] = x
      return x

    embed = nn.Embed(
      a.vocab_size, a.d_model, dtype=self.dtype, param_dtype=self.dtype, name="embed"
    )
    x = embed(tokens_BxT)
    if a.learned_positions:
      pos = self.param("pos_embed", nn.initializers.normal(0.02), (a.max_positions, a.d_model))
      x = x + pos[None, : tokens_BxT.shape[1]].astype(self.dtype)
    norm = lambda name: Norm(a.norm, a.norm_eps, name=name)
    for l in range(a.num_layers):
      x = site(f"resid_pre_{l}", x)
      attn = site(
        f"attn_out_{l}", Attention(a, self.dtype, name=f"attn_{l}")(norm(f"norm_attn_{l}")(x))
      )
      if a.parallel_residual:
        mlp = site(f"mlp_out_{l}", MLP(a, self.dtype, name=f"mlp_{l}")(norm(f"norm_mlp_{l}")(x)))
        x = x + attn + mlp
      else:
        x = site(f"resid_mid_{l}", x + attn)
        mlp = site(f"mlp_out_{l}", MLP(a, self.dtype, name=f"mlp_{l}")(norm(f"norm_mlp_{l}")(x)))
        x = x + mlp
      x = site(f"resid_post_{l}", x)
    x = site("final_norm", norm("norm_final")(x))
    # The head runs on the flattened tokens (B·T, d): XLA's CPU dot and its gradient are faster on
    # a matrix than on (B, T, d), and the head is most of a step's cost at a large vocabulary.
    b, t = tokens_BxT.shape
    x_N = x.reshape(b * t, a.d_model)
    if a.tied_embeddings:
      kernel, bias = embed.embedding.T, None
    else:
      kernel, bias = Unembed(a.d_model, a.vocab_size, a.unembed_bias, self.dtype, name="unembed")()
    if targets_BxT is None:
      logits = jnp.dot(x_N, kernel.astype(self.dtype), preferred_element_type=jnp.float32)
      if bias is not None:
        logits = logits + bias.astype(jnp.float32)[None]
      logits = logits.reshape(b, t, a.vocab_size)
    else:
      targets_BxT = jnp.asarray(targets_BxT)
      if targets_BxT.shape != tokens_BxT.shape:
        raise ValueError(
          f"targets must have the tokens' shape {tuple(tokens_BxT.shape)}; got "
          f"{tuple(targets_BxT.shape)}"
        )
      check_tokens(a, targets_BxT)
      targets_N = targets_BxT.reshape(b * t)
      columns = jnp.take(kernel, targets_N, axis=1).astype(jnp.float32)  # (d, B·T)
      chosen = jnp.einsum("nd,dn->n", x_N.astype(jnp.float32), columns)
      if bias is not None:
        chosen = chosen + jnp.take(bias, targets_N).astype(jnp.float32)
      logits = (logsumexp_head(x_N, kernel, bias) - chosen).reshape(b, t)
    return (logits, sites) if return_sites else logits


def site_names(arch: Arch) -> list[str]:
  """Every site, in the order the stream passes them."""
  names = []
  for l in range(arch.num_layers):
    names += [f"resid_pre_{l}", f"attn_out_{l}"]
    names += [f"mlp_out_{l}"] if arch.parallel_residual else [f"resid_mid_{l}", f"mlp_out_{l}"]
    names.append(f"resid_post_{l}")
  return names + ["final_norm"]


def check_tokens(arch: Arch, tokens_BxT) -> None:
  """Refuses tokens of the wrong rank, a sequence beyond the position limit, and (for concrete
  tokens) ids outside the vocabulary, each with one line."""
  shape = np.shape(tokens_BxT)
  if len(shape) != 2:
    raise ValueError(f"tokens must have shape (B, T); got {shape}")
  if shape[1] > arch.max_positions:
    raise ValueError(
      f"tokens have {shape[1]} positions; this model accepts at most {arch.max_positions} "
      "(max_position_embeddings)"
    )
  if not isinstance(tokens_BxT, jax.core.Tracer) and np.size(tokens_BxT):
    values = np.asarray(tokens_BxT)
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= arch.vocab_size:
      raise ValueError(
        f"token ids must lie in [0, {arch.vocab_size}) (vocab_size); got ids from {lo} to {hi}"
      )


def check_pair(
  a: Arch, b: Arch, seq_len: int, names: Sequence[str] = ("model_a", "model_b")
) -> None:
  """Refuses two checkpoints whose residual streams cannot be compared on the same windows: a
  different ``d_model`` or ``vocab_size`` (a :class:`mechjax.config.ConfigError` naming the settings
  ``names`` that hold them), or windows of ``seq_len`` tokens beyond either one's position limit
  (naming ``seq_len``)."""
  for what in ("d_model", "vocab_size"):
    if getattr(a, what) != getattr(b, what):
      got = f"got {getattr(a, what)} and {getattr(b, what)}"
      raise config.ConfigError(list(names), f"must have the same {what}; {got}")
  limit = min(a.max_positions, b.max_positions)
  if seq_len > limit:
    raise config.ConfigError(
      ["seq_len"], f"must be at most {limit}, the models' position limit (max_position_embeddings)"
    )


def attention_patterns(model: DecoderLM, params, tokens_BxT) -> jax.Array:
  """Every layer's attention weights, ``(layers, B, heads, T_query, T_key)``."""
  _, state = model.apply({"params": params}, tokens_BxT, mutable=["intermediates"])
  return jnp.stack(
    [state["intermediates"][f"attn_{l}"]["attention"][0] for l in range(model.arch.num_layers)]
  )


# ----------------------------------------------------------------------------------------------
# Reading the weights.

_SAFETENSORS_DTYPES = {
  "F64": np.float64,
  "F32": np.float32,
  "F16": np.float16,
  "BF16": ml_dtypes.bfloat16,
  "I64": np.int64,
  "I32": np.int32,
  "U8": np.uint8,
  "BOOL": np.bool_,
}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """Every tensor of a ``.safetensors`` file as a read-only memory map (nothing is read until it
  is used). The format: an 8-byte little-endian header length, a JSON header
  ``{name: {"dtype", "shape", "data_offsets": [begin, end]}}``, then the bytes."""
  with open(path, "rb") as f:
    (n,) = np.frombuffer(f.read(8), "<u8")
    header = json.loads(f.read(int(n)))
  header.pop("__metadata__", None)
  out = {}
  for name, info in header.items():
    if info["dtype"] not in _SAFETENSORS_DTYPES:
      raise CheckpointError(f"{path}: tensor {name} has dtype {info['dtype']}, which is not read")
    begin, end = info["data_offsets"]
    dtype = np.dtype(_SAFETENSORS_DTYPES[info["dtype"]])
    shape = tuple(info["shape"])
    if end == begin:
      out[name] = np.zeros(shape, dtype)
      continue
    out[name] = np.memmap(path, dtype=dtype, mode="r", offset=8 + int(n) + begin, shape=shape)
  return out


def read_weights(directory: str) -> dict[str, np.ndarray]:
  """The checkpoint's tensors by name: ``model.safetensors``, the shards listed in
  ``model.safetensors.index.json``, or ``pytorch_model.bin`` through torch."""
  single = os.path.join(directory, "model.safetensors")
  index = os.path.join(directory, "model.safetensors.index.json")
  if os.path.exists(single):
    return read_safetensors(single)
  if os.path.exists(index):
    with open(index) as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for shard in shards:
      out.update(read_safetensors(os.path.join(directory, shard)))
    return out
  binary = os.path.join(directory, "pytorch_model.bin")
  if os.path.exists(binary):
    try:
      import torch
    except ImportError:
      raise CheckpointError(
        f"{binary} needs torch to read; install torch, or convert it once where torch is: python "
        '-c "import torch; from safetensors.torch import save_file; save_file({k: v.contiguous() '
        f"for k, v in torch.load('{binary}', weights_only=True).items()}}, 'model.safetensors')\""
      ) from None
    state = torch.load(binary, map_location="cpu", weights_only=True, mmap=True)
    out = {}
    for k, v in state.items():
      if v.dtype == torch.bfloat16:
        out[k] = v.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
      else:
        out[k] = v.numpy()
    return out
  raise CheckpointError(
    f"{directory} has no weights: expected model.safetensors, model.safetensors.index.json with "
    "its shards, or pytorch_model.bin"
  )


class _Weights:
  """Looks tensors up by Hugging Face name, with or without the base model's prefix, and checks
  their shapes."""

  def __init__(self, tensors: dict, prefixes: tuple[str, ...], dtype):
    self.tensors, self.prefixes, self.dtype = tensors, prefixes, dtype

  def has(self, key: str) -> bool:
    return any(p + key in self.tensors for p in self.prefixes)

  def __call__(self, key: str, shape: tuple[int, ...]) -> np.ndarray:
    for p in self.prefixes:
      if p + key in self.tensors:
        value = self.tensors[p + key]
        if tuple(value.shape) != tuple(shape):
          raise CheckpointError(
            f"weight {p + key} has shape {tuple(value.shape)}; the config implies {tuple(shape)}"
          )
        return np.asarray(value, self.dtype)
    raise CheckpointError(f"weight {self.prefixes[0] + key} is missing from the checkpoint")


def params_from_hf(arch: Arch, get: Callable[[str, tuple], np.ndarray], has=None) -> dict:
  """:class:`DecoderLM` params from Hugging Face tensors: ``get(name, shape)`` returns the tensor
  of that name (names without the base model's prefix for the body). Torch's ``Linear`` stores
  ``(out, in)``, GPT-2's ``Conv1D`` ``(in, out)``; fused projections are split per head (GPT-2's
  ``c_attn`` as ``[q; k; v]``, GPT-NeoX's ``query_key_value`` as ``(heads, 3, head_dim)``)."""
  a = arch
  d, H, K, hd, f = a.d_model, a.num_heads, a.num_kv_heads, a.head_dim, a.d_mlp
  p = {}
  lin = lambda key, n_out, n_in: get(key, (n_out, n_in)).T  # torch Linear -> (in, out)

  def norm(key, bias=a.norm == "layernorm"):
    out = {"scale": get(f"{key}.weight", (d,))}
    if bias:
      out["bias"] = get(f"{key}.bias", (d,))
    return out

  if a.family == "gpt2":
    p["embed"] = {"embedding": get("wte.weight", (a.vocab_size, d))}
    p["pos_embed"] = get("wpe.weight", (a.max_positions, d))
    for l in range(a.num_layers):
      b = f"h.{l}."
      w, bias = get(b + "attn.c_attn.weight", (d, 3 * d)), get(b + "attn.c_attn.bias", (3 * d,))
      p[f"norm_attn_{l}"], p[f"norm_mlp_{l}"] = norm(b + "ln_1"), norm(b + "ln_2")
      p[f"attn_{l}"] = {
        name: {
          "kernel": w[:, i * d : (i + 1) * d].reshape(d, H, hd),
          "bias": bias[i * d : (i + 1) * d].reshape(H, hd),
        }
        for i, name in enumerate(("query", "key", "value"))
      }
      p[f"attn_{l}"]["out"] = {
        "kernel": get(b + "attn.c_proj.weight", (d, d)).reshape(H, hd, d),
        "bias": get(b + "attn.c_proj.bias", (d,)),
      }
      p[f"mlp_{l}"] = {
        "up": {
          "kernel": get(b + "mlp.c_fc.weight", (d, f)),
          "bias": get(b + "mlp.c_fc.bias", (f,)),
        },
        "down": {
          "kernel": get(b + "mlp.c_proj.weight", (f, d)),
          "bias": get(b + "mlp.c_proj.bias", (d,)),
        },
      }
    p["norm_final"] = norm("ln_f")
  elif a.family == "gpt_neox":
    p["embed"] = {"embedding": get("embed_in.weight", (a.vocab_size, d))}
    for l in range(a.num_layers):
      b = f"layers.{l}."
      p[f"norm_attn_{l}"] = norm(b + "input_layernorm")
      p[f"norm_mlp_{l}"] = norm(b + "post_attention_layernorm")
      w = get(b + "attention.query_key_value.weight", (3 * d, d)).reshape(H, 3, hd, d)
      attn = {}
      for i, name in enumerate(("query", "key", "value")):
        attn[name] = {"kernel": np.transpose(w[:, i], (2, 0, 1))}
        if a.qkv_bias:
          bias = get(b + "attention.query_key_value.bias", (3 * d,)).reshape(H, 3, hd)
          attn[name]["bias"] = bias[:, i]
      attn["out"] = {"kernel": lin(b + "attention.dense.weight", d, d).reshape(H, hd, d)}
      if a.out_bias:
        attn["out"]["bias"] = get(b + "attention.dense.bias", (d,))
      p[f"attn_{l}"] = attn
      p[f"mlp_{l}"] = {
        "up": {
          "kernel": lin(b + "mlp.dense_h_to_4h.weight", f, d),
          "bias": get(b + "mlp.dense_h_to_4h.bias", (f,)),
        },
        "down": {
          "kernel": lin(b + "mlp.dense_4h_to_h.weight", d, f),
          "bias": get(b + "mlp.dense_4h_to_h.bias", (d,)),
        },
      }
    p["norm_final"] = norm("final_layer_norm")
  else:  # llama, qwen2
    p["embed"] = {"embedding": get("embed_tokens.weight", (a.vocab_size, d))}
    for l in range(a.num_layers):
      b = f"layers.{l}."
      p[f"norm_attn_{l}"] = norm(b + "input_layernorm")
      p[f"norm_mlp_{l}"] = norm(b + "post_attention_layernorm")
      attn = {}
      for name, short, heads in (("query", "q", H), ("key", "k", K), ("value", "v", K)):
        attn[name] = {
          "kernel": lin(f"{b}self_attn.{short}_proj.weight", heads * hd, d).reshape(d, heads, hd)
        }
        if a.qkv_bias:
          attn[name]["bias"] = get(f"{b}self_attn.{short}_proj.bias", (heads * hd,)).reshape(
            heads, hd
          )
      attn["out"] = {"kernel": lin(b + "self_attn.o_proj.weight", d, H * hd).reshape(H, hd, d)}
      if a.out_bias:
        attn["out"]["bias"] = get(b + "self_attn.o_proj.bias", (d,))
      p[f"attn_{l}"] = attn
      mlp = {}
      for name in ("gate", "up"):
        mlp[name] = {"kernel": lin(f"{b}mlp.{name}_proj.weight", f, d)}
      mlp["down"] = {"kernel": lin(b + "mlp.down_proj.weight", d, f)}
      if a.mlp_bias:
        for name, n in (("gate", f), ("up", f), ("down", d)):
          mlp[name]["bias"] = get(f"{b}mlp.{name}_proj.bias", (n,))
      p[f"mlp_{l}"] = mlp
    p["norm_final"] = norm("norm")
  if not a.tied_embeddings:
    neox_head = a.family == "gpt_neox" and has is not None and has("embed_out.weight")
    head = "embed_out.weight" if neox_head else "lm_head.weight"
    p["unembed"] = {"kernel": get(head, (a.vocab_size, d)).T}
  return p


_PREFIXES = {"gpt2": "transformer.", "gpt_neox": "gpt_neox.", "llama": "model.", "qwen2": "model."}


def load(directory: str | os.PathLike, *, dtype=jnp.float32) -> tuple[DecoderLM, dict]:
  """``(model, params)`` from a Hugging Face model directory (module docstring); ``model.apply(
  {"params": params}, tokens_BxT)`` gives the logits. Raises :class:`CheckpointError`, one line,
  for an unsupported architecture or config value and for a missing or misshapen weight."""
  directory = os.fspath(directory)
  path = os.path.join(directory, "config.json")
  if not os.path.exists(path):
    raise CheckpointError(f"{directory} has no config.json; pass a Hugging Face model directory")
  with open(path) as f:
    cfg = json.load(f)
  arch = arch_from_config(cfg)
  saved = cfg.get("architectures") == [SAVED_ARCHITECTURE]
  tensors = read_weights(directory)
  if saved:
    return _load_saved(arch, tensors, dtype)
  prefix = _PREFIXES[arch.family]
  store = _Weights(tensors, (prefix, ""), np.dtype(dtype))  # the body's names, then top-level
  params = params_from_hf(arch, store, store.has)
  params = jax.tree.map(lambda x: jnp.asarray(x, dtype), params)
  return DecoderLM(arch, dtype), params


def _load_saved(arch: Arch, tensors: dict, dtype) -> tuple[DecoderLM, dict]:
  """A checkpoint written by :func:`save`: one tensor per param, named by its path."""
  model = DecoderLM(arch, dtype)
  store = _Weights(tensors, ("",), np.dtype(dtype))
  params = jax.tree_util.tree_map_with_path(
    lambda k, s: jnp.asarray(store(_param_name(k), s.shape), dtype), _param_shapes(model)
  )
  return model, params


def _param_shapes(model: DecoderLM) -> dict:
  """The model's params as shapes and dtypes (nothing is computed)."""
  return jax.eval_shape(
    lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  )


def _param_name(path) -> str:
  return ".".join(str(getattr(k, "key", k)) for k in path)


_SAFETENSORS_NAMES = {np.dtype(v).name: k for k, v in _SAFETENSORS_DTYPES.items()}


def write_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray]) -> None:
  """Writes ``{name: array}`` as a ``.safetensors`` file (the format :func:`read_safetensors`
  describes; tensors in name order, each contiguous, little-endian)."""
  header, offset, arrays = {}, 0, []
  for name in sorted(tensors):
    a = np.ascontiguousarray(tensors[name])
    if a.dtype.name not in _SAFETENSORS_NAMES:
      raise ValueError(f"tensor {name} has dtype {a.dtype}; writable: {sorted(_SAFETENSORS_NAMES)}")
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    header[name] = {
      "dtype": _SAFETENSORS_NAMES[a.dtype.name],
      "shape": list(a.shape),
      "data_offsets": [offset, offset + a.nbytes],
    }
    offset += a.nbytes
    arrays.append(a)
  blob = json.dumps(header).encode()
  blob += b" " * (-len(blob) % 8)  # the data start 8-byte aligned
  with open(path, "wb") as f:
    f.write(np.uint64(len(blob)).astype("<u8").tobytes())
    f.write(blob)
    for a in arrays:
      f.write(a.tobytes())


def save(directory: str | os.PathLike, model: DecoderLM, params: dict) -> str:
  """Writes ``(model, params)`` to a new checkpoint directory that :func:`load` reads back
  exactly: ``config.json`` (``architectures: ["MechjaxDecoderLM"]`` and the :class:`Arch`) and
  ``model.safetensors``, one tensor per param named by its path (``attn_0.query.kernel``).

  For a model that is not a Hugging Face checkpoint as it stands: a folded or rotated one
  (:func:`fold_norms`, :func:`rotate_residual`). This is mechjax's layout, not Hugging Face's:
  transformers does not read it. A directory that already holds a ``config.json`` or weights is
  refused, not overwritten. Returns the directory.
  """
  directory = os.fspath(directory)
  for name in ("config.json", "model.safetensors", "model.safetensors.index.json"):
    if os.path.exists(os.path.join(directory, name)):
      raise FileExistsError(f"{directory} already holds {name}; save writes a new directory")
  os.makedirs(directory, exist_ok=True)
  flat = {_param_name(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(params)}
  write_safetensors(os.path.join(directory, "model.safetensors"), flat)
  with open(os.path.join(directory, "config.json"), "w") as f:
    cfg = {"architectures": [SAVED_ARCHITECTURE], "mechjax_arch": dataclasses.asdict(model.arch)}
    json.dump(cfg, f, indent=2)
  return directory


# ----------------------------------------------------------------------------------------------
# A change of residual basis that leaves the function unchanged.


def _readers(arch: Arch, params: dict) -> dict[str, list[dict]]:
  """Each norm's name and the linear maps that read its output (kernels with ``d_model`` first)."""
  out = {}
  for l in range(arch.num_layers):
    out[f"norm_attn_{l}"] = [params[f"attn_{l}"][n] for n in ("query", "key", "value")]
    mlp = params[f"mlp_{l}"]
    out[f"norm_mlp_{l}"] = [mlp[n] for n in ("gate", "up") if n in mlp]
  out["norm_final"] = [params["unembed"]]
  return out


def _writers(arch: Arch, params: dict) -> list[tuple[dict, str]]:
  """``(container, key)`` of every array that writes to the stream (``d_model`` last)."""
  out = [(params["embed"], "embedding")]
  if arch.learned_positions:
    out.append((params, "pos_embed"))
  for l in range(arch.num_layers):
    for container in (params[f"attn_{l}"]["out"], params[f"mlp_{l}"]["down"]):
      out += [(container, k) for k in ("kernel", "bias") if k in container]
  return out


def _copy(params: dict) -> dict:
  return jax.tree.map(lambda x: np.array(x, np.float64), params)


def fold_norms(model: DecoderLM, params: dict) -> tuple[DecoderLM, dict]:
  """The same function with every norm's gain (and bias) moved into the maps that read it, so each
  norm is the bare normalisation; for LayerNorm models every write to the stream is also centred.

  ``(N(x)·g + b) W + c = N(x)·(diag(g) W) + (b W + c)``: the gains go into the readers' kernels and
  the biases into their biases (the unembedding gains one; tied embeddings are untied). A
  LayerNorm subtracts the mean of its input, and only norms read the stream, so subtracting each
  written vector's mean over ``d_model`` (embeddings, attention and MLP outputs) changes no norm's
  output: afterwards the stream lies in the mean-zero subspace. Computed in float64, returned in
  the model's dtype.
  """
  a = model.arch
  p = _copy(params)
  layernorm = a.norm == "layernorm"
  if a.tied_embeddings:
    p["unembed"] = {"kernel": p["embed"]["embedding"].T.copy()}
  changes = dict(tied_embeddings=False)
  if layernorm:  # the norms' biases need somewhere to go
    changes.update(qkv_bias=True, mlp_bias=True, unembed_bias=True)
  arch = dataclasses.replace(a, **changes)
  for norm, readers in _readers(a, p).items():
    gain, bias = p[norm]["scale"], p[norm].get("bias")
    for reader in readers:
      kernel = reader["kernel"]
      if layernorm:
        shift = np.tensordot(bias, kernel, axes=(0, 0))
        reader["bias"] = reader.get("bias", np.zeros(kernel.shape[1:])) + shift
      reader["kernel"] = kernel * gain.reshape((-1,) + (1,) * (kernel.ndim - 1))
    p[norm]["scale"] = np.ones_like(gain)
    if bias is not None:
      p[norm]["bias"] = np.zeros_like(bias)
  if layernorm:
    for container, key in _writers(a, p):
      container[key] = container[key] - container[key].mean(axis=-1, keepdims=True)
  new = DecoderLM(arch, model.dtype)
  return new, _as_params(new, p)


def _as_params(model: DecoderLM, p: dict) -> dict:
  """``p`` in the model's dtype, with zeros for any bias the model has and ``p`` lacks."""
  shapes = _param_shapes(model)
  flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(p)}
  return jax.tree_util.tree_map_with_path(
    lambda k, s: jnp.asarray(flat.get(jax.tree_util.keystr(k), np.zeros(s.shape)), model.dtype),
    shapes,
  )


def mean_preserving(r: jax.Array | np.ndarray) -> np.ndarray:
  """The ``d × d`` orthogonal matrix that fixes the all-ones direction and acts as ``r``
  (``(d − 1) × (d − 1)``, orthogonal) on an orthonormal basis of its complement: the rotations a
  LayerNorm model's stream allows (:func:`rotate_residual`)."""
  r = np.asarray(r, np.float64)
  d = r.shape[0] + 1
  u = np.full(d, 1 / np.sqrt(d))
  v = u - np.eye(d)[0]  # a Householder reflection taking e_0 to u
  h = np.eye(d) - 2 * np.outer(v, v) / (v @ v)
  basis = h[:, 1:]  # orthonormal, orthogonal to u
  return np.outer(u, u) + basis @ r @ basis.T


def rotate_residual(model: DecoderLM, params: dict, q) -> tuple[DecoderLM, dict]:
  """The same function with its residual stream in another basis: after :func:`fold_norms`, every
  site of the new model is the folded model's site times ``q``.

  Writers (embeddings, attention and MLP outputs, their biases) are multiplied by ``q`` on their
  ``d_model`` side, readers (query, key, value, MLP inputs, unembedding) by ``qᵀ``. Bare RMSNorm
  commutes with every orthogonal ``q``; bare LayerNorm on the mean-zero stream commutes with the
  ``q`` that fix the all-ones direction (:func:`mean_preserving`), and others are refused.
  """
  q = np.asarray(q, np.float64)
  d = model.arch.d_model
  if q.shape != (d, d) or not np.allclose(q @ q.T, np.eye(d), atol=1e-5):
    raise ValueError(f"q must be an orthogonal ({d}, {d}) matrix; got shape {q.shape}")
  if model.arch.norm == "layernorm" and not np.allclose(q @ np.ones(d), np.ones(d), atol=1e-5):
    raise ValueError(
      "a LayerNorm model's stream can only be rotated by a q that fixes the all-ones direction "
      "(q @ 1 = 1); build one with pretrained.mean_preserving(r)"
    )
  folded, p = fold_norms(model, params)
  a = folded.arch
  p = _copy(p)
  for container, key in _writers(a, p):
    container[key] = np.tensordot(container[key], q, axes=(-1, 0))
  for readers in _readers(a, p).values():
    for reader in readers:
      reader["kernel"] = np.tensordot(q.T, reader["kernel"], axes=(1, 0))
  return folded, _as_params(folded, p)


def component_masks(model: DecoderLM, params: dict) -> dict[str, dict]:
  """0/1 masks like ``params``, one per component, for the weight-restricted LLC and
  susceptibilities (``param_mask=`` of :func:`mechjax.slt.estimate_llc`).

  ``"attn_{l}.head_{h}"`` selects query head ``h``'s slice of the query kernel and bias and of the
  output kernel, and the key and value slices of the key/value head it reads (head ``h // (heads
  / kv_heads)``; under grouped-query attention that slice is shared by the group). ``"mlp_{l}"``
  selects every weight of layer ``l``'s MLP. The projections are stored per head, so each mask is
  exactly one head's weights, however the checkpoint fused them.
  """
  a = model.arch
  group = a.num_heads // a.num_kv_heads
  zeros = lambda: jax.tree.map(lambda x: np.zeros(np.shape(x), np.float32), params)
  out = {}
  for l in range(a.num_layers):
    for h in range(a.num_heads):
      m = zeros()
      attn = m[f"attn_{l}"]
      attn["query"]["kernel"][:, h] = 1
      attn["out"]["kernel"][h] = 1
      for name in ("key", "value"):
        attn[name]["kernel"][:, h // group] = 1
      for name, index in (("query", h), ("key", h // group), ("value", h // group)):
        if "bias" in attn[name]:
          attn[name]["bias"][index] = 1
      out[f"attn_{l}.head_{h}"] = m
    m = zeros()
    m[f"mlp_{l}"] = jax.tree.map(np.ones_like, m[f"mlp_{l}"])
    out[f"mlp_{l}"] = m
  return out


def site_activations(
  model: DecoderLM, params: dict, windows: dict, sites: Sequence[str], batch: int
) -> dict[str, dict[str, np.ndarray]]:
  """The activations at ``sites`` over each set of token windows (``{name: (B, T) tokens}``),
  ``batch`` windows per call of one compiled program: ``{name: {site: (B·T, d_model) float64}}``,
  window-major."""
  forward = jax.jit(
    lambda p, t: {
      s: x for s, x in model.apply({"params": p}, t, return_sites=True)[1].items() if s in sites
    }
  )
  out = {}
  for name, w in windows.items():
    parts = [jax.device_get(forward(params, w[i : i + batch])) for i in range(0, len(w), batch)]
    out[name] = {
      s: np.concatenate([p[s] for p in parts]).reshape(-1, model.arch.d_model).astype(np.float64)
      for s in sites
    }
  return out


def steered_log_prob(
  model: DecoderLM, params: dict, sites: Sequence[str], windows, token: int, batch: int
) -> Callable[[int, np.ndarray], float]:
  """``log_p(site_index, v)``: the model's mean log-probability of the next token being ``token``,
  over every position of the token ``windows`` ``(B, T)``, with ``v`` added to the residual stream
  at ``sites[site_index]`` (:func:`mechjax.align.transfer.steer_at`; a zero ``v`` gives the
  unsteered value). The windows go ``batch`` at a time through one compiled program for every site
  and vector, and the batches' means are averaged with their sizes as weights.

  Args:
    model: the model to steer.
    params: its params (without the ``"params"`` wrapper).
    sites: the sites a vector may be added at, in a fixed order.
    windows: the token windows the mean is taken over.
    token: the token whose log-probability is measured.
    batch: windows per forward pass (bounds the memory of the logits).
  """

  from mechjax.align import transfer  # local: align imports the models

  @jax.jit
  def mean_log_p(params, site_index, v, tokens):
    logits = model.apply({"params": params}, tokens, steer=transfer.steer_at(sites, site_index, v))
    return jnp.mean(jax.nn.log_softmax(logits.astype(jnp.float32))[..., token])

  chunks = [windows[i : i + batch] for i in range(0, len(windows), batch)]

  def log_p(site_index: int, v) -> float:
    v = jnp.asarray(v, jnp.float32)
    vals = [mean_log_p(params, site_index, v, c) for c in chunks]
    return np.average(np.asarray(vals), weights=[len(c) for c in chunks])

  return log_p


def next_token_losses(model: DecoderLM, params, tokens_BxT) -> jax.Array:
  """The cross-entropy of each next token, ``(B, T − 1)``: position ``t`` predicts token
  ``t + 1``."""
  tokens_BxT = jnp.asarray(tokens_BxT)
  # Causal: the logits at positions < T − 1 do not see the last token, so it is not fed.
  return model.apply({"params": params}, tokens_BxT[:, :-1], targets_BxT=tokens_BxT[:, 1:])


def lm_losses(model: DecoderLM) -> tuple[Callable, Callable]:
  """``(loss_fn, per_sample_loss)`` for the SLT calls, on batches of token windows ``(B, T)``:
  ``loss_fn(params, tokens)`` is the mean next-token loss over the batch (for
  :func:`mechjax.slt.estimate_llc`), ``per_sample_loss(params, tokens)`` each window's mean,
  ``(B,)`` (for :func:`mechjax.slt.estimate_susceptibilities`)."""

  def per_sample_loss(params, tokens_BxT):
    return jnp.mean(next_token_losses(model, params, tokens_BxT), axis=-1)

  def loss_fn(params, tokens_BxT):
    return jnp.mean(next_token_losses(model, params, tokens_BxT))

  return loss_fn, per_sample_loss


__all__ = [
  "ARCHITECTURES",
  "Arch",
  "CheckpointError",
  "DecoderLM",
  "arch_from_config",
  "attention_patterns",
  "check_tokens",
  "component_masks",
  "fold_norms",
  "lm_losses",
  "load",
  "logsumexp_head",
  "mean_preserving",
  "next_token_losses",
  "params_from_hf",
  "read_safetensors",
  "read_weights",
  "rotate_residual",
  "site_names",
]
