"""A small decoder-only pre-norm transformer with its residual stream exposed at named sites.

Block ``l``: ``resid_mid = resid_pre + Attn(RMSNorm(resid_pre))``, ``resid_post = resid_mid +
MLP(RMSNorm(resid_mid))`` (the MLP is dropped with ``attn_only``). RMSNorm has a gain and no bias;
no layer has biases; the MLP is ReLU; attention is causal with learned absolute positions. Several
linear readout heads (for example token, depth and validity for Dyck) share a final RMSNorm.

``model.apply(params, tokens, return_sites=True)`` also returns ``{"resid_pre_0", "resid_mid_0",
"resid_post_0", …}``, each ``(B, T, d_model)``: the activations the alignment pillar compares across
seeds. ``model.apply(params, tokens, mutable=["intermediates"])`` also returns every layer's
attention pattern, ``(B, heads, T_query, T_key)``, at
``["intermediates"]["attn_{l}"]["attention"][0]`` (see
:func:`mechjax.models.sites.attention_patterns`). ``steer={site: v}`` adds ``v`` (``(d_model,)``
or anything broadcastable to ``(B, T, d_model)``) to the stream at that site, and everything
downstream (later sites included) sees the steered stream.
:func:`fold_rmsnorm_gains` moves every RMSNorm gain into the weights that read the normalised
stream, which leaves the function unchanged and makes the residual basis the only free choice
between models.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax.models import sites as sites_lib
from mechjax.models.sites import attention_patterns  # noqa: F401  (one function for both models)


def leading(v: jax.Array, x: jax.Array) -> jax.Array:
  """``v`` with length-1 axes in front, to the rank of ``x`` (the explicit form of NumPy's rank
  promotion)."""
  return jnp.expand_dims(v, tuple(range(x.ndim - v.ndim)))


class RMSNorm(nn.Module):
  eps: float = 1e-6

  @nn.compact
  def __call__(self, x):
    gain = self.param("gain", nn.initializers.ones, (x.shape[-1],))
    return x * jax.lax.rsqrt(jnp.mean(x**2, axis=-1, keepdims=True) + self.eps) * leading(gain, x)


class Attention(nn.Module):
  num_heads: int

  @nn.compact
  def __call__(self, x_BxTxD):
    b, t, d = x_BxTxD.shape
    if d % self.num_heads:
      raise ValueError(f"d_model={d} must be divisible by num_heads={self.num_heads}")
    h = d // self.num_heads
    dense = lambda name: nn.DenseGeneral((self.num_heads, h), use_bias=False, name=name)
    q, k, v = dense("query")(x_BxTxD), dense("key")(x_BxTxD), dense("value")(x_BxTxD)
    scores_BxHxTxT = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(h)
    causal = jnp.tril(jnp.ones((t, t), bool))
    weights = jax.nn.softmax(jnp.where(causal[None, None], scores_BxHxTxT, -1e30), axis=-1)
    if not self.is_initializing():  # init must return params only
      self.sow(
        "intermediates", "attention", weights
      )  # (B, H, T_q, T_k); kept only with mutable=["intermediates"]
    z_BxTxHxd = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
    return nn.DenseGeneral(d, axis=(-2, -1), use_bias=False, name="out")(z_BxTxHxd)


class Transformer(nn.Module):
  """The decoder-only pre-norm transformer of the module docstring, mapping ``tokens_BxT`` to a dict
  of readout logits ``{name: (B, T, size)}`` (and the residual sites with ``return_sites``).

  Attributes:
    vocab_size: number of token ids (rows of the token embedding).
    heads: the readout heads as ``(name, size)`` pairs, each a linear map of the final normed
      stream to ``size`` outputs.
    d_model: width of the residual stream; must be divisible by ``num_heads``.
    num_layers: number of blocks.
    num_heads: attention heads per layer, each of width ``d_model // num_heads``.
    d_mlp: hidden width of each ReLU MLP.
    max_len: longest sequence accepted (rows of the learned position embedding).
    attn_only: drop the MLPs, leaving attention-only blocks.
  """

  vocab_size: int
  heads: tuple[tuple[str, int], ...] = (("token", 8),)
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  d_mlp: int = 256
  max_len: int = 64
  attn_only: bool = False

  @nn.compact
  def __call__(self, tokens_BxT, return_sites: bool = False, steer: dict | None = None):
    if tokens_BxT.ndim != 2 or tokens_BxT.shape[1] > self.max_len:
      raise ValueError(
        f"tokens must have shape (B, T) with T <= max_len={self.max_len}; got {tokens_BxT.shape}"
      )
    steer = sites_lib.check_steer(steer, site_names(self))
    t = tokens_BxT.shape[1]
    embed = nn.Embed(self.vocab_size, self.d_model, name="embed")
    pos = self.param("pos_embed", nn.initializers.normal(0.02), (self.max_len, self.d_model))
    sites = {}

    def site(name, x):
      if name in steer:
        x = x + leading(jnp.asarray(steer[name]), x)
      sites[name] = x
      return x

    x = site("resid_pre_0", embed(tokens_BxT) + pos[None, :t])
    for layer in range(self.num_layers):
      if layer > 0:
        x = site(f"resid_pre_{layer}", x)
      x = x + Attention(self.num_heads, name=f"attn_{layer}")(RMSNorm(name=f"norm_attn_{layer}")(x))
      x = site(f"resid_mid_{layer}", x)
      if not self.attn_only:
        hidden = nn.relu(
          nn.Dense(self.d_mlp, use_bias=False, name=f"mlp_in_{layer}")(
            RMSNorm(name=f"norm_mlp_{layer}")(x)
          )
        )
        x = x + nn.Dense(self.d_model, use_bias=False, name=f"mlp_out_{layer}")(hidden)
      x = site(f"resid_post_{layer}", x)
    normed = RMSNorm(name="norm_final")(x)
    outputs = {
      name: nn.Dense(size, use_bias=False, name=f"head_{name}")(normed) for name, size in self.heads
    }
    return (outputs, sites) if return_sites else outputs


def attention_only(
  vocab: int, length: int, d_model: int, num_layers: int, num_heads: int
) -> Transformer:
  """An attention-only :class:`Transformer` over ``vocab`` tokens and sequences of at most
  ``length``, with one next-token readout ``"token"``: the model induction heads form in."""
  return Transformer(
    vocab_size=vocab,
    heads=(("token", vocab),),
    d_model=d_model,
    num_layers=num_layers,
    num_heads=num_heads,
    max_len=length,
    attn_only=True,
  )


def seed_activations(
  model: Transformer, params_S, batches: dict[str, jax.Array], sites: Sequence[str]
) -> dict[str, dict[str, jax.Array]]:
  """Every seed's activations at ``sites`` on the same tokens, from params with a leading seed axis
  ``S``: for each ``{name: tokens (B, T)}`` of ``batches``, ``{site: (S, B·T, d_model)}`` with the
  positions flattened, window-major. One jitted forward pass, vmapped over the seeds, serves all
  the batches."""
  forward = jax.jit(
    jax.vmap(lambda p, tokens: model.apply(p, tokens, return_sites=True)[1], in_axes=(0, None))
  )
  out = {}
  for name, tokens in batches.items():
    acts = forward(params_S, tokens)
    out[name] = {s: acts[s].reshape(acts[s].shape[0], -1, model.d_model) for s in sites}
  return out


def next_token_losses(model: Transformer, params, tokens_BxT, head: str = "token") -> jax.Array:
  """The cross-entropy of each next token under readout ``head``, ``(B, T − 1)``: position ``t``
  predicts token ``t + 1``."""
  logits = model.apply(params, tokens_BxT)[head][:, :-1]
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens_BxT[:, 1:])


def head_masks(params, num_layers: int, num_heads: int) -> dict[str, dict]:
  """0/1 masks like ``params``, one per attention head, for the weight-restricted LLC and
  susceptibilities (``components=`` of :func:`mechjax.slt.estimate_susceptibilities`; the
  counterpart of :func:`mechjax.models.pretrained.component_masks`). ``"L{l}H{h}"`` selects head
  ``h`` of layer ``l``: its columns of the query, key and value kernels and its rows of the output
  kernel. The heads partition the attention weights and touch nothing else."""
  masks = {}
  for layer in range(num_layers):
    for head in range(num_heads):

      def one(path, leaf, layer=layer, head=head):
        names = [getattr(k, "key", str(k)) for k in path]
        m = np.zeros(leaf.shape, np.float32)
        if f"attn_{layer}" in names:
          if names[-2] in ("query", "key", "value"):
            m[:, head] = 1
          elif names[-2] == "out":
            m[head] = 1
        return jnp.asarray(m)

      masks[f"L{layer}H{head}"] = jax.tree_util.tree_map_with_path(one, params)
  return masks


def site_names(model: Transformer) -> list[str]:
  """Every site of ``model``, in the order the stream passes them: its residual sites.
  ``resid_pre_{l+1}`` is the same point of the stream as ``resid_post_{l}`` (steering both adds
  both vectors there)."""
  names = []
  for layer in range(model.num_layers):
    names += [f"resid_pre_{layer}", f"resid_mid_{layer}", f"resid_post_{layer}"]
  return names


def fold_rmsnorm_gains(params: dict, num_layers: int, attn_only: bool = False) -> dict:
  """Returns params with every RMSNorm gain set to 1 and multiplied into the weights that read its
  output.

  ``RMSNorm(x)·g @ W = RMSNorm(x) @ (diag(g) W)``, so the function is unchanged.
  """
  p = jax.tree.map(lambda a: a, params)  # a copy of the structure
  inner = p["params"]

  def fold(norm_name, readers):
    gain = inner[norm_name]["gain"]
    for reader in readers:
      kernel = reader["kernel"]
      reader["kernel"] = kernel * gain.reshape((-1,) + (1,) * (kernel.ndim - 1))
    inner[norm_name] = {"gain": jnp.ones_like(gain)}

  for layer in range(num_layers):
    attn = inner[f"attn_{layer}"]
    fold(f"norm_attn_{layer}", [attn["query"], attn["key"], attn["value"]])
    if not attn_only:
      fold(f"norm_mlp_{layer}", [inner[f"mlp_in_{layer}"]])
  fold("norm_final", [v for k, v in inner.items() if k.startswith("head_")])
  return p


def rotate_residual(
  model: Transformer, params: dict, q: jax.Array, scale: float = 1.0
) -> tuple[Transformer, dict]:
  """``(model, params)`` of the same function with its residual stream expressed in another basis:
  every site becomes ``scale · x @ q``. ``params`` are the variables ``{"params": ...}``; the
  model is returned unchanged.

  ``q`` must be orthogonal (``d_model × d_model``). RMSNorm commutes with rotations only when its
  gains are uniform, so the gains are folded first (:func:`fold_rmsnorm_gains`). Then every weight
  that writes to the stream (embeddings, attention output, MLP output) is multiplied by ``q`` on its
  output side and every weight that reads it (query, key, value, MLP input, heads) by ``qᵀ`` on its
  input side. This is the exact symmetry behind "polymorphism as rotation": two models related this
  way are indistinguishable by their outputs, and their activations differ by exactly ``q``.

  ``scale`` also multiplies the writers by ``scale``. Every reader sees the stream through an
  RMSNorm, so this is a symmetry too, exact up to the norm's ``eps``: the residual stream of a
  pre-norm transformer is determined only up to a rotation *and* a global scale.
  """
  num_layers, attn_only = model.num_layers, model.attn_only
  p = fold_rmsnorm_gains(params, num_layers, attn_only)
  inner = p["params"]
  write = lambda w: scale * jnp.tensordot(w, q, axes=(w.ndim - 1, 0))  # scale · (..., d) @ q
  read = lambda w: jnp.tensordot(q.T, w, axes=(1, 0))  # qᵀ @ (d, ...)
  inner["embed"] = {"embedding": write(inner["embed"]["embedding"])}
  inner["pos_embed"] = write(inner["pos_embed"])
  for layer in range(num_layers):
    attn = inner[f"attn_{layer}"]
    for name in ("query", "key", "value"):
      attn[name] = {"kernel": read(attn[name]["kernel"])}
    attn["out"] = {"kernel": write(attn["out"]["kernel"])}
    if not attn_only:
      inner[f"mlp_in_{layer}"] = {"kernel": read(inner[f"mlp_in_{layer}"]["kernel"])}
      inner[f"mlp_out_{layer}"] = {"kernel": write(inner[f"mlp_out_{layer}"]["kernel"])}
  for name in [k for k in inner if k.startswith("head_")]:
    inner[name] = {"kernel": read(inner[name]["kernel"])}
  return model, p
