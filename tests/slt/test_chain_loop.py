"""How the chains of one device run (vmap or lax.map), leaves held fixed by a mask's support, and
the susceptibility program's branches: each gives the draws of the plain computation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import chain as chain_lib
from mechjax.slt import params as params_lib
from mechjax.slt import placement
from mechjax.slt import sgld
from mechjax.slt import susceptibility as sus
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from tests.helpers import expect_unmixed

D, N = 4, 2000


def _regression(key=jax.random.key(0)):
  k_x, k_w, k_e = jax.random.split(key, 3)
  x = jax.random.normal(k_x, (N, D))
  y = x @ jax.random.normal(k_w, (D,)) + 0.5 + 0.5 * jax.random.normal(k_e, (N,))
  w = jnp.linalg.lstsq(jnp.c_[x, jnp.ones(N)], y)[0]
  return {"x": x, "y": y}, {"w": w[:D], "b": w[D:]}


def _per_sample(params, batch):
  return 0.5 * (batch["x"] @ params["w"] + params["b"][0] - batch["y"]) ** 2


def _loss(params, batch):
  return jnp.mean(_per_sample(params, batch))


SETTINGS = dict(step_size=1e-4, nbeta=default_nbeta(N), localization=1.0, batch_size=64)


def _chains(data, w_star, seed: int, **settings):
  """sample_chains on the regression with SETTINGS and ``settings``."""
  return sgld.sample_chains(
    _loss, w_star, data, jax.random.key(seed), SGLDSettings(**settings, **SETTINGS)
  )


@pytest.mark.slow
def test_map_and_vmap_run_the_same_chains():
  data, w_star = _regression()
  run = lambda how: _chains(data, w_star, 3, num_chains=4, num_draws=40, chain_loop=how)  # noqa: E731
  mapped, vmapped = run("map"), run("vmap")
  assert mapped["loss"].shape == (4, 40)
  for name in ("loss", "loss_at_star", "distance", "noise_norm"):
    np.testing.assert_allclose(mapped[name], vmapped[name], rtol=1e-5, err_msg=name)
  # The chains differ from one another: the loop did not repeat one chain.
  assert np.all(np.std(np.asarray(mapped["loss"])[:, -1]) > 0)
  # auto: mapped on a CPU for a model of MAP_MIN_PARAMS float parameters or more, else vmapped.
  auto = SGLDSettings(**SETTINGS)
  big = {"w": jnp.zeros(placement.MAP_MIN_PARAMS), "step": jnp.zeros((10**6,), jnp.int32)}
  small = {"w": jnp.zeros(placement.MAP_MIN_PARAMS - 1), "step": jnp.zeros((10**6,), jnp.int32)}
  on_cpu = jax.default_backend() == "cpu"
  assert placement.chain_loop(auto, big) == ("map" if on_cpu else "vmap")
  assert placement.chain_loop(auto, small) == "vmap"  # integer leaves are not sampled: not counted
  assert placement.chain_loop(SGLDSettings(**SETTINGS, chain_loop="map"), small) == "map"
  assert placement.with_chain_loop(auto, big).chain_loop in ("map", "vmap")
  with pytest.raises(ValueError, match="chain_loop"):
    SGLDSettings(chain_loop="scan", **SETTINGS)


def test_the_norms_are_traced_on_every_norms_every_th_step_and_the_last():
  """The distance, drift and noise norms on the steps that have them equal those of a chain that
  traces every step (the same chain: the same losses), and are NaN on the others."""
  data, w_star = _regression()
  run = lambda every: _chains(data, w_star, 5, num_chains=2, num_draws=21, norms_every=every)  # noqa: E731
  sparse, dense = run(8), run(1)
  due = np.zeros(21, bool)
  due[::8] = due[-1] = True
  np.testing.assert_array_equal(sparse["loss"], dense["loss"])
  for name in ("distance", "drift_norm", "noise_norm"):
    a, b = np.asarray(sparse[name]), np.asarray(dense[name])
    assert np.all(np.isfinite(a[:, due])) and np.all(np.isnan(a[:, ~due])), name
    assert np.all(np.isfinite(b)) and np.all(b > 0), name
    np.testing.assert_allclose(a[:, due], b[:, due], rtol=1e-6, err_msg=name)


def test_leaves_outside_the_support_are_held_fixed_with_the_same_draws():
  """A mask that is all zero on a leaf: the pruned chain (no gradient or noise for that leaf) and
  the plain masked chain draw the same noise for the free leaf and give the same trajectory."""
  data, w_star = _regression()
  mask = {"w": jnp.ones(D), "b": jnp.zeros(1)}
  support = params_lib.mask_support(w_star, mask)
  assert support == (False, True)  # leaves in key order: b, w
  s = SGLDSettings(num_chains=1, num_draws=50, **SETTINGS)

  def chain(pruned):
    return jax.jit(
      lambda m: chain_lib.sample_chain(
        _loss, w_star, data, jax.random.key(4), 50, s, m, support=support if pruned else None
      )
    )(mask)

  plain, pruned = chain(False), chain(True)
  for name in ("loss", "distance", "noise_norm", "drift_norm"):
    np.testing.assert_allclose(pruned[name], plain[name], rtol=1e-5, err_msg=name)
  # Inside a jit the mask is traced: nothing can be pruned at trace time.
  assert jax.jit(lambda m: jnp.asarray(params_lib.mask_support(w_star, m) is None))(mask)
  assert params_lib.mask_support(w_star, None) is None
  with pytest.raises(ValueError, match="leaves"):
    params_lib.mask_support(w_star, {"w": jnp.ones(D)})


@expect_unmixed
@pytest.mark.slow
def test_components_with_different_supports_equal_each_component_alone():
  """The susceptibility program runs components of different supports as branches of one program;
  each equals the same component estimated on its own (same key, same chains)."""
  data, w_star = _regression()
  probes = jax.tree.map(lambda a: a[:5], data)
  components = {
    "all": None,
    "w": {"w": jnp.ones(D), "b": jnp.zeros(1)},
    "b": {"w": jnp.zeros(D), "b": jnp.ones(1)},
  }
  kw = dict(key=jax.random.key(5), num_chains=2, num_draws=30, eval_size=256, **SETTINGS)
  together = sus.estimate_susceptibilities(
    _per_sample, w_star, data, probes, components=components, **kw
  )
  assert together.chi.shape == (3, 1, 5)
  for i, (name, mask) in enumerate(components.items()):
    alone = sus.estimate_susceptibilities(
      _per_sample, w_star, data, probes, components={name: mask}, **kw
    )
    np.testing.assert_allclose(together.chi[i], alone.chi[0], rtol=1e-4, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(together.llc[i], alone.llc[0], rtol=1e-4, err_msg=name)
  assert len({round(float(v), 6) for v in together.llc}) == 3


@expect_unmixed
@pytest.mark.slow
def test_eval_data_defines_the_loss_of_the_observable():
  data, w_star = _regression()
  probes = jax.tree.map(lambda a: a[:4], data)
  kw = dict(key=jax.random.key(6), num_chains=2, num_draws=20, **SETTINGS)
  subset = jax.tree.map(lambda a: a[100:356], data)
  default = sus.estimate_susceptibilities(_per_sample, w_star, subset, probes, eval_size=256, **kw)
  given = sus.estimate_susceptibilities(
    _per_sample, w_star, subset, probes, eval_data=subset, eval_size=1, **kw
  )
  np.testing.assert_array_equal(given.chi, default.chi)  # all of the data: the same L
  other = sus.estimate_susceptibilities(
    _per_sample, w_star, subset, probes, eval_data=jax.tree.map(lambda a: a[:32], data), **kw
  )
  assert not np.array_equal(other.chi, default.chi)
  with pytest.raises(ValueError, match="eval_data must have data's structure"):
    sus.estimate_susceptibilities(
      _per_sample, w_star, subset, probes, eval_data={"x": data["x"][:8]}, **kw
    )
  with pytest.raises(ValueError, match="share their first"):
    sus.estimate_susceptibilities(
      _per_sample, w_star, subset, probes, eval_data={"x": data["x"][:8], "y": data["y"][:7]}, **kw
    )


def test_sampler_programs_compile_without_ynn_fusions_when_they_run_beside_others():
  """With XLA's YNNPACK fusions, a program running on two CPU devices (or from two threads) at once
  grew its memory for as long as it ran (docs/design.md): such programs are compiled without them,
  and so is one called where nothing says it runs alone. A program that runs alone keeps XLA's
  defaults, the fusions included."""
  if jax.default_backend() != "cpu":
    pytest.skip("a CPU compiler option")
  data, _ = _regression()
  w_star = {"w1": 0.1 * jnp.ones((D, 8)), "w2": 0.1 * jnp.ones((8,))}

  def mlp(params, batch):  # matrix products, which XLA's CPU backend fuses with YNNPACK by default
    return jnp.mean((jnp.tanh(batch["x"] @ params["w1"]) @ params["w2"] - batch["y"]) ** 2)

  fusion = '"kind":"__ynn_fusion"'
  plain = jax.jit(jax.grad(mlp)).lower(w_star, {k: v[:64] for k, v in data.items()})
  assert fusion in plain.compile().as_text()  # XLA's default, which the option turns off
  s = SGLDSettings(num_chains=2, num_draws=5, **SETTINGS)
  program = placement.chains_program(mlp, s, False, None, None)
  keys = chain_lib.chain_keys(jax.random.key(0), 2)
  text = lambda: program.lower(w_star, data, keys, None, None, None).compile().as_text()  # noqa: E731
  assert fusion not in text()
  with placement.running(concurrent=False):
    assert fusion in text()
  with placement.running(concurrent=True):
    assert fusion not in text()


def test_chains_run_alone_only_on_one_device_from_one_thread():
  """over_chains_on_devices says a program runs alone only where it does: one device and one
  group of chains; its thread groups' programs run beside each other."""
  seen = []

  def run(program, part):
    seen.append(placement.running_concurrently())
    return jnp.zeros((part.stop - part.start,))

  placement.over_chains_on_devices(4, lambda layout, per: None, run, shard=False)
  assert seen == [False]
  assert placement.running_concurrently()  # restored after the call
  if placement.cpu_thread_groups(4) > 1:
    seen.clear()
    placement.over_chains_on_devices(4, lambda layout, per: None, run)
    assert seen and all(seen)
