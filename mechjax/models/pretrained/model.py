"""The decoder-only flax module that every supported family runs as, :class:`DecoderLM`, with its
named sites and its next-token losses.

One module computes all the families; :class:`~mechjax.models.pretrained.arch.Arch` holds what
differs. Block ``l`` (pre-norm; with ``parallel_residual``, as in Pythia, both branches read
``resid_pre``)::

    resid_mid_l  = resid_pre_l + attn_out_l,        attn_out_l = Attn(Norm(resid_pre_l))
    resid_post_l = resid_mid_l + mlp_out_l,         mlp_out_l  = MLP(Norm(resid_mid_l))
    resid_post_l = resid_pre_l + attn_out_l + mlp_out_l,  mlp_out_l = MLP(Norm'(resid_pre_l))

and ``final_norm = Norm(resid_post_{L-1})`` (kept apart from ``resid_post_{L-1}``: Hugging Face's
last ``hidden_states`` entry is taken after the final norm). ``steer={site: v}`` adds ``v`` at any
site, and everything downstream sees it. Attention weights are sown as in
:mod:`mechjax.models.transformer` (:func:`mechjax.models.sites.attention_patterns`).

Rotary embeddings follow Su et al. 2021 (arXiv 2104.09864) in the "rotate half" layout of GPT-NeoX
and Llama: the first ``rotary_dim`` dimensions of each head, split in halves ``(x₁, x₂)``, become
``(x₁ cos θ − x₂ sin θ, x₂ cos θ + x₁ sin θ)`` with ``θ_i = t · base^(−2i/rotary_dim)``.

Params are float32 by default; ``dtype=jnp.bfloat16`` keeps them in bf16, with the norms and the
softmax computed in float32.
"""

from __future__ import annotations

import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import sites as sites_lib
from mechjax.models.pretrained.arch import ACTIVATIONS
from mechjax.models.pretrained.arch import Arch
from mechjax.models.transformer import leading


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
  """Rotates the first dimensions of each head by position (module docstring): ``rotary_dim``
  of them, or ``rotary_dim + 1`` when it is odd. As in transformers, the frequencies are
  ``base^(−2i/rotary_dim)`` for ``i < ⌈rotary_dim/2⌉`` and the rotated width is twice their number
  (the width of its cosine); the loader refuses a width larger than the head
  (:func:`rotary_width`)."""
  if rotary_dim == 0:
    return x_BxTxHxd
  t = x_BxTxHxd.shape[1]
  inv_freq = 1.0 / (theta ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim))
  angles = np.arange(t, dtype=np.float32)[:, None] * inv_freq[None]  # (T, ⌈rotary_dim/2⌉)
  cos = jnp.asarray(np.concatenate([np.cos(angles)] * 2, -1))[None, :, None]
  sin = jnp.asarray(np.concatenate([np.sin(angles)] * 2, -1))[None, :, None]
  width = rotary_width(rotary_dim)
  rot, rest = x_BxTxHxd[..., :width], x_BxTxHxd[..., width:]
  r32 = rot.astype(jnp.float32)
  half = width // 2
  rotated = jnp.concatenate([-r32[..., half:], r32[..., :half]], axis=-1)
  out = (r32 * cos + rotated * sin).astype(x_BxTxHxd.dtype)
  return jnp.concatenate([out, rest], axis=-1)


def rotary_width(rotary_dim: int) -> int:
  """The dimensions of each head that :func:`rotary` rotates: ``2·⌈rotary_dim/2⌉``."""
  return 2 * -(-rotary_dim // 2)


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
    b = x_BxTxD.shape[0]
    rows = x_BxTxD.reshape(b * t, -1)  # projections on the tokens as rows, as in MLP
    project = lambda heads, name: dense(heads, name)(rows).reshape(b, t, heads, a.head_dim)  # noqa: E731
    q = rotary(project(a.num_heads, "query"), a.rotary_dim, a.rope_theta)
    k = rotary(project(a.num_kv_heads, "key"), a.rotary_dim, a.rope_theta)
    v = project(a.num_kv_heads, "value")
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
    )(z.reshape((b * t,) + z.shape[2:])).reshape(b, t, a.d_model)


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
    # On the tokens as rows, (B·T, d): the backward pass's bias gradient and the transposed copy
    # for the kernel's gradient are then reductions and copies of a matrix, which XLA's CPU
    # emitter runs several times faster than over (B, T, d) with an odd T (docs/benchmarks.md).
    rows = x.reshape(-1, x.shape[-1])
    if a.gated_mlp:
      h = act(dense(a.d_mlp, "gate")(rows)) * dense(a.d_mlp, "up")(rows)
    else:
      h = act(dense(a.d_mlp, "up")(rows))
    return dense(a.d_model, "down")(h).reshape(x.shape[:-1] + (a.d_model,))


# Vocabulary columns per chunk of logsumexp_head: a chunk's logits for a minibatch of about a
# thousand tokens (4 MB) stay in a CPU core's cache; of 512 to 8,192, 1,024 was fastest for the
# gradient of a pythia-14m-shaped head.
VOCAB_CHUNK = 1024


def logsumexp_head(x_NxD: jax.Array, kernel_DxV: jax.Array, bias_V: jax.Array | None = None):
  """``logsumexp(x @ kernel + bias, axis=-1)``, ``(N,)`` in float32, without ever holding the
  ``(N, vocab)`` logits.

  The vocabulary is taken :data:`VOCAB_CHUNK` columns at a time in a ``fori_loop`` (each chunk a
  dynamic slice of the unembedding as it is, and each chunk's gradient written into place), with the
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


def _vocab_slices(kernel_DxV, bias_V):
  """``(full, chunk(i), tail)``: the number of whole :data:`VOCAB_CHUNK`-column chunks, a function
  giving chunk ``i``'s ``(D, chunk)`` kernel and float32 bias (dynamic slices of the arrays as they
  are: no padded, reshaped or transposed copy of the unembedding), and the last, shorter chunk's
  ``(kernel, bias)`` (None when the chunks fill the vocabulary)."""
  v = kernel_DxV.shape[1]
  full = v // VOCAB_CHUNK
  bias_V = bias_V.astype(jnp.float32)

  def chunk(i):
    start = i * VOCAB_CHUNK
    return (
      jax.lax.dynamic_slice_in_dim(kernel_DxV, start, VOCAB_CHUNK, axis=1),
      jax.lax.dynamic_slice_in_dim(bias_V, start, VOCAB_CHUNK),
    )

  rest = full * VOCAB_CHUNK
  tail = (kernel_DxV[:, rest:], bias_V[rest:]) if rest < v else None
  return full, chunk, tail


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
    return new_top, total_N

  n = x_NxD.shape[0]
  full, chunk, tail = _vocab_slices(kernel_DxV, bias_V)
  carry = (jnp.full((n,), -jnp.inf, jnp.float32), jnp.zeros((n,), jnp.float32))
  if full:  # (a vocabulary under one chunk is all tail)
    carry = jax.lax.fori_loop(0, full, lambda i, c: add_chunk(c, chunk(i)), carry)
  top_N, total_N = carry if tail is None else add_chunk(carry, tail)
  lse_N = top_N + jnp.log(total_N)
  return lse_N, (x_NxD, kernel_DxV, bias_V, lse_N)


def _logsumexp_head_bwd(residuals, g_N):
  x_NxD, kernel_DxV, bias_V, lse_N = residuals
  x_f32 = x_NxD.T.astype(jnp.float32)

  def chunk_grads(start, carry, kernel_DxC, bias_C):
    dx_NxD, dkernel_DxV, dbias_V = carry
    p_NxC = jnp.exp(_chunk_logits(x_NxD, kernel_DxC, bias_C) - lse_N[:, None]) * g_N[:, None]
    dx_NxD = dx_NxD + jnp.dot(p_NxC, kernel_DxC.T.astype(jnp.float32))
    put = jax.lax.dynamic_update_slice_in_dim
    dkernel_DxV = put(dkernel_DxV, jnp.dot(x_f32, p_NxC), start, axis=1)
    return dx_NxD, dkernel_DxV, put(dbias_V, jnp.sum(p_NxC, axis=0), start, axis=0)

  full, chunk, tail = _vocab_slices(kernel_DxV, bias_V)
  carry = (
    jnp.zeros(x_NxD.shape, jnp.float32),
    jnp.zeros(kernel_DxV.shape, jnp.float32),
    jnp.zeros(bias_V.shape, jnp.float32),
  )
  if full:
    step = lambda i, c: chunk_grads(i * VOCAB_CHUNK, c, *chunk(i))  # noqa: E731
    carry = jax.lax.fori_loop(0, full, step, carry)
  if tail is not None:
    carry = chunk_grads(full * VOCAB_CHUNK, carry, *tail)
  dx_NxD, dkernel_DxV, dbias_V = carry
  return (
    dx_NxD.astype(x_NxD.dtype),
    dkernel_DxV.astype(kernel_DxV.dtype),
    dbias_V.astype(bias_V.dtype),
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
    steer = sites_lib.check_steer(steer, site_names(self))
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
    out = _logits_or_losses(a, self.dtype, x_N, kernel, bias, tokens_BxT.shape, targets_BxT)
    return (out, sites) if return_sites else out


def _logits_or_losses(a: Arch, dtype, x_N, kernel, bias, shape, targets_BxT):
  """:class:`DecoderLM`'s output from the final norm's ``(B·T, d)`` rows: the logits ``(B, T,
  vocab)``, or with ``targets_BxT`` each position's cross-entropy (:meth:`DecoderLM.__call__`)."""
  b, t = shape
  if targets_BxT is None:
    logits = jnp.dot(x_N, kernel.astype(dtype), preferred_element_type=jnp.float32)
    if bias is not None:
      logits = logits + bias.astype(jnp.float32)[None]
    return logits.reshape(b, t, a.vocab_size)
  targets_BxT = jnp.asarray(targets_BxT)
  if targets_BxT.shape != (b, t):
    raise ValueError(
      f"targets must have the tokens' shape {(b, t)}; got {tuple(targets_BxT.shape)}"
    )
  check_tokens(a, targets_BxT)
  targets_N = targets_BxT.reshape(b * t)
  columns = jnp.take(kernel, targets_N, axis=1).astype(jnp.float32)  # (d, B·T)
  chosen = jnp.einsum("nd,dn->n", x_N.astype(jnp.float32), columns)
  if bias is not None:
    chosen = chosen + jnp.take(bias, targets_N).astype(jnp.float32)
  return (logsumexp_head(x_N, kernel, bias) - chosen).reshape(b, t)


def site_names(model: DecoderLM) -> list[str]:
  """Every site of ``model``, in the order the stream passes them."""
  arch = model.arch
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
  ``(B,)`` (for :func:`mechjax.slt.estimate_susceptibilities`). Both are jitted, so that a call
  outside a compiled program (the loss at w*, say) runs as one program, not op by op."""

  @jax.jit
  def per_sample_loss(params, tokens_BxT):
    return jnp.mean(next_token_losses(model, params, tokens_BxT), axis=-1)

  @jax.jit
  def loss_fn(params, tokens_BxT):
    return jnp.mean(next_token_losses(model, params, tokens_BxT))

  return loss_fn, per_sample_loss
