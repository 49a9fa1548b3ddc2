"""A function-preserving change of residual basis of a loaded checkpoint, and Procrustes finding it
again (mechjax.models.pretrained.fold_norms, rotate_residual)."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.align import haar
from mechjax.align import procrustes
from mechjax.models import pretrained
from mechjax.slt import restriction

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints")
TOKENS = np.random.default_rng(3).integers(0, 61, (8, 20)).astype(np.int32)  # 160 rows > d = 32


def run(model, params):
  return jax.jit(lambda p, t: model.apply({"params": p}, t, return_sites=True))(params, TOKENS)


def rows(x):
  return np.asarray(x, np.float64).reshape(-1, x.shape[-1])


@pytest.mark.parametrize("name", ["llama_gqa", "gpt_neox", "gpt2"])
def test_a_planted_rotation_keeps_the_logits_and_procrustes_recovers_it(name):
  model, params = pretrained.load(os.path.join(HERE, name))
  d = model.arch.d_model
  layernorm = model.arch.norm == "layernorm"
  key = jax.random.key(7)
  if layernorm:
    r = np.asarray(haar.haar_orthogonal(key, d - 1))
    q = pretrained.mean_preserving(r)
  else:
    q = np.asarray(haar.haar_orthogonal(key, d))
  logits, sites = run(model, params)
  folded, folded_params = pretrained.fold_norms(model, params)
  folded_logits, folded_sites = run(folded, folded_params)
  rotated, rotated_params = pretrained.rotate_residual(model, params, q)
  rotated_logits, rotated_sites = run(rotated, rotated_params)
  # The function is unchanged, by folding and by rotating.
  assert float(jnp.max(jnp.abs(folded_logits - logits))) <= 1e-4
  assert float(jnp.max(jnp.abs(rotated_logits - logits))) <= 1e-4
  # A rotation that is not a symmetry does change it: the check can fail.
  if layernorm:
    with pytest.raises(ValueError, match="fixes the all-ones direction"):
      pretrained.rotate_residual(model, params, np.asarray(haar.haar_orthogonal(key, d)))
  site = f"resid_post_{model.arch.num_layers - 1}"
  x, y = rows(folded_sites[site]), rows(rotated_sites[site])
  np.testing.assert_allclose(x @ q, y, atol=1e-4)
  if layernorm:  # the folded stream is centred: the same point of the stream, less its mean
    raw = rows(sites[site])
    np.testing.assert_allclose(x, raw - raw.mean(axis=1, keepdims=True), atol=1e-4)
  if layernorm:
    with pytest.warns(RuntimeWarning, match="rank 31 < d = 32"):  # the all-ones direction is empty
      fit = np.asarray(procrustes.orthogonal_procrustes(jnp.asarray(x), jnp.asarray(y)))
    # On the mean-zero subspace, where the stream lives, the fit is the planted rotation.
    u = np.full(d, 1 / np.sqrt(d))
    complement = np.eye(d) - np.outer(u, u)
    assert np.linalg.norm(complement @ (fit - q)) <= 1e-3
  else:
    fit = np.asarray(procrustes.orthogonal_procrustes(jnp.asarray(x), jnp.asarray(y)))
    assert np.linalg.norm(fit - q) <= 1e-3
  # Far from the identity, as a Haar draw in d = 32 is: ‖R − I‖_F near √(2d) = 8.
  assert np.linalg.norm(q - np.eye(d)) > 6


def test_component_masks_select_exactly_one_heads_weights():
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"))
  masks = pretrained.component_masks(model, params)
  a = model.arch
  assert len(masks) == a.num_layers * (a.num_heads + 1)
  # Perturbing only head 3 of layer 1 changes what that head writes and nothing in layer 0.
  m = masks["attn_1.head_3"]
  bumped = jax.tree.map(lambda p, k: p + 0.5 * k, params, m)
  _, before = run(model, params)
  _, after = run(model, bumped)
  np.testing.assert_array_equal(before["resid_post_0"], after["resid_post_0"])
  assert float(jnp.max(jnp.abs(after["attn_out_1"] - before["attn_out_1"]))) > 1e-3
  count = sum(float(np.sum(x)) for x in jax.tree.leaves(m))
  hd, d = a.head_dim, a.d_model
  assert count == 4 * d * hd  # query and output slices of head 3, and its key/value head (1 of 2)
  kv = m["attn_1"]["key"]["kernel"]
  assert kv[:, 1].all() and not kv[:, 0].any()  # heads 2 and 3 read key/value head 1
  mlp = masks["mlp_0"]
  assert sum(float(np.sum(x)) for x in jax.tree.leaves(mlp)) == 3 * d * a.d_mlp
  # The restrictions a chain samples are these masks' boxes, built without a mask.
  for name, boxes in pretrained.component_boxes(model).items():
    r = restriction.from_boxes(params, boxes)
    assert r.num_sampled == sum(int(np.sum(x)) for x in jax.tree.leaves(masks[name])), name
    for built, masked in zip(jax.tree.leaves(r.mask(params)), jax.tree.leaves(masks[name])):
      np.testing.assert_array_equal(built, masked, err_msg=name)


def test_steering_a_site_moves_everything_downstream_only():
  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  v = np.zeros(model.arch.d_model, np.float32)
  v[0] = 3.0
  base = model.apply({"params": params}, TOKENS[:2], return_sites=True)[1]
  steered = model.apply(
    {"params": params}, TOKENS[:2], return_sites=True, steer={"resid_pre_1": v}
  )[1]
  np.testing.assert_array_equal(base["resid_post_0"], steered["resid_post_0"])
  np.testing.assert_allclose(steered["resid_pre_1"], np.asarray(base["resid_pre_1"]) + v, atol=1e-6)
  assert float(jnp.max(jnp.abs(steered["final_norm"] - base["final_norm"]))) > 1e-3
  with pytest.raises(ValueError, match="cannot steer at \\['resid_mid_0'\\]"):
    model.apply({"params": params}, TOKENS[:2], steer={"resid_mid_0": v})  # parallel: no mid
  patterns = pretrained.attention_patterns(model, params, TOKENS[:2])
  assert patterns.shape == (2, 2, 4, 20, 20)
  np.testing.assert_allclose(patterns.sum(-1), 1.0, atol=1e-5)
  assert float(jnp.max(jnp.triu(patterns, 1))) == 0.0  # causal


def test_restriction_strings_name_heads_groups_layers_and_unions():
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"))  # 4 heads read 2 kv heads
  a = model.arch
  named = pretrained.restriction_boxes(model, "l0h1, l1g1, l1 attn,l0 mlp, embed, unembed, all")
  assert list(named) == ["l0h1", "l1g1", "l1 attn", "l0 mlp", "embed", "unembed", "all"]
  assert named["all"] is None
  [head] = named["l0h1"]
  assert head == pretrained.component_boxes(model)["attn_0.head_1"]
  count = lambda name: restriction.from_boxes(params, *named[name]).num_sampled  # noqa: E731
  hd, d = a.head_dim, a.d_model
  assert count("l1g1") == 2 * 2 * d * hd + 2 * d * hd  # query and output of heads 2, 3; k, v of 1
  assert count("l1 attn") == sum(np.size(x) for x in jax.tree.leaves(params["attn_1"]))
  assert count("l0 mlp") == 3 * d * a.d_mlp
  assert count("embed") == a.vocab_size * d and count("unembed") == d * a.vocab_size
  # Neighbouring heads are one box; heads 0 and 2 are not, and are refused as one.
  pair = pretrained.restriction_boxes(model, "l0h0+l0h1")["l0h0+l0h1"]
  assert restriction.from_boxes(params, *pair).num_sampled == 2 * count("l0h1") - 2 * d * hd
  apart = pretrained.restriction_boxes(model, "l0h0+l0h2")["l0h0+l0h2"]
  with pytest.raises(restriction.NotABox, match="attn_0/query/kernel"):
    restriction.from_boxes(params, *apart)
  for bad, says in (
    ("l0h4", "heads 0–3"),
    ("l2h0", "layers 0–1"),
    ("l0g2", "key/value groups 0–1"),
    ("head3", "unknown restriction 'head3'"),
    ("l0h1,,l0h2", "empty restriction"),
  ):
    with pytest.raises(ValueError, match=says):
      pretrained.restriction_boxes(model, bad)
  tied, _ = pretrained.load(os.path.join(HERE, "qwen2"))
  with pytest.raises(ValueError, match="ties its unembedding"):
    pretrained.restriction_boxes(tied, "unembed")
  gpt2, _ = pretrained.load(os.path.join(HERE, "gpt2"))
  assert pretrained.restriction_boxes(gpt2, "embed")["embed"] == [
    {"embed": None, "pos_embed": None}
  ]
