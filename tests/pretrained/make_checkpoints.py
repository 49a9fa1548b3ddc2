"""Builds the tiny random-initialised Hugging Face checkpoints in ``checkpoints/`` and what
transformers computes on them, for tests/pretrained (which need neither torch nor transformers).

Run it where torch and transformers are installed (the ``bench`` extra, or a separate venv:
``pip install torch==2.13.0+cpu transformers``), from the repository root::

    python -m tests.pretrained.make_checkpoints

Each ``checkpoints/<name>/`` gets ``config.json`` and ``model.safetensors`` (``save_pretrained``)
and ``expected.npz``: the token windows, the logits, every residual site (read with forward hooks,
and ``output_hidden_states`` for the final norm), and the gradient of the mean next-token loss
with respect to a few weights, under their Hugging Face names (``grad/<key>``).

``checkpoints/grid/<name>/`` holds the same for each config of :data:`tests.pretrained.grid.GRID`
(one-layer models; the logits and sites, no gradients).
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch
import transformers

from tests.pretrained import grid

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints")
VOCAB = 61
COMMON = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)

CONFIGS = {
  "gpt2": transformers.GPT2Config(
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_positions=24,
    resid_pdrop=0,
    embd_pdrop=0,
    attn_pdrop=0,
    **COMMON,
  ),
  # Partial rotary (a quarter of each 8-wide head) and the parallel residual.
  "gpt_neox": transformers.GPTNeoXConfig(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=24,
    rotary_pct=0.25,
    rotary_emb_base=10000,
    use_parallel_residual=True,
    tie_word_embeddings=False,
    **COMMON,
  ),
  # The sequential residual, and its config.json rewritten in the hub's older keys (rotary_pct,
  # rotary_emb_base), as Pythia's checkpoints were saved.
  "gpt_neox_sequential": transformers.GPTNeoXConfig(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=24,
    rotary_pct=0.5,
    rotary_emb_base=500,
    use_parallel_residual=False,
    tie_word_embeddings=False,
    **COMMON,
  ),
  # Grouped-query attention: 4 query heads over 2 key/value heads; untied head.
  "llama_gqa": transformers.LlamaConfig(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=48,
    max_position_embeddings=24,
    rope_theta=1000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    **COMMON,
  ),
  # q/k/v biases, tied embeddings.
  "qwen2": transformers.Qwen2Config(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=48,
    max_position_embeddings=24,
    rope_theta=10000.0,
    tie_word_embeddings=True,
    **COMMON,
  ),
}

# A few weights per model whose loss gradients are checked.
GRAD_KEYS = {
  "gpt2": [
    "transformer.wte.weight",
    "transformer.h.0.attn.c_attn.weight",
    "transformer.h.1.mlp.c_proj.weight",
    "transformer.ln_f.bias",
  ],
  "gpt_neox": [
    "gpt_neox.embed_in.weight",
    "gpt_neox.layers.0.attention.query_key_value.weight",
    "gpt_neox.layers.1.mlp.dense_4h_to_h.weight",
    "lm_head.weight",
  ],
  "gpt_neox_sequential": [
    "gpt_neox.layers.0.attention.query_key_value.bias",
    "gpt_neox.layers.1.post_attention_layernorm.weight",
  ],
  "llama_gqa": [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.1.mlp.gate_proj.weight",
    "lm_head.weight",
  ],
  "qwen2": [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.bias",
    "model.layers.1.self_attn.o_proj.weight",
  ],
}


def blocks(model):
  base = getattr(model, "transformer", None) or getattr(model, "gpt_neox", None) or model.model
  layers = getattr(base, "h", None) or base.layers
  attn = lambda b: getattr(b, "attn", None) or getattr(b, "attention", None) or b.self_attn
  return layers, attn


def outputs(model, tokens, vocab):
  """transformers' logits, loss and every residual site on ``tokens`` (the loss's gradients are
  left on the parameters)."""
  captured = {}
  layers, attn_of = blocks(model)
  first = lambda out: out[0] if isinstance(out, tuple) else out
  hooks = []
  for l, block in enumerate(layers):
    for key, module in (
      ("resid_post", block),
      ("attn_out", attn_of(block)),
      ("mlp_out", block.mlp),
    ):
      hooks.append(
        module.register_forward_hook(
          lambda m, i, o, k=f"{key}_{l}": captured.__setitem__(k, first(o))
        )
      )
  ids = torch.tensor(tokens)
  out = model(ids, output_hidden_states=True)
  loss = torch.nn.functional.cross_entropy(
    out.logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1)
  )
  loss.backward()
  for h in hooks:
    h.remove()
  saved = {
    "tokens": tokens.astype(np.int32),
    "logits": out.logits.detach().numpy(),
    "loss": np.float32(loss.item()),
    "resid_pre_0": out.hidden_states[0].detach().numpy(),
    "final_norm": out.hidden_states[-1].detach().numpy(),
  }
  saved.update({f"site/{k}": v.detach().numpy() for k, v in captured.items()})
  return saved


def build(config, folder, scale=0.15):
  """A random model of ``config`` (weights perturbed by ``scale``, so that attention is far from
  uniform), saved to ``folder`` without its generation config."""
  torch.manual_seed(0)
  config.torch_dtype = "float32"
  model = transformers.AutoModelForCausalLM.from_config(config).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(scale * torch.randn_like(p))
  model.save_pretrained(folder, safe_serialization=True)
  os.remove(os.path.join(folder, "generation_config.json"))
  return model


def report(name, model, folder):
  size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
  print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, {size / 1e3:.0f} kB")
  return size


def rewrite(path, change):
  """Applies ``change`` to the dict of the JSON file ``path`` in place."""
  with open(path) as f:
    cfg = json.load(f)
  change(cfg)
  with open(path, "w") as f:
    json.dump(cfg, f, indent=2)


def old_rotary_keys(cfg):
  rope = cfg.pop("rope_parameters")
  cfg["rotary_pct"] = rope["partial_rotary_factor"]
  cfg["rotary_emb_base"] = rope["rope_theta"]


def main():
  for name, config in CONFIGS.items():
    folder = os.path.join(HERE, name)
    model = build(config, folder)
    if name == "gpt_neox_sequential":
      rewrite(os.path.join(folder, "config.json"), old_rotary_keys)
    tokens = np.random.default_rng(0).integers(0, VOCAB, size=(2, 12))
    saved = outputs(model, tokens, VOCAB)
    params = dict(model.named_parameters())
    if "lm_head.weight" in GRAD_KEYS[name] and "lm_head.weight" not in params:
      raise SystemExit(f"{name}: lm_head.weight is tied")
    saved.update({f"grad/{k}": params[k].grad.numpy() for k in GRAD_KEYS[name]})
    np.savez_compressed(os.path.join(folder, "expected.npz"), **saved)
    report(name, model, folder)
  total = 0
  for name, (cls, kwargs) in grid.GRID.items():
    folder = os.path.join(HERE, "grid", name)
    model = build(getattr(transformers, cls)(**kwargs), folder)
    if name == "neox_h3_default_rotary":  # a config.json with no rotary key at all
      rewrite(os.path.join(folder, "config.json"), lambda cfg: cfg.pop("rope_parameters"))
    tokens = np.random.default_rng(1).integers(0, grid.VOCAB, size=(1, grid.SEQ))
    saved = outputs(model, tokens, grid.VOCAB)
    np.savez_compressed(os.path.join(folder, "expected.npz"), **saved)
    total += report(f"grid/{name}", model, folder)
  print(f"grid: {len(grid.GRID)} checkpoints, {total / 1e3:.0f} kB")


if __name__ == "__main__":
  main()
