"""A restriction's chains carry its boxes only and sample what the 0/1 mask of its boxes samples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax import slt
from mechjax.slt import chain as chain_lib
from mechjax.slt import components
from mechjax.slt import restriction as restriction_lib
from mechjax.slt import sgld
from mechjax.slt.settings import SGLDSettings
from tests.helpers import MeanDraw
from tests.helpers import expect_unmixed


def _problem():
  k = jax.random.split(jax.random.key(0), 3)
  params = {
    "b1": jnp.zeros(5),
    "step": jnp.array(3),  # an integer leaf: never sampled
    "w1": jax.random.normal(k[0], (4, 3, 5)) / 3,  # (inputs, heads, head width)
    "w2": jax.random.normal(k[1], (5, 2)),
  }
  x = jax.random.normal(k[2], (64, 4))
  data = {"x": x, "y": jnp.tanh(x[:, :2])}
  return params, data


def _per_sample(p, b):
  h = jnp.tanh(jnp.einsum("ni,ijk->nk", b["x"], p["w1"]) + p["b1"][None])
  return jnp.mean((h @ p["w2"] - b["y"]) ** 2, axis=-1)


def _loss(p, b):
  return jnp.mean(_per_sample(p, b))


# The LLC and χ calls' sampler: short chains, unmixed (the tests compare two ways of sampling).
SAMPLER = dict(num_chains=2, num_draws=20, step_size=1e-4, localization=100.0, batch_size=16)


def _head_mask(params, head=1):
  """Head ``head``'s slice of w1 and all of b1: two boxes."""
  mask = jax.tree.map(lambda a: np.zeros(np.shape(a), np.float32), params)
  mask["w1"][:, head] = 1
  mask["b1"][:] = 1
  return mask


def test_from_mask_finds_the_boxes_and_refuses_what_is_not_one():
  params, _ = _problem()
  r = restriction_lib.from_mask(params, _head_mask(params))
  # Leaves in flattened order: b1, step, w1, w2.
  assert r.sizes == ((5,), None, (4, 1, 5), None) and r.num_sampled == 25
  assert r.starts[2].tolist() == [0, 1, 0] and r.starts[0].tolist() == [0, 0, 0]
  taken = r.take(params)
  assert taken["step"] is None and taken["w2"] is None
  np.testing.assert_array_equal(taken["w1"], params["w1"][:, 1:2])
  back = r.put(params, jax.tree.map(lambda a: a + 1, taken))
  np.testing.assert_array_equal(back["w1"][:, 1:2], params["w1"][:, 1:2] + 1)
  np.testing.assert_array_equal(back["w1"][:, ::2], params["w1"][:, ::2])
  assert back["w2"] is params["w2"]
  holed = _head_mask(params)
  holed["w1"][2, 1, 3] = 0  # a hole in the box: not one box, so it stays a mask
  assert restriction_lib.from_mask(params, holed) is None
  nothing = jax.tree.map(lambda a: np.zeros(np.shape(a)), params)
  assert restriction_lib.from_mask(params, nothing) is None
  assert restriction_lib.from_mask(params, None) is None
  # sample_chains samples a box mask as a restriction, any other as a mask.
  assert isinstance(sgld._restricted(params, _head_mask(params))[0], restriction_lib.Restriction)
  assert sgld._restricted(params, holed)[0] is holed


@pytest.mark.parametrize("mala", [False, True])
@pytest.mark.slow
def test_a_restricted_chain_carries_its_boxes_and_draws_what_the_masked_chain_draws(mala):
  params, data = _problem()
  mask = _head_mask(params)
  r = restriction_lib.from_mask(params, mask)
  s = SGLDSettings(
    num_chains=1,
    num_draws=20,
    step_size=1e-3,
    localization=10.0,
    batch_size=16,
    nbeta=10.0,
    rmsprop=0.99,
    mala=mala,
    mala_every=2,
  )

  def run(param_mask):
    return chain_lib.sample_chain(
      _loss, params, data, jax.random.key(1), s.num_steps, s, param_mask, MeanDraw()
    )

  masked, boxed = run(mask), jax.jit(run)(r)
  for a, b in zip(jax.tree.leaves(masked), jax.tree.leaves(boxed)):  # traces and mean draw
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)  # NaN where MALA skips a step
  mean_w1 = np.asarray(boxed["accumulated"]["w1"])
  assert np.any(mean_w1[:, 1] != params["w1"][:, 1])  # the head moved
  np.testing.assert_array_equal(mean_w1[:, ::2], params["w1"][:, ::2])  # the others did not
  # The carry: the draw and the preconditioner state are the boxes, nothing else.
  chain = chain_lib.Chain(_loss, params, jax.random.key(1), s, r, data=data)
  w, v, _ = jax.eval_shape(chain.start)
  for carried in (w, v):
    shapes = {k: None if a is None else a.shape for k, a in carried.items()}
    assert shapes == {"b1": (5,), "step": None, "w1": (4, 1, 5), "w2": None}, shapes


def test_the_llc_of_a_box_mask_is_the_llc_of_the_same_mask_sampled_full_size(monkeypatch):
  params, data = _problem()
  call = lambda mask=_head_mask(params, head=0): slt.estimate_llc(  # noqa: E731
    _loss,
    params,
    data,
    key=jax.random.key(2),
    param_mask=mask,
    **SAMPLER,
  )
  with pytest.warns(slt.ChainsNotMixedWarning):
    boxed = call()
  with pytest.warns(slt.ChainsNotMixedWarning):  # the restriction itself, as users may pass it
    given = call(restriction_lib.from_boxes(params, {"w1": (slice(None), slice(0, 1)), "b1": None}))
  monkeypatch.setattr(restriction_lib, "from_mask", lambda params, mask: None)
  with pytest.warns(slt.ChainsNotMixedWarning):
    masked = call()
  np.testing.assert_allclose(boxed.llc_per_chain, masked.llc_per_chain, rtol=1e-4)
  np.testing.assert_array_equal(given.llc_per_chain, boxed.llc_per_chain)
  with pytest.raises(ValueError, match="the restriction has 1 leaves; params has 4"):
    call(restriction_lib.Restriction(((1,),), np.zeros((1, 1), np.int32)))


@expect_unmixed
@pytest.mark.slow
def test_susceptibilities_of_restrictions_are_those_of_their_masks(monkeypatch):
  """Components given as restrictions, as masks of boxes and as None, sampled with their boxes
  only (two heads of w1 in one loop of the program), give the χ of the same masks sampled
  full-size, in the components' order."""
  params, data = _problem()
  parts = {  # the heads first and third: the program's loops return them out of order
    "head_0": _head_mask(params, 0),
    "all": None,
    "head_2": restriction_lib.from_boxes(params, {"w1": (slice(None), slice(2, 3)), "b1": None}),
    "w2": restriction_lib.from_boxes(params, {"w2": None}),
  }
  starts, groups = components.component_restrictions(parts, params)
  assert [idx for _, idx in groups] == [(0, 2), (1,), (3,)]  # the two heads share a shape
  assert starts[2, 2].tolist() == [0, 2, 0]

  def call():
    return slt.estimate_susceptibilities(
      _per_sample,
      params,
      data,
      jax.tree.map(lambda a: a[:3], data),
      key=jax.random.key(3),
      components=parts,
      eval_size=32,
      **SAMPLER,
    )

  boxed = call()
  monkeypatch.setattr(components, "component_restrictions", lambda *a: None)
  masked = call()
  assert boxed.components == masked.components == tuple(parts)
  assert np.all(np.abs(boxed.chi) > 0)
  np.testing.assert_allclose(boxed.chi, masked.chi, rtol=1e-3, atol=1e-4 * np.abs(masked.chi).max())
  np.testing.assert_allclose(boxed.llc, masked.llc, rtol=1e-3)
