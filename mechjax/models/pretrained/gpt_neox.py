"""GPT-NeoX (``GPTNeoXForCausalLM``, Pythia): its ``config.json`` keys and its weight names.

GPT-NeoX fuses the query, key and value per head, ``query_key_value`` as ``(heads, 3, head_dim)``
rows of a torch ``Linear``; rotary embeddings cover ``rotary_pct`` of each head, the attention and
MLP branches read the same input (``use_parallel_residual``), and the norms are LayerNorms.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import fraction
from mechjax.models.pretrained.arch import heads_divide
from mechjax.models.pretrained.arch import refuse
from mechjax.models.pretrained.arch import rope
from mechjax.models.pretrained.arch import rotary_dims

ARCHITECTURES = ("GPTNeoXForCausalLM",)
FAMILIES = ("gpt_neox",)
PREFIX = "gpt_neox."


def arch(cfg: dict, activation: str, architecture: str) -> Arch:
  """The :class:`Arch` of a GPT-NeoX ``config.json``."""
  heads_divide(cfg, "num_attention_heads", "hidden_size")
  d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
  head_dim = d // heads
  if cfg.get("head_dim") not in (None, head_dim):
    refuse(  # transformers' GPT-NeoX attends with hidden_size // heads but rotates head_dim
      f"config.json: head_dim={cfg['head_dim']} differs from hidden_size / num_attention_heads = "
      f"{head_dim}, which GPT-NeoX's attention uses; supported: no head_dim, or {head_dim}"
    )
  theta, partial = rope(cfg, 10000.0, "rotary_pct", default_partial=0.25)
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
    rotary_dim=rotary_dims(head_dim, partial, False, "rotary_pct"),
    rope_theta=theta,
    parallel_residual=cfg.get("use_parallel_residual", True),
    qkv_bias=cfg.get("attention_bias", True),
    out_bias=cfg.get("attention_bias", True),
    mlp_bias=True,
    tied_embeddings=cfg.get("tie_word_embeddings", False),
  )


def config(a: Arch) -> dict:
  """The ``config.json`` keys that :func:`arch` reads, for ``a``: the rotary settings both as
  transformers v5 writes them (``rope_parameters``) and in the hub's older keys (``rotary_pct``,
  ``rotary_emb_base``), so that either version reads them."""
  partial = fraction(a.rotary_dim, a.head_dim)
  return {
    "architectures": ["GPTNeoXForCausalLM"],
    "model_type": "gpt_neox",
    "vocab_size": a.vocab_size,
    "hidden_size": a.d_model,
    "num_hidden_layers": a.num_layers,
    "num_attention_heads": a.num_heads,
    "intermediate_size": a.d_mlp,
    "max_position_embeddings": a.max_positions,
    "hidden_act": a.activation,
    "layer_norm_eps": a.norm_eps,
    "rope_parameters": {
      "rope_type": "default",
      "rope_theta": a.rope_theta,
      "partial_rotary_factor": partial,
    },
    "rotary_pct": partial,
    "rotary_emb_base": a.rope_theta,
    "use_parallel_residual": a.parallel_residual,
    "attention_bias": a.qkv_bias,
    "tie_word_embeddings": a.tied_embeddings,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
  }


def params(a: Arch, get: Callable[[str, tuple], np.ndarray], has=None) -> dict:
  """The body's params from GPT-NeoX's tensors, ``get(name, shape)`` by name without the
  ``gpt_neox.`` prefix (torch ``Linear`` weights, ``(out, in)``)."""
  d, H, hd, f = a.d_model, a.num_heads, a.head_dim, a.d_mlp
  lin = lambda key, n_out, n_in: get(key, (n_out, n_in)).T
  norm = lambda key: {"scale": get(f"{key}.weight", (d,)), "bias": get(f"{key}.bias", (d,))}
  p = {"embed": {"embedding": get("embed_in.weight", (a.vocab_size, d))}}
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
  return p


def head(has=None) -> str:
  """The name of the unembedding's weight: ``embed_out.weight`` (Pythia's), or ``lm_head.weight``
  where a checkpoint uses that name."""
  return "embed_out.weight" if has is not None and has("embed_out.weight") else "lm_head.weight"
