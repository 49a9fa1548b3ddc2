"""The grid of configs on which the loader is checked against transformers: each accepted option
of each family, a few at a time, in one-layer models small enough to commit.

``GRID`` maps a name to ``(transformers config class, its keyword arguments)``; it needs neither
torch nor transformers. ``make_checkpoints.py`` builds each as ``checkpoints/grid/<name>/`` with
transformers' logits and sites, and ``test_loader.py`` compares the loader with them (and, where
torch is installed, with a live transformers model of the same config).

What the grid spans:
  - GPT-NeoX: rotary dimensions ``int(head · rotary_pct)`` odd (1, 3, 5) and even (2, 6, 12), the
    parallel and the sequential residual, tied and untied heads, attention biases on and off, and
    a config with no rotary key at all (transformers' default fraction, 0.25);
  - Llama: grouped-query ratios 4:1, 2:1, 1:1 and 6:3, a ``head_dim`` that is not
    ``hidden_size / heads``, attention and MLP biases, tied and untied heads;
  - Qwen2: grouped-query ratios with its query/key/value biases, tied and untied;
  - GPT-2: tied and untied heads, an ``n_inner`` of its own and each activation it is saved with.
"""

from __future__ import annotations

VOCAB = 32
SEQ = 8
COMMON = dict(vocab_size=VOCAB, num_hidden_layers=1, max_position_embeddings=SEQ, bos_token_id=0)
COMMON_EOS = dict(COMMON, eos_token_id=0)


def neox(heads, rotary_pct, parallel, tied, bias=True, d=24):
  kwargs = dict(
    COMMON_EOS,
    hidden_size=d,
    num_attention_heads=heads,
    intermediate_size=40,
    use_parallel_residual=parallel,
    tie_word_embeddings=tied,
    attention_bias=bias,
  )
  if rotary_pct is not None:
    kwargs["rotary_pct"] = rotary_pct
  return "GPTNeoXConfig", kwargs


def llama(heads, kv, tied, attention_bias=False, mlp_bias=False, head_dim=None, family="Llama"):
  kwargs = dict(
    COMMON_EOS,
    hidden_size=24,
    num_attention_heads=heads,
    num_key_value_heads=kv,
    intermediate_size=40,
    tie_word_embeddings=tied,
    rope_theta=500.0,
  )
  if family == "Llama":
    kwargs.update(attention_bias=attention_bias, mlp_bias=mlp_bias)
  if head_dim is not None:
    kwargs["head_dim"] = head_dim
  return f"{family}Config", kwargs


def gpt2(tied, activation="gelu_new", n_inner=None):
  kwargs = dict(
    vocab_size=VOCAB,
    n_layer=1,
    n_positions=SEQ,
    n_embd=24,
    n_head=4,
    n_inner=n_inner,
    activation_function=activation,
    tie_word_embeddings=tied,
    resid_pdrop=0,
    embd_pdrop=0,
    attn_pdrop=0,
    bos_token_id=0,
    eos_token_id=0,
  )
  return "GPT2Config", kwargs


GRID = {
  # head 12: rotary 3 (odd), 1 (odd), 12 (whole head)
  "neox_h2_rot3_parallel_untied": neox(2, 0.25, True, False),
  "neox_h2_rot1_sequential_tied": neox(2, 0.125, False, True),
  "neox_h2_rot12_parallel_nobias": neox(2, 1.0, True, False, bias=False),
  # head 6: rotary 3 (odd), 2 (even); head 8: rotary 6 (even), 5 (odd)
  "neox_h4_rot3_sequential_untied": neox(4, 0.5, False, False),
  "neox_h4_rot2_parallel_tied": neox(4, 0.34, True, True),
  "neox_h3_rot6_sequential_nobias": neox(3, 0.75, False, False, bias=False),
  "neox_h3_rot5_parallel_untied": neox(3, 0.625, True, False),
  # no rotary key: transformers' default fraction 0.25 of a head of 8 (rotary 2)
  "neox_h3_default_rotary": neox(3, None, True, False),
  "llama_mqa_untied": llama(4, 1, False),
  "llama_gqa2_tied_attention_bias": llama(4, 2, True, attention_bias=True),
  "llama_mha_mlp_bias": llama(4, 4, False, mlp_bias=True),
  "llama_h6_kv3": llama(6, 3, False),
  "llama_head_dim_8": llama(4, 2, False, head_dim=8),
  "qwen2_mqa_untied": llama(4, 1, False, family="Qwen2"),
  "qwen2_h6_kv2_tied": llama(6, 2, True, family="Qwen2"),
  "gpt2_tied_relu": gpt2(True, "relu"),
  "gpt2_untied_gelu_inner": gpt2(False, "gelu", n_inner=40),
}
