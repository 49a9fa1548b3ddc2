"""A linear regression whose exact loss is cheap: the sampler programs' tests share it (the
compile-count tests need the same shapes and dtypes in every call)."""

import jax
import jax.numpy as jnp
import numpy as np


def data(n=256, d=3):
  """``n`` Gaussian inputs in ``d`` dimensions and their noiseless targets ``x·(1, 2, ..., d)``."""
  x = jax.random.normal(jax.random.PRNGKey(0), (n, d))
  return {"x": x, "y": x @ jnp.arange(1.0, d + 1.0)}


def loss(params, batch):
  """The batch's mean of :func:`per_sample`."""
  return 0.5 * jnp.mean((batch["x"] @ params["w"] - batch["y"]) ** 2)


def per_sample(params, batch):
  """Each sample's squared error, halved."""
  return 0.5 * (batch["x"] @ params["w"] - batch["y"]) ** 2


def w_star(value):
  """A w* of the same shape and dtype as every other (a weakly typed one would be another
  program)."""
  return {"w": jnp.asarray(np.full(3, value, np.float32))}
