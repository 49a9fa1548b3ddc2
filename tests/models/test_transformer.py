import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mechjax.align.haar import haar_orthogonal
from mechjax.data import dyck
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import attention_only
from mechjax.models.transformer import fold_rmsnorm_gains
from mechjax.models.transformer import head_masks
from mechjax.models.transformer import next_token_losses
from mechjax.models.transformer import rotate_residual
from mechjax.models.transformer import site_names
from mechjax.train import loop

KEY = jax.random.PRNGKey(0)
SMALL = dict(
  vocab_size=dyck.vocab_size(3),
  heads=(("token", 8), ("depth", 5)),
  d_model=16,
  num_layers=2,
  num_heads=2,
  d_mlp=32,
  max_len=16,
)


@pytest.mark.slow
@pytest.mark.parametrize("attn_only", [False, True])
def test_sites_shapes_and_causality(attn_only):
  model = Transformer(**SMALL, attn_only=attn_only)
  tokens = dyck.sample_dyck(KEY, 3, length=16, max_depth=4)["tokens"]
  params = model.init(KEY, tokens)
  out, sites = model.apply(params, tokens, return_sites=True)
  assert out["token"].shape == (3, 16, 8) and out["depth"].shape == (3, 16, 5)
  assert sorted(sites) == sorted(f"resid_{s}_{l}" for s in ("pre", "mid", "post") for l in range(2))
  assert all(v.shape == (3, 16, 16) for v in sites.values())
  changed = tokens.at[:, 10].set(2)  # changing token 10 must not change positions < 10
  out2 = model.apply(params, changed)
  np.testing.assert_allclose(out2["token"][:, :10], out["token"][:, :10], atol=1e-5)
  assert float(jnp.max(jnp.abs(out2["token"][:, 10:] - out["token"][:, 10:]))) > 1e-4


@pytest.mark.slow
def test_folding_rmsnorm_gains_keeps_the_function():
  model = Transformer(**SMALL)
  tokens = dyck.sample_dyck(KEY, 4, length=16, max_depth=4)["tokens"]
  params = model.init(KEY, tokens)
  params = jax.tree_util.tree_map_with_path(  # random gains, so folding has something to do
    lambda path, a: (
      a * (1 + 0.5 * jax.random.normal(jax.random.PRNGKey(len(str(path))), a.shape))
      if "gain" in str(path)
      else a
    ),
    params,
  )
  folded = fold_rmsnorm_gains(params, num_layers=2)
  np.testing.assert_allclose(
    model.apply(folded, tokens)["token"], model.apply(params, tokens)["token"], atol=1e-4
  )
  assert all(
    np.allclose(v["gain"], 1.0) for k, v in folded["params"].items() if k.startswith("norm")
  )


@pytest.mark.slow
def test_trains_on_dyck_depth_with_the_core(tmp_path):
  model = Transformer(**SMALL)

  def init(key):
    return model.init(key, jnp.zeros((1, 16), jnp.int32))

  def loss(params, key):
    batch = dyck.sample_dyck(key, 32, length=16, max_depth=4, p_corrupt=0.0)
    logits = model.apply(params, batch["tokens"])["depth"]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["depth"])
    return jnp.mean(ce), {"depth_acc": jnp.mean(jnp.argmax(logits, -1) == batch["depth"])}

  result = loop.train(
    loop.Problem(init, loss),
    optax.adam(3e-3),
    keys=loop.seed_keys(0, 2),
    steps=300,
    workdir=tmp_path,
    log_every=100,
    checkpoint_every=300,
    progress=False,
  )
  first, last = result.history[0], result.history[-1]
  assert min(last["train_depth_acc"]) > 0.9 > max(first["train_depth_acc"])


def _random_gains(params):
  return jax.tree_util.tree_map_with_path(
    lambda path, a: (
      a * (1 + 0.5 * jax.random.normal(jax.random.PRNGKey(len(str(path))), a.shape))
      if "gain" in str(path)
      else a
    ),
    params,
  )


@pytest.mark.slow
@pytest.mark.parametrize("attn_only", [False, True])
def test_rotating_the_residual_stream_is_an_exact_symmetry(attn_only):
  model = Transformer(**SMALL, attn_only=attn_only)
  tokens = dyck.sample_dyck(KEY, 4, length=16, max_depth=4)["tokens"]
  params = _random_gains(model.init(KEY, tokens))
  q = haar_orthogonal(jax.random.PRNGKey(3), SMALL["d_model"])
  _, rotated = rotate_residual(model, params, q)
  out, sites = model.apply(params, tokens, return_sites=True)
  out_r, sites_r = model.apply(rotated, tokens, return_sites=True)
  for head in out:
    np.testing.assert_allclose(out_r[head], out[head], atol=2e-4)
  for name in sites:
    np.testing.assert_allclose(sites_r[name], sites[name] @ q, atol=2e-4)
  # Without folding the (non-uniform) gains first, rotating the weights would change the function.
  naive = jax.tree.map(lambda a: a, rotated)
  naive["params"]["norm_final"] = params["params"]["norm_final"]
  assert float(jnp.max(jnp.abs(model.apply(naive, tokens)["token"] - out["token"]))) > 1e-2


@pytest.mark.slow
def test_steering_adds_the_vector_at_its_site_and_only_downstream():
  model = Transformer(**SMALL)
  tokens = dyck.sample_dyck(KEY, 3, length=16, max_depth=4)["tokens"]
  params = model.init(KEY, tokens)
  out, sites = model.apply(params, tokens, return_sites=True)
  v = jax.random.normal(jax.random.PRNGKey(1), (SMALL["d_model"],))
  out_s, sites_s = model.apply(params, tokens, return_sites=True, steer={"resid_mid_1": v})
  order = site_names(model)
  for name in order[: order.index("resid_mid_1")]:
    np.testing.assert_array_equal(sites_s[name], sites[name])
  np.testing.assert_allclose(
    sites_s["resid_mid_1"], sites["resid_mid_1"] + v[None, None], atol=1e-5
  )
  assert float(jnp.max(jnp.abs(out_s["token"] - out["token"]))) > 1e-3
  zero = model.apply(params, tokens, steer={"resid_post_1": jnp.zeros(SMALL["d_model"])})
  np.testing.assert_array_equal(zero["token"], out["token"])
  with pytest.raises(ValueError, match="cannot steer at"):
    model.apply(params, tokens, steer={"resid_post_7": v})


@pytest.mark.slow
def test_next_token_losses_are_the_cross_entropy_of_each_next_token():
  model = Transformer(vocab_size=8, heads=(("token", 8),), d_model=8, num_heads=2, max_len=8)
  tokens = jax.random.randint(KEY, (3, 8), 0, 8)
  params = model.init(KEY, tokens)
  losses = next_token_losses(model, params, tokens)
  assert losses.shape == (3, 7)
  log_p = jax.nn.log_softmax(model.apply(params, tokens)["token"], -1)
  for b, t in [(0, 0), (1, 3), (2, 6)]:  # position t predicts token t + 1
    np.testing.assert_allclose(losses[b, t], -log_p[b, t, tokens[b, t + 1]], rtol=1e-5)


@pytest.mark.slow
def test_head_masks_select_exactly_one_head():
  model = attention_only(vocab=8, length=8, d_model=8, num_layers=2, num_heads=2)
  assert model.attn_only and model.heads == (("token", 8),) and model.max_len == 8
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))
  masks = head_masks(params, num_layers=2, num_heads=2)
  assert list(masks) == ["L0H0", "L0H1", "L1H0", "L1H1"]
  total = jax.tree.map(lambda *m: sum(m), *masks.values())
  attn = total["params"]["attn_1"]
  # The heads partition every attention weight (each entry in exactly one mask) and touch nothing
  # else.
  for name in ("query", "key", "value", "out"):
    assert np.all(np.asarray(attn[name]["kernel"]) == 1)
  assert np.all(np.asarray(total["params"]["embed"]["embedding"]) == 0)
  m = masks["L1H0"]["params"]["attn_1"]
  assert np.all(np.asarray(m["query"]["kernel"])[:, 0] == 1) and np.all(
    np.asarray(m["query"]["kernel"])[:, 1] == 0
  )
  assert np.all(np.asarray(m["out"]["kernel"])[0] == 1) and np.all(
    np.asarray(m["out"]["kernel"])[1] == 0
  )
  assert np.all(np.asarray(masks["L0H0"]["params"]["attn_1"]["query"]["kernel"]) == 0)
