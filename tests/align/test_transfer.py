import jax
import numpy as np
import pytest

from mechjax.align.procrustes import orthogonal_procrustes
from mechjax.align.transfer import diff_of_means
from mechjax.align.transfer import explained_variance
from mechjax.align.transfer import rotate_vector
from mechjax.align.transfer import transfer_reconstruct

RNG = np.random.default_rng(0)


def test_explained_variance_definition():
  x = RNG.normal(size=(500, 4)) + np.array([0.0, 10.0, -5.0, 3.0])  # columns with different means
  np.testing.assert_allclose(explained_variance(x, x), 1.0)
  np.testing.assert_allclose(
    explained_variance(x, np.broadcast_to(x.mean(0), x.shape)), 0.0, atol=1e-6
  )
  noisy = x + 0.5 * RNG.normal(size=x.shape)
  per_col = float(explained_variance(x, noisy))
  global_ev = 1 - np.mean((x - noisy) ** 2) / np.var(
    x
  )  # one global mean: inflated by the column offsets
  np.testing.assert_allclose(per_col, 1 - 0.25, atol=0.03)
  assert global_ev > per_col + 0.1
  assert float(explained_variance(x, -x)) < 0
  with pytest.raises(ValueError, match="same shape"):
    explained_variance(x, x[:, :3])


def test_a_dictionary_transfers_through_the_fitted_rotation_and_not_without_it():
  d, k = 16, 6
  basis = np.linalg.qr(RNG.normal(size=(d, k)))[
    0
  ]  # the source model's features (a low-rank "dictionary")
  codes = RNG.normal(size=(2000, k))
  x_src = codes @ basis.T
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(0), d))
  x_tgt = x_src @ q  # the target model computes the same thing in a rotated basis
  reconstruct = lambda x: (x @ basis) @ basis.T  # encode/decode with the source dictionary
  fit, held_out = slice(0, 1000), slice(1000, 2000)  # fit R on one batch, evaluate on another
  with pytest.warns(
    RuntimeWarning, match="rank 6 < d = 16"
  ):  # the data span 6 dims: R is free on the rest
    r = orthogonal_procrustes(x_src[fit], x_tgt[fit])
  ev_rotated = float(
    explained_variance(x_tgt[held_out], transfer_reconstruct(reconstruct, x_tgt[held_out], r))
  )
  ev_raw = float(explained_variance(x_tgt[held_out], reconstruct(x_tgt[held_out])))
  assert ev_rotated > 0.999
  assert ev_raw < 0.7


def test_steering_vectors_rotate_with_the_model():
  x = RNG.normal(size=(400, 8))
  labels = (RNG.random(400) < 0.5).astype(np.int32)
  v = np.arange(8.0)
  x = x + labels[:, None] * v
  np.testing.assert_allclose(diff_of_means(x, labels), v, atol=0.3)
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(1), 8))
  np.testing.assert_allclose(
    rotate_vector(diff_of_means(x, labels), q), diff_of_means(x @ q, labels), atol=1e-4
  )
