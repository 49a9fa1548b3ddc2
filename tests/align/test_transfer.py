import jax
import numpy as np
import pytest

from mechjax.align.procrustes import orthogonal_procrustes
from mechjax.align.procrustes import split_half_agreement
from mechjax.align.transfer import diff_of_means
from mechjax.align.transfer import explained_variance
from mechjax.align.transfer import measure_alignment
from mechjax.align.transfer import rotate_vector
from mechjax.align.transfer import sae_transfer
from mechjax.align.transfer import steering_transfer
from mechjax.align.transfer import transfer_reconstruct
from mechjax.models.sae import SAE
from mechjax.models.sites import residual_sites
from mechjax.models.sites import steer_at

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


def test_measure_alignment_recovers_a_planted_similarity_map():
  rng = np.random.default_rng(3)
  d = 8
  x = rng.normal(size=(600, d)) * np.linspace(0.5, 2.0, d)
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(2), d), x.dtype)
  y = 2.0 * x @ q + 5.0
  fit, n = measure_alignment(x[:400], y[:400], x[400:], y[400:], center=True, scale=True)
  np.testing.assert_allclose(fit.R, q, atol=1e-4)
  np.testing.assert_allclose(fit.scale, 2.0, rtol=1e-4)
  assert int(n["cross_covariance_rank"]) == d and 0 < float(n["cross_covariance_condition"]) <= 1
  assert float(n["rotation_split_half_agreement"]) > 0.9999
  assert float(n["aligned_ev_fit_batch"]) > 0.9999 and float(n["aligned_ev_held_out"]) > 0.9999
  assert float(n["identity_ev_held_out"]) < 0  # without the map the bases do not match
  assert float(n["rotation_only_ev_held_out"]) < 0.9  # nor without its scale
  # Uncentred, the offset is not part of the map; without scale=True there is no such number.
  _, raw = measure_alignment(x[:400], y[:400], x[400:], y[400:])
  assert float(raw["aligned_ev_held_out"]) < 0.99 and "rotation_only_ev_held_out" not in raw


def test_split_half_agreement_says_whether_the_data_fix_the_rotation():
  rng = np.random.default_rng(4)
  x = rng.normal(size=(800, 32))
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(5), 32), x.dtype)
  assert float(split_half_agreement(x, x @ q + 0.01 * rng.normal(size=x.shape))) > 0.999
  # Independent activations fix nothing: the halves' rotations are unrelated (E tr(R₁ᵀR₂) = 0).
  assert abs(float(split_half_agreement(x, rng.normal(size=x.shape)))) < 0.5


def test_steering_transfer_moves_the_source_vector_into_the_target_frame():
  rng = np.random.default_rng(6)
  v_src = rng.normal(size=8)
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(7), 8), v_src.dtype)
  v_tgt = 3.0 * v_src @ q
  vectors, cosines = steering_transfer(v_src, v_tgt, q, rng.normal(size=8), scale=3.0)
  np.testing.assert_allclose(vectors["aligned"], v_tgt, rtol=1e-5)
  np.testing.assert_allclose(vectors["native"], v_tgt)
  np.testing.assert_allclose(vectors["raw"], v_src)
  np.testing.assert_allclose(np.linalg.norm(vectors["random"]), np.linalg.norm(v_tgt), rtol=1e-5)
  np.testing.assert_allclose(cosines["steer_cos_aligned"], 1.0, rtol=1e-5)
  cos_raw = v_src @ v_tgt / (np.linalg.norm(v_src) * np.linalg.norm(v_tgt))
  np.testing.assert_allclose(cosines["steer_cos_raw"], cos_raw, rtol=1e-4, atol=1e-6)


def test_residual_sites_and_steering_at_one_site():
  names = ["resid_pre_0", "attn_out_0", "resid_mid_0", "mlp_out_0", "resid_post_0"]
  names += ["resid_pre_1", "attn_out_1", "resid_mid_1", "mlp_out_1", "resid_post_1", "final_norm"]
  expected = ["resid_pre_0", "resid_mid_0", "resid_post_0", "resid_mid_1", "resid_post_1"]
  assert residual_sites(names) == expected
  v = np.arange(1.0, 4.0)
  steer = jax.jit(lambda i: steer_at(["a", "b", "c"], i, v))(1)  # one program for every site
  np.testing.assert_array_equal(steer["b"], v)
  np.testing.assert_array_equal(steer["a"], 0.0 * v)
  np.testing.assert_array_equal(steer["c"], 0.0 * v)


def test_sae_transfer_through_the_planted_map_reaches_the_ceiling():
  rng = np.random.default_rng(8)
  x_src = rng.normal(size=(300, 8)) * (rng.random((300, 8)) < 0.3)  # sparse in the source basis
  q = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(9), 8), x_src.dtype)
  x_tgt = 2.0 * x_src @ q  # the target: the source's stream rotated and scaled
  eye = np.eye(8)  # an SAE whose dictionary is the source's coordinate axes, ±
  w = {"W_enc": np.hstack([eye, -eye]), "b_enc": np.zeros(16), "W_dec": np.vstack([eye, -eye])}
  src = {"params": {**w, "b_dec": np.zeros(8)}}
  tgt = {"params": {"W_enc": q.T @ w["W_enc"], "b_enc": w["b_enc"], "W_dec": w["W_dec"] @ q}}
  tgt["params"]["b_dec"] = np.zeros(8)  # the same SAE in the target's frame
  q_random = np.asarray(jax.random.orthogonal(jax.random.PRNGKey(1), 8), x_src.dtype)
  model = SAE(16, top_k=3)
  out = sae_transfer(model, (src, 1.5), (tgt, 3.0), x_src, x_tgt, q, q_random, scale=2.0)
  assert float(out["within"]) > 0.9
  np.testing.assert_allclose(out["sae_ev_aligned"], out["within"], atol=1e-4)
  assert float(out["sae_ev_raw"]) < float(out["within"]) - 0.1  # the target's basis is not sparse
  np.testing.assert_allclose(out["decoder_max_cos_aligned"], 1.0, atol=1e-5)
  assert float(out["decoder_max_cos_raw"]) < 0.99
  assert float(out["decoder_max_cos_random_rotation"]) < 0.99
  assert 0 < float(out["live_fraction"]) <= 1
