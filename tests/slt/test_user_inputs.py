"""What users bring: params trees with non-float leaves, and data as a device-side sampler."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax import slt
from tests.helpers import expect_unmixed

SETTINGS = dict(step_size=1e-3, localization=10.0, batch_size=32, num_chains=2, num_draws=30)


def _data(n=256, d=3):
  x = jax.random.normal(jax.random.key(0), (n, d))
  return x, x @ jnp.arange(1.0, d + 1.0)


def loss_fn(params, batch):
  x, y = batch
  return jnp.mean((x @ params["w"] - y) ** 2)


def loss_with_counter(params, batch):
  # The integer leaf is read (as a model's step counter or index table would be), not trained.
  x, y = batch
  scale = 1.0 + 0.0 * params["step"].astype(jnp.float32)
  return jnp.mean((x @ params["w"] * scale - y) ** 2)


def per_sample_loss(params, batch):
  x, y = batch
  return (x @ params["w"] - y) ** 2


@expect_unmixed
@pytest.mark.slow
def test_integer_and_boolean_leaves_are_held_fixed_and_change_nothing():
  data = _data()
  w = {"w": jnp.arange(1.0, 4.0) + 0.1}
  plain = slt.estimate_llc(loss_fn, w, data, key=jax.random.key(1), **SETTINGS)
  tree = {**w, "step": jnp.array(7, jnp.int32), "live": jnp.array([True, False])}
  mixed = slt.estimate_llc(loss_with_counter, tree, data, key=jax.random.key(1), **SETTINGS)
  np.testing.assert_array_equal(mixed.llc_per_chain, plain.llc_per_chain)
  chi_plain = slt.estimate_susceptibilities(
    per_sample_loss, w, data, data, key=jax.random.key(2), **SETTINGS
  )
  mask = {"w": jnp.ones(3), "step": jnp.array(1, jnp.int32), "live": jnp.array([True, True])}
  chi_mixed = slt.estimate_susceptibilities(
    lambda p, b: per_sample_loss({"w": p["w"]}, b),
    tree,
    data,
    data,
    key=jax.random.key(2),
    components={"all": mask},
    **SETTINGS,
  )
  np.testing.assert_allclose(chi_mixed.chi, chi_plain.chi, rtol=1e-5, atol=1e-7)


def _resampler(data, batch_size):
  n = jax.tree.leaves(data)[0].shape[0]

  def sample_batch(key):  # draws as the sampler draws from arrays
    idx = jax.random.randint(key, (batch_size,), 0, n)
    return jax.tree.map(lambda a: a[idx], data)

  return sample_batch


@expect_unmixed
@pytest.mark.slow
def test_a_sampler_that_resamples_the_arrays_gives_the_arrays_result():
  data = _data()
  w = {"w": jnp.arange(1.0, 4.0) + 0.1}
  nbeta = slt.default_nbeta(256)
  arrays = slt.estimate_llc(loss_fn, w, data, key=jax.random.key(1), nbeta=nbeta, **SETTINGS)
  sampled = slt.estimate_llc(
    loss_fn, w, _resampler(data, 32), key=jax.random.key(1), nbeta=nbeta, **SETTINGS
  )
  np.testing.assert_allclose(sampled.loss_trace, arrays.loss_trace, rtol=1e-6)
  np.testing.assert_allclose(sampled.llc_per_chain, arrays.llc_per_chain, rtol=1e-4)
  chi = slt.estimate_susceptibilities(
    per_sample_loss,
    w,
    _resampler(data, 32),
    (data[0][:5], data[1][:5]),
    key=jax.random.key(2),
    nbeta=nbeta,
    eval_size=64,
    **{**SETTINGS, "num_draws": 20},
  )
  assert chi.chi.shape == (1, 1, 5) and np.all(np.isfinite(chi.chi))


@expect_unmixed
def test_a_fresh_sampler_estimates_the_population_llc_of_a_regular_model():
  d = 4
  truth = jnp.arange(1.0, d + 1.0)

  def sample_batch(key):  # generated on the fly: no dataset in memory
    x = jax.random.normal(key, (64, d))
    return x, x @ truth

  w = {"w": truth}
  result = slt.estimate_llc(
    loss_fn,
    w,
    sample_batch,
    key=jax.random.key(3),
    step_size=1e-4,
    localization=1.0,
    batch_size=64,
    nbeta=slt.default_nbeta(10_000),
    num_chains=4,
    num_draws=400,
    num_burnin=200,
  )
  assert abs(result.llc_mean - d / 2) < 4 * max(result.llc_std, 0.1), result.llc_mean


def test_a_sampler_needs_nbeta_and_its_own_batch_size():
  w = {"w": jnp.ones(3)}
  sampler = _resampler(_data(), 32)
  with pytest.raises(ValueError, match="pass nbeta="):
    slt.estimate_llc(loss_fn, w, sampler, key=jax.random.key(0), **SETTINGS)
  with pytest.raises(ValueError, match="batch_size=16"):
    slt.estimate_llc(
      loss_fn, w, sampler, key=jax.random.key(0), nbeta=10.0, **{**SETTINGS, "batch_size": 16}
    )


def test_a_leaf_that_is_not_an_array_is_refused_by_name():
  params = {"w": jnp.ones(3), "block": {"activation": jax.nn.relu}}
  with pytest.raises(TypeError, match=r"params leaf \['block'\]\['activation'\] is a"):
    slt.estimate_llc(loss_fn, params, _data(), key=jax.random.key(0), **SETTINGS)
  with pytest.raises(TypeError, match="eqx.partition"):
    slt.estimate_susceptibilities(
      per_sample_loss, params, _data(), _data(), key=jax.random.key(0), **SETTINGS
    )


def _one_line_error(call):
  with pytest.raises(ValueError) as info:
    call()
  message = str(info.value)
  assert "\n" not in message, message
  return message


def test_a_loss_that_is_not_a_scalar_is_refused_in_one_line_up_front():
  data = _data()
  w = {"w": jnp.zeros(3)}
  calls = {
    "estimate_llc": lambda: slt.estimate_llc(
      per_sample_loss, w, data, key=jax.random.key(1), **SETTINGS
    ),
    "estimate_llc_batch": lambda: slt.estimate_llc_batch(
      per_sample_loss, {"w": jnp.zeros((2, 3))}, data, key=jax.random.key(1), **SETTINGS
    ),
  }
  for name, call in calls.items():
    message = _one_line_error(call)
    assert "returned an array of shape (32,)" in message, (name, message)
    assert "must be a scalar" in message and "estimate_susceptibilities" in message, message
  # A susceptibility's loss is the other way round: one loss per sample, not their mean.
  message = _one_line_error(
    lambda: slt.estimate_susceptibilities(loss_fn, w, data, data, key=jax.random.key(2), **SETTINGS)
  )
  assert "returned an array of shape ()" in message and "(32,)" in message, message
  assert "estimate_llc" in message, message


def test_data_leaves_of_different_lengths_are_refused_in_one_line_before_the_loss_runs():
  x, y = _data()
  traced = []

  def watched_loss(params, batch):
    traced.append(True)
    return loss_fn(params, batch)

  message = _one_line_error(
    lambda: slt.estimate_llc(
      watched_loss, {"w": jnp.zeros(3)}, (x, y[:200]), key=jax.random.key(1), **SETTINGS
    )
  )
  assert "data[0] has 256, data[1] has 200" in message, message
  assert "same leading (sample) length" in message, message
  assert not traced  # refused before the user's loss was called
  message = _one_line_error(
    lambda: slt.estimate_susceptibilities(
      per_sample_loss,
      {"w": jnp.zeros(3)},
      {"x": x, "y": y[:10]},
      (x, y),
      key=jax.random.key(2),
      **SETTINGS,
    )
  )
  assert "data['x'] has 256, data['y'] has 10" in message, message


def test_the_loss_shape_check_does_not_keep_a_closure_alive():
  """The input check remembers each loss's output shape, weakly: a loss made per call (a closure
  over a large model, say) is freed when the caller drops it, and a bound method is remembered by
  its object."""
  import gc
  import weakref

  from mechjax.slt import inputs

  data, w = _data(), {"w": jnp.ones(3)}
  scale = jnp.ones(())  # the closure holds an array, as a loss over a model's constants would
  closure = lambda params, batch: loss_fn(params, batch) * scale
  inputs.check_loss(closure, w, data, batch_size=8)
  assert closure in inputs._LOSS_SHAPES  # remembered while it lives
  ref = weakref.ref(closure)
  del closure
  gc.collect()
  assert ref() is None, "the loss-shape cache kept a dropped loss alive"

  class Model:
    def loss(self, params, batch):
      return loss_fn(params, batch)

  model = Model()
  inputs.check_loss(model.loss, w, data, batch_size=8)
  assert model in inputs._LOSS_SHAPES  # keyed by the object: the bound method is new each time
  with pytest.raises(ValueError, match="must be a scalar"):
    inputs.check_loss(per_sample_loss, w, data, batch_size=8)


def test_the_accumulator_protocol_matches_the_accumulators():
  """``slt.chain.Accumulator`` documents the methods the chain calls; the library's accumulators
  take exactly those parameters."""
  import inspect

  from mechjax.slt import chain
  from mechjax.slt import moments

  def params(fn):
    return [p for p in inspect.signature(fn).parameters if p != "self"]

  want = {m: params(getattr(chain.Accumulator, m)) for m in ("init", "update")}
  assert want == {"init": ["params_star", "data"], "update": ["state", "w", "step", "data"]}
  for acc in (moments.StreamedMoments, moments.SegmentedMoments):
    assert params(acc.init) == want["init"], acc
    assert len(params(acc.update)) == 4 and params(acc.update)[1:] == want["update"][1:], acc
