"""GPT-2 (``GPT2LMHeadModel``): its ``config.json`` keys and its weight names.

GPT-2 stores its projections as ``Conv1D``, ``(in, out)``, and fuses the query, key and value as
``c_attn = [q; k; v]``; positions are a learned embedding, the norms are LayerNorms and the
unembedding is tied to the token embedding unless ``tie_word_embeddings`` is false.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import heads_divide
from mechjax.models.pretrained.arch import refuse

ARCHITECTURES = ("GPT2LMHeadModel",)
FAMILIES = ("gpt2",)
PREFIX = "transformer."  # the base model's weight names start with it


def arch(cfg: dict, activation: str, architecture: str) -> Arch:
  """The :class:`Arch` of a GPT-2 ``config.json``; refuses the options that are not implemented."""
  for key in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
    if cfg.get(key):
      refuse(f"config.json: {key}=true is not implemented; supported: false")
  if cfg.get("scale_attn_weights", True) is not True:
    refuse("config.json: scale_attn_weights=false is not implemented; supported: true")
  heads_divide(cfg, "n_head", "n_embd")
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


def config(a: Arch) -> dict:
  """The ``config.json`` keys that :func:`arch` reads, for ``a`` (what :func:`export_hf` writes)."""
  return {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": a.vocab_size,
    "n_embd": a.d_model,
    "n_layer": a.num_layers,
    "n_head": a.num_heads,
    "n_inner": a.d_mlp,
    "n_positions": a.max_positions,
    "activation_function": a.activation,
    "layer_norm_epsilon": a.norm_eps,
    "tie_word_embeddings": a.tied_embeddings,
    "scale_attn_weights": True,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
  }


def params(a: Arch, get: Callable[[str, tuple], np.ndarray], has=None) -> dict:
  """The body's params (all but an untied unembedding) from GPT-2's tensors, ``get(name, shape)``
  by name without the ``transformer.`` prefix."""
  d, H, hd, f = a.d_model, a.num_heads, a.head_dim, a.d_mlp
  norm = lambda key: {"scale": get(f"{key}.weight", (d,)), "bias": get(f"{key}.bias", (d,))}
  p = {"embed": {"embedding": get("wte.weight", (a.vocab_size, d))}}
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
      "up": {"kernel": get(b + "mlp.c_fc.weight", (d, f)), "bias": get(b + "mlp.c_fc.bias", (f,))},
      "down": {
        "kernel": get(b + "mlp.c_proj.weight", (f, d)),
        "bias": get(b + "mlp.c_proj.bias", (d,)),
      },
    }
  p["norm_final"] = norm("ln_f")
  return p


def head(has=None) -> str:
  """The name of an untied unembedding's weight, ``(vocab, d_model)``."""
  return "lm_head.weight"
