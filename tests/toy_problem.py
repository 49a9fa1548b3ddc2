"""A noisy linear regression in the training core's terms, for the tests that start their own JAX
processes (they add ``tests/`` to ``sys.path`` and import this)."""

import jax
import jax.numpy as jnp

from mechjax.train import loop

W_TRUE = jnp.arange(1.0, 5.0)


def linear_problem() -> loop.Problem:
  """Regression on fresh data from each step's key; ``evaluate`` reports the distance to the true
  weights."""

  def loss(params, key):
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (8, 4))
    y = x @ W_TRUE + 0.1 * jax.random.normal(kn, (8,))
    return jnp.mean((x @ params["w"] - y) ** 2), {}

  return loop.Problem(
    lambda k: {"w": 0.1 * jax.random.normal(k, (4,))},
    loss,
    lambda p, k: {"err": jnp.linalg.norm(p["w"] - W_TRUE)},
  )
