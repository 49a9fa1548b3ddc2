"""The sampling workload of :mod:`benchmarks.sampler_memory`, :mod:`benchmarks.noise_prng`,
:mod:`benchmarks.stream_throughput` and :mod:`benchmarks.ynn_memory`: an attention-only transformer
(2 layers, ``d_model`` 64, 4 heads, vocabulary 64, sequences of 16: 42,176 parameters, random
weights), 4,096 sequences of :mod:`mechjax.data.repeats`, and the sampler settings they share."""

VOCAB, LENGTH, N = 64, 16, 4096
SGLD = dict(step_size=1e-4, localization=100.0, batch_size=32)  # the SGLDSettings every one uses


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


def token_losses(net):
  """``(params, tokens) -> (sequences, positions)`` next-token losses of ``net``."""
  from mechjax.models import transformer

  return lambda p, t: transformer.next_token_losses(net, p, t)


def mean_loss(net):
  """``(params, tokens) -> scalar``: the mean of :func:`token_losses`, the SGLD loss."""
  import jax.numpy as jnp

  per_token = token_losses(net)
  return lambda p, t: jnp.mean(per_token(p, t))
