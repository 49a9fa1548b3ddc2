"""The Pythia architectures the benchmarks build with random weights (nothing is downloaded): the
Hugging Face ``GPTNeoXConfig`` fields of each checkpoint, and the ``DecoderLM`` mechjax makes of
them."""

GPT_NEOX = dict(
  vocab_size=50304,
  hidden_act="gelu",
  rotary_pct=0.25,
  rotary_emb_base=10000,
  max_position_embeddings=2048,
  use_parallel_residual=True,
  tie_word_embeddings=False,
  layer_norm_eps=1e-5,
)
PYTHIA_14M = dict(
  GPT_NEOX, hidden_size=128, num_hidden_layers=6, num_attention_heads=4, intermediate_size=512
)
PYTHIA_410M = dict(
  GPT_NEOX, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
)
PYTHIA_1_4B = dict(
  GPT_NEOX, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192
)


def model(config: dict, **changes):
  """The :class:`mechjax.models.pretrained.DecoderLM` of a config above (with ``changes``, e.g.
  ``num_hidden_layers=2``), as ``pretrained.load`` would build it from that ``config.json``."""
  from mechjax.models import pretrained

  cfg = dict(config, architectures=["GPTNeoXForCausalLM"], **changes)
  return pretrained.DecoderLM(pretrained.arch_from_config(cfg))
