import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mechjax.align.transfer import explained_variance
from mechjax.models.sae import SAE
from mechjax.models.sae import decoder
from mechjax.models.sae import kth_largest
from mechjax.models.sae import max_cosine
from mechjax.models.sae import sae_loss
from mechjax.train import loop
from mechjax.train.sae import train_saes

D, M, TRUE = 16, 32, 12


def _true_dictionary():
  w = jax.random.normal(jax.random.PRNGKey(42), (TRUE, D))
  return w / jnp.linalg.norm(w, axis=1, keepdims=True)


def _sparse_batch(key, n):
  k_on, k_mag = jax.random.split(key)
  on = jax.random.uniform(k_on, (n, TRUE)) < 2.0 / TRUE
  return (on * jax.random.uniform(k_mag, (n, TRUE), minval=0.5, maxval=1.5)) @ _true_dictionary()


@pytest.mark.slow
@pytest.mark.parametrize("top_k", [None, 3])
def test_sae_recovers_a_planted_sparse_dictionary(tmp_path, top_k):
  model = SAE(M, top_k=top_k)
  problem = loop.Problem(
    init=lambda key: model.init(key, jnp.zeros((1, D))),
    loss=lambda p, key: sae_loss(model, p, _sparse_batch(key, 256), l1=3e-3),
  )
  result = loop.train(
    problem,
    optax.adam(1e-2),
    keys=loop.seed_keys(0, 1),
    steps=1500,
    workdir=tmp_path,
    log_every=500,
    checkpoint_every=1500,
    progress=False,
  )
  params = jax.tree.map(lambda a: a[0], result.state["params"])
  x = _sparse_batch(jax.random.PRNGKey(7), 2048)
  x_hat, f = model.apply(params, x)
  assert float(explained_variance(x, x_hat)) > 0.9
  cos = np.abs(
    np.asarray(_true_dictionary() @ decoder(params).T)
  )  # true features x learned latents
  assert np.mean(cos.max(axis=1) > 0.9) > 0.8  # most true features have a learned latent
  if top_k is not None:
    assert int(jnp.max(jnp.sum(f > 0, axis=-1))) <= top_k


def test_decoder_rows_have_unit_norm_whatever_is_stored():
  model = SAE(8)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
  params = jax.tree_util.tree_map_with_path(
    lambda p, a: 5.0 * a if "W_dec" in str(p) else a, params
  )
  np.testing.assert_allclose(jnp.linalg.norm(decoder(params), axis=1), 1.0, rtol=1e-6)
  with pytest.raises(ValueError, match="top_k must be"):
    SAE(4, top_k=5).init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))


@pytest.mark.parametrize("k", [1, 3, 8, 40])
def test_kth_largest_matches_lax_top_k_including_ties(k):
  f = jax.nn.relu(jax.random.normal(jax.random.PRNGKey(0), (5, 64)))
  f = f.at[0, :10].set(2.0)  # a run of ties at the top of row 0
  expected = jax.lax.top_k(f, k)[0][..., -1:]
  np.testing.assert_array_equal(kth_largest(f, k, iterative=True), expected)
  np.testing.assert_array_equal(kth_largest(f, k), expected)


def test_max_cosine_scores_the_live_rows_only():
  dec = np.asarray(_true_dictionary())
  live = np.ones(TRUE, bool)
  np.testing.assert_allclose(max_cosine(dec, dec, live, live), 1.0, rtol=1e-6)
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(3), D))
  assert float(max_cosine(dec @ q, dec, live, live)) < 0.9
  # A dead row of the second dictionary is no match, and dead rows of the first are not scored.
  dead_b = live.copy()
  dead_b[0] = False
  assert float(max_cosine(dec[:1], dec, live[:1], dead_b)) < 0.99
  np.testing.assert_allclose(max_cosine(dec, dec @ q, live & ~live, live), 0.0)


def test_train_saes_trains_one_sae_per_buffer_in_one_program():
  keys = jax.random.split(jax.random.PRNGKey(8), 2)
  buffers = jnp.stack([_sparse_batch(keys[0], 512), 3.0 * _sparse_batch(keys[1], 512)])
  model = SAE(M, top_k=3)
  params, mse = train_saes(model, buffers, jax.random.PRNGKey(9), steps=300, batch_size=64, lr=1e-2)
  assert mse.shape == (2,) and jax.tree.leaves(params)[0].shape[0] == 2
  for m in range(2):
    one = jax.tree.map(lambda a: a[m], params)
    ev = explained_variance(buffers[m], model.apply(one, buffers[m])[0])
    assert float(ev) > 0.8, (m, float(ev))
