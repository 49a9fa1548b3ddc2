"""Llama (``LlamaForCausalLM``) and Qwen2 (``Qwen2ForCausalLM``, a Llama variant): their
``config.json`` keys and their weight names.

Both use RMSNorm, rotary embeddings, a gated (SwiGLU) MLP and grouped-query attention
(``num_key_value_heads``); Qwen2 differs in its biases (on the query, key and value only) and in
naming its sliding window ``use_sliding_window``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import heads_divide
from mechjax.models.pretrained.arch import refuse
from mechjax.models.pretrained.arch import rope
from mechjax.models.pretrained.arch import rotary_dims

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
FAMILIES = ("llama", "qwen2")
PREFIX = "model."


def arch(cfg: dict, activation: str, architecture: str) -> Arch:
  """The :class:`Arch` of a Llama or Qwen2 ``config.json``; refuses a sliding attention window."""
  qwen = architecture == "Qwen2ForCausalLM"
  if cfg.get("use_sliding_window") or (not qwen and cfg.get("sliding_window") is not None):
    refuse("config.json: a sliding attention window is not implemented; supported: full attention")
  # transformers' Llama config refuses a hidden size the heads do not divide (Qwen2's does not).
  heads_divide(cfg, "num_attention_heads", None if qwen else "hidden_size", "num_key_value_heads")
  d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
  head_dim = cfg.get("head_dim") or d // heads
  theta, partial = rope(cfg, 10000.0)
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
    rotary_dim=rotary_dims(head_dim, partial, True, "partial_rotary_factor"),
    rope_theta=theta,
    parallel_residual=False,
    qkv_bias=True if qwen else cfg.get("attention_bias", False),
    out_bias=False if qwen else cfg.get("attention_bias", False),
    mlp_bias=False if qwen else cfg.get("mlp_bias", False),
    tied_embeddings=cfg.get("tie_word_embeddings", False),
  )


def config(a: Arch) -> dict:
  """The ``config.json`` keys that :func:`arch` reads, for ``a`` (Llama's or Qwen2's); the rotary
  base both in ``rope_parameters`` (transformers v5) and as ``rope_theta`` (v4)."""
  cfg = {
    "architectures": ["Qwen2ForCausalLM" if a.family == "qwen2" else "LlamaForCausalLM"],
    "model_type": a.family,
    "vocab_size": a.vocab_size,
    "hidden_size": a.d_model,
    "num_hidden_layers": a.num_layers,
    "num_attention_heads": a.num_heads,
    "num_key_value_heads": a.num_kv_heads,
    "head_dim": a.head_dim,
    "intermediate_size": a.d_mlp,
    "max_position_embeddings": a.max_positions,
    "hidden_act": a.activation,
    "rms_norm_eps": a.norm_eps,
    "rope_parameters": {"rope_type": "default", "rope_theta": a.rope_theta},
    "rope_theta": a.rope_theta,
    "tie_word_embeddings": a.tied_embeddings,
    "attention_dropout": 0.0,
  }
  if a.family == "qwen2":
    cfg.update(use_sliding_window=False, sliding_window=None)
  else:
    cfg.update(attention_bias=a.qkv_bias, mlp_bias=a.mlp_bias)
  return cfg


def params(a: Arch, get: Callable[[str, tuple], np.ndarray], has=None) -> dict:
  """The body's params from Llama's (or Qwen2's) tensors, ``get(name, shape)`` by name without the
  ``model.`` prefix (torch ``Linear`` weights, ``(out, in)``)."""
  d, H, K, hd, f = a.d_model, a.num_heads, a.num_kv_heads, a.head_dim, a.d_mlp
  lin = lambda key, n_out, n_in: get(key, (n_out, n_in)).T
  norm = lambda key: {"scale": get(f"{key}.weight", (d,))}
  p = {"embed": {"embedding": get("embed_tokens.weight", (a.vocab_size, d))}}
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
        bias = get(f"{b}self_attn.{short}_proj.bias", (heads * hd,))
        attn[name]["bias"] = bias.reshape(heads, hd)
    attn["out"] = {"kernel": lin(b + "self_attn.o_proj.weight", d, H * hd).reshape(H, hd, d)}
    if a.out_bias:
      attn["out"]["bias"] = get(b + "self_attn.o_proj.bias", (d,))
    p[f"attn_{l}"] = attn
    mlp = {name: {"kernel": lin(f"{b}mlp.{name}_proj.weight", f, d)} for name in ("gate", "up")}
    mlp["down"] = {"kernel": lin(b + "mlp.down_proj.weight", d, f)}
    if a.mlp_bias:
      for name, n in (("gate", f), ("up", f), ("down", d)):
        mlp[name]["bias"] = get(f"{b}mlp.{name}_proj.bias", (n,))
    p[f"mlp_{l}"] = mlp
  p["norm_final"] = norm("norm")
  return p


def head(has=None) -> str:
  """The name of an untied unembedding's weight, ``(vocab, d_model)``."""
  return "lm_head.weight"
