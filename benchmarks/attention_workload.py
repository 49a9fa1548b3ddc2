"""The sampling workload of :mod:`benchmarks.sampler_memory` and :mod:`benchmarks.noise_prng`: an
attention-only transformer (2 layers, ``d_model`` 64, 4 heads, vocabulary 64, sequences of 16:
42,176 parameters, random weights) and 4,096 sequences of :mod:`mechjax.data.repeats`."""

VOCAB, LENGTH, N = 64, 16, 4096


def inputs():
  """``(net, params, tokens)``: the transformer, its weights (key 0) and the sequences (key 1)."""
  import jax
  import jax.numpy as jnp

  from mechjax.data import repeats
  from mechjax.models import transformer

  net = transformer.attention_only(VOCAB, LENGTH, d_model=64, num_layers=2, num_heads=4)
  params = net.init(jax.random.key(0), jnp.zeros((1, LENGTH), jnp.int32))
  tokens = repeats.sample(jax.random.key(1), N, LENGTH, VOCAB, 0.5)["tokens"]
  return net, params, tokens
