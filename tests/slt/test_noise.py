"""The Langevin noise's PRNG: threefry from the chain's key, or rbg / unsafe_rbg derived from it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax import config
from mechjax.slt import langevin
from mechjax.slt import noise as noise_lib
from mechjax.slt.settings import SGLDSettings
from tests.helpers import expect_unmixed

W = {"a": jnp.zeros((64, 8)), "b": jnp.zeros(8)}
SLOTS = (np.array([0, 1], np.int32), 2)


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_derived_noise_is_standard_normal_and_other_than_threefry(impl):
  key = jax.random.key(0)
  base = langevin.normal_noise(key, W, SLOTS)
  z = langevin.normal_noise(key, W, SLOTS, impl)
  again = langevin.normal_noise(key, W, SLOTS, impl)
  for a, b in zip(jax.tree.leaves(z), jax.tree.leaves(again)):
    np.testing.assert_array_equal(a, b)  # a function of the key
  flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(z)])
  assert abs(flat.mean()) < 0.1 and abs(flat.std() - 1) < 0.1  # 520 standard normals
  assert not np.allclose(z["a"], base["a"])
  other = langevin.normal_noise(jax.random.key(1), W, SLOTS, impl)
  assert not np.allclose(z["a"], other["a"])


def test_the_noise_impl_is_a_checked_setting():
  s = SGLDSettings(step_size=1e-3, localization=1.0, batch_size=8, noise_impl="rbg")
  assert s.noise_impl == "rbg"
  with pytest.raises(config.ConfigError, match="noise_impl='philox'"):
    SGLDSettings(step_size=1e-3, localization=1.0, batch_size=8, noise_impl="philox")


@expect_unmixed
def test_the_sampler_draws_its_noise_with_the_chosen_impl():
  from mechjax.slt import llc as llc_lib

  x = jax.random.normal(jax.random.key(0), (256, 3))
  data, w = {"x": x, "y": x @ jnp.ones(3)}, {"w": jnp.ones(3)}
  loss = lambda p, b: 0.5 * jnp.mean((b["x"] @ p["w"] - b["y"]) ** 2)  # noqa: E731
  run = lambda impl: llc_lib.estimate_llc(  # noqa: E731
    loss, w, data, key=jax.random.key(1), step_size=1e-3, localization=10.0, batch_size=16,
    num_chains=2, num_draws=50, mala=False, noise_impl=impl,
  )  # fmt: skip
  threefry, rbg = run("threefry"), run("rbg")
  assert not np.allclose(threefry.loss_trace, rbg.loss_trace)  # other noise, so other draws
  assert np.isfinite(rbg.llc_mean) and rbg.llc_mean == pytest.approx(threefry.llc_mean, rel=0.5)


def _draws_random_bits(fn, *args) -> bool:
  return "random_bits" in str(jax.make_jaxpr(fn)(*args))


@pytest.mark.parametrize("shape", [(7,), (3, 5, 7), (128, 50)])
@pytest.mark.parametrize("raw", [False, True])
def test_fused_normal_is_jax_random_normal_bit_for_bit(shape, raw):
  key = jax.random.PRNGKey(3) if raw else jax.random.key(3)
  ours = jax.jit(noise_lib.normal, static_argnums=1)(key, shape)
  np.testing.assert_array_equal(ours, jax.random.normal(key, shape))
  # the fused pass, not JAX's PRNG primitive (a rolled threefry loop on a CPU)
  assert not _draws_random_bits(lambda k: noise_lib.normal(k, shape), key)
  assert _draws_random_bits(lambda k: jax.random.normal(k, shape), key)


def test_a_box_of_the_fused_normal_is_that_box_of_the_whole():
  key, shape = jax.random.key(5), (6, 4, 9)
  whole = jax.random.normal(key, shape)
  box = jax.jit(lambda k, s: noise_lib.normal(k, shape, start=s, size=(2, 4, 3)))(
    key, jnp.array([3, 0, 5], jnp.int32)
  )
  np.testing.assert_array_equal(box, whole[3:5, :, 5:8])


@pytest.mark.parametrize(
  "key,dtype",
  [(jax.random.key(0, impl="rbg"), jnp.float32), (jax.random.key(0), jnp.bfloat16)],
)
def test_other_keys_and_dtypes_get_jax_random_normal(key, dtype):
  ours = noise_lib.normal(key, (4, 6), dtype, start=(1, 2), size=(2, 3))
  np.testing.assert_array_equal(ours, jax.random.normal(key, (4, 6), dtype)[1:3, 2:5])


def test_a_box_without_a_start_begins_at_the_origin_on_both_paths():
  for key in (jax.random.key(2), jax.random.key(2, impl="rbg")):
    ours = noise_lib.normal(key, (5, 4), size=(2, 3))
    np.testing.assert_array_equal(ours, jax.random.normal(key, (5, 4))[:2, :3])


def test_the_fast_path_ops_carry_the_scope_that_profiles_look_for():
  lowered = jax.jit(lambda k: noise_lib.normal(k, (3, 4))).lower(jax.random.key(0))
  assert noise_lib.SCOPE in lowered.as_text(debug_info=True)


def test_normals_packs_the_small_requests_into_one_hash_and_gives_each_its_numbers():
  keys = jax.random.split(jax.random.key(7), 6)
  requests = [
    (keys[0], (3, 5), jnp.float32, None, None),
    (keys[1], (), jnp.float32, None, None),
    (keys[2], (4, 6), jnp.float32, (1, 2), (2, 3)),  # a box
    (keys[3], (2, 3), jnp.float16, None, None),  # another dtype: jax.random.normal
    (keys[4], (noise_lib.PACK_MAX + 1,), jnp.float32, None, None),  # too large to pack
    (keys[5], (7,), jnp.float32, None, None),
  ]
  got = jax.jit(lambda: noise_lib.normals(requests))()
  for (key, shape, dtype, start, size), z in zip(requests, got):
    want = jax.random.normal(key, shape, dtype)
    if start is not None:
      want = want[tuple(slice(a, a + n) for a, n in zip(start, size))]
    assert z.dtype == want.dtype
    np.testing.assert_array_equal(z, want)

  # The Threefry rounds appear once for the four packed requests and once for the large one:
  # each hash has 20 rounds of one XOR, and each normal one more XOR of the two output words.
  def xors(reqs):
    text = str(jax.make_jaxpr(lambda: noise_lib.normals(reqs))())
    return text.count(" xor ")

  packed = [requests[i] for i in (0, 1, 2, 5)]
  one = xors(packed[:1])
  assert one > 0 and xors(packed) == one and xors(requests[:1] + requests[4:5]) == 2 * one
