"""Micro-batches: each step's minibatch in pieces under a scan gives the whole batch's draws."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax import config
from mechjax.slt import langevin
from mechjax.slt import llc as llc_lib
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from tests.helpers import expect_unmixed

N, D = 512, 3


def _data():
  k_x, k_e = jax.random.split(jax.random.key(0))
  x = jax.random.normal(k_x, (N, D))
  y = jnp.tanh(x @ jnp.arange(1.0, D + 1)) + 0.1 * jax.random.normal(k_e, (N,))
  return {"x": x, "y": y}


SEEN = []  # the leading size of every batch the loss is traced on


def _loss(params, batch):  # a small tanh network: the gradient is not linear in the batch
  SEEN.append(batch["x"].shape[0])
  pred = jnp.tanh(batch["x"] @ params["a"]) @ params["b"]
  return 0.5 * jnp.mean((pred - batch["y"]) ** 2)


W = {"a": 0.5 * jnp.eye(D), "b": jnp.ones(D) / D}


def test_pieces_average_to_the_whole_batch_and_only_pieces_are_traced():
  batch = jax.tree.map(lambda a: a[:32], _data())
  SEEN.clear()
  whole = langevin.batch_value_and_grad(_loss, W, batch)
  assert SEEN == [32]
  SEEN.clear()
  pieces = langevin.batch_value_and_grad(_loss, W, batch, 8)
  assert set(SEEN) == {8}  # the loss never sees the whole batch
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(pieces)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  loss = langevin.batch_loss(_loss, W, batch, 8)
  np.testing.assert_allclose(loss, whole[0], rtol=1e-6)


@expect_unmixed
@pytest.mark.parametrize("star_loss", ["per_step", "per_sample"])
@pytest.mark.slow
def test_micro_batched_chains_are_the_whole_batch_chains(star_loss):
  run = lambda micro: llc_lib.estimate_llc(  # noqa: E731
    _loss,
    W,
    _data(),
    key=jax.random.key(1),
    step_size=1e-3,
    localization=10.0,
    batch_size=32,
    num_chains=2,
    num_draws=40,
    mala=False,
    star_loss=star_loss,
    microbatch_size=micro,
  )
  whole = run(None)
  SEEN.clear()
  pieces = run(4)
  assert 4 in SEEN  # the chains' steps traced the loss on pieces
  # Same key, same batches, same noise: only the order of the sums differs.
  np.testing.assert_allclose(pieces.loss_trace, whole.loss_trace, rtol=1e-4)
  assert pieces.llc_mean == pytest.approx(whole.llc_mean, rel=1e-3)
  # nβ is n / ln n of the data either way.
  nbeta = default_nbeta(N)
  assert pieces.diagnostics["nbeta"] == whole.diagnostics["nbeta"] == pytest.approx(nbeta)


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused():
  with pytest.raises(config.ConfigError, match="microbatch_size=5 must divide batch_size=32"):
    SGLDSettings(step_size=1e-3, localization=1.0, batch_size=32, microbatch_size=5)
  with pytest.raises(config.ConfigError, match="microbatch_size=0"):
    SGLDSettings(step_size=1e-3, localization=1.0, batch_size=32, microbatch_size=0)
