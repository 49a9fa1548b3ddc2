"""The LLC estimator's fast paths: L_B(w*) from per-sample losses, MALA on every k-th step, and many
points in one program (estimate_llc_batch)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import llc as llc_lib
from mechjax.slt import placement
from mechjax.slt import sgld
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from tests.helpers import expect_unmixed

D, N = 4, 4000


def _regression(key=jax.random.key(0)):
  k_x, k_w, k_e = jax.random.split(key, 3)
  x = jax.random.normal(k_x, (N, D))
  y = x @ jax.random.normal(k_w, (D,)) + 0.5 * jax.random.normal(k_e, (N,))
  return {"x": x, "y": y}, {"w": jnp.linalg.lstsq(x, y)[0]}


def _loss(params, batch):  # a mean over samples: the per-sample path applies
  return 0.5 * jnp.mean((batch["x"] @ params["w"] - batch["y"]) ** 2)


def _sum_loss(params, batch):  # a sum: not a mean over samples, so the per-sample path must not run
  return 0.5 * jnp.sum((batch["x"] @ params["w"] - batch["y"]) ** 2) / 64.0


def _centred_loss(params, batch):  # depends on the batch as a whole (its mean residual)
  r = batch["x"] @ params["w"] - batch["y"]
  return 0.5 * jnp.mean((r - jnp.mean(r)) ** 2)


SETTINGS = dict(step_size=1e-4, nbeta=default_nbeta(N), localization=1.0, batch_size=64)


@expect_unmixed
@pytest.mark.slow
def test_per_sample_path_is_exact_where_it_applies():
  data, w_star = _regression()
  run = lambda path: llc_lib.estimate_llc(  # noqa: E731
    _loss,
    w_star,
    data,
    key=jax.random.key(1),
    num_chains=2,
    num_draws=100,
    star_loss=path,
    **SETTINGS,
  )
  auto, per_sample, per_step = run("auto"), run("per_sample"), run("per_step")
  assert auto.diagnostics["star_loss"] == "per_sample", auto.diagnostics["star_loss_reason"]
  assert per_step.diagnostics["star_loss"] == "per_step"
  # The draws do not depend on the path; only L_B(w*) is computed another way, to rounding.
  np.testing.assert_array_equal(per_sample.loss_trace, per_step.loss_trace)
  np.testing.assert_allclose(per_sample.llc_per_chain, per_step.llc_per_chain, rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(auto.llc_per_chain, per_sample.llc_per_chain)
  # L_n(w*) is the whole dataset's mean loss either way.
  assert per_sample.init_loss == pytest.approx(per_step.init_loss, rel=1e-5)


@expect_unmixed
@pytest.mark.parametrize("loss", [_sum_loss, _centred_loss])
def test_a_loss_that_is_not_a_mean_over_samples_falls_back_and_says_so(loss):
  data, w_star = _regression()
  settings = SGLDSettings(num_chains=2, num_draws=40, **SETTINGS).resolved(N)
  path, reason, star = llc_lib.star_loss_path(loss, w_star, data, jax.random.key(2), settings)
  assert (path, star) == ("per_step", None)
  assert "not the mean of its samples' losses" in reason
  with pytest.raises(
    ValueError, match="star_loss='per_sample' cannot be used: the loss of a batch"
  ):
    llc_lib.estimate_llc(
      loss, w_star, data, key=jax.random.key(2), num_draws=20, star_loss="per_sample", **SETTINGS
    )
  res = llc_lib.estimate_llc(loss, w_star, data, key=jax.random.key(2), num_draws=20, **SETTINGS)
  assert res.diagnostics["star_loss"] == "per_step"


def test_per_sample_path_is_skipped_for_samplers_and_for_data_larger_than_the_draws():
  data, w_star = _regression()
  few = SGLDSettings(num_chains=1, num_draws=10, **SETTINGS).resolved(N)  # 640 < 4000 samples
  path, reason, _ = llc_lib.star_loss_path(_loss, w_star, data, jax.random.key(0), few)
  assert path == "per_step" and "exceed" in reason

  def sample_batch(key):
    x = jax.random.normal(key, (64, D))
    return {"x": x, "y": x @ w_star["w"]}

  path, reason, _ = llc_lib.star_loss_path(_loss, w_star, sample_batch, jax.random.key(0), few)
  assert path == "per_step" and "sampler" in reason


@expect_unmixed
def test_mala_every_kth_step_leaves_the_draws_alone_and_counts_its_steps():
  data, w_star = _regression()
  run = lambda every: llc_lib.estimate_llc(  # noqa: E731
    _loss,
    w_star,
    data,
    key=jax.random.key(3),
    num_chains=2,
    num_draws=160,
    num_burnin=40,
    mala_every=every,
    **SETTINGS,
  )
  every_step, every_16 = run(1), run(16)
  # The same draws: the MALA diagnostic adds no arithmetic to them. The two are different programs,
  # though, so the compiler may fuse, and round, the draws' arithmetic differently: bit for bit with
  # XLA's default CPU emitters, to float32 rounding with the tests' faster-compiling ones
  # (tests/conftest.py). Another stream of noise would differ at once by O(1).
  np.testing.assert_allclose(every_step.loss_trace, every_16.loss_trace, rtol=1e-6, atol=0)
  assert every_step.diagnostics["mala_steps"] == 160
  assert every_16.diagnostics["mala_steps"] == 10  # steps 48, 64, ..., 192 of 40 + 160
  assert every_16.diagnostics["mala_every"] == 16
  a, b = every_step.diagnostics["mala_acceptance"], every_16.diagnostics["mala_acceptance"]
  assert 0.5 < a <= 1 and abs(a - b) < 0.05, (a, b)
  with warnings.catch_warnings():  # no MALA step at all: NaN, without numpy's empty-mean warning
    warnings.simplefilter("error")
    warnings.simplefilter("ignore", llc_lib.ChainsNotMixedWarning)  # 2 chains of 160 draws
    never = run(400)
  assert never.diagnostics["mala_steps"] == 0 and np.isnan(never.diagnostics["mala_acceptance"])


@pytest.mark.slow
@pytest.mark.compute_bound
def test_new_defaults_give_the_same_llc_as_before_on_a_regular_model():
  # A regular model's LLC is d/2. The old defaults (MALA every step, L_B(w*) by a forward pass on
  # every step) and the new ones sample the same chains, so they agree to rounding, and both lie
  # within Monte-Carlo error of d/2. That error is set from the sampler, not from the 8 chains'
  # spread: the chain is an Ornstein-Uhlenbeck process contracting by a = ε·nβ/2 ≈ 0.024 per step
  # (Σ = XᵀX/n ≈ I), so nβ·ΔL (variance d/2 at stationarity) has an integrated autocorrelation time
  # of about 1/a steps, and the mean of 8 × 8000 draws has a standard error of about
  # sqrt((d/2)·(2/a)/64000) ≈ 0.036. The bound is 4 standard errors plus the Euler scheme's
  # inflation of the variance, about a/2 (1.2%).
  data, w_star = _regression()
  kwargs = dict(num_chains=8, num_draws=8000, num_burnin=1000, **{**SETTINGS, "batch_size": 500})
  new = llc_lib.estimate_llc(_loss, w_star, data, key=jax.random.key(4), **kwargs)
  old = llc_lib.estimate_llc(
    _loss, w_star, data, key=jax.random.key(4), mala_every=1, star_loss="per_step", **kwargs
  )
  assert new.diagnostics["star_loss"] == "per_sample"
  assert old.diagnostics["mala_steps"] == 8000 and new.diagnostics["mala_steps"] == 500
  assert new.llc_mean == pytest.approx(old.llc_mean, rel=1e-3)
  a = SETTINGS["step_size"] * SETTINGS["nbeta"] / 2
  se = np.sqrt((D / 2) * (2 / a) / (8 * 8000))
  for res in (new, old):
    assert abs(res.llc_mean - D / 2 * (1 + a / 2)) < 4 * se, (res.llc_mean, se)


def _stack(points):
  return jax.tree.map(lambda *a: jnp.stack(a), *points)


@expect_unmixed
@pytest.mark.parametrize("path", ["per_sample", "per_step"])
def test_batch_equals_point_by_point(path):
  data, w_star = _regression()
  points = [{"w": w_star["w"] + 0.01 * i * jnp.arange(D)} for i in range(3)]
  keys = jax.random.split(jax.random.key(5), 3)
  kwargs = dict(num_chains=2, num_draws=60, num_burnin=10, star_loss=path, **SETTINGS)
  batch = llc_lib.estimate_llc_batch(_loss, _stack(points), data, key=keys, **kwargs)
  assert batch.llc_per_chain.shape == (3, 2) and batch.loss_trace.shape == (3, 2, 60)
  assert batch.llc_mean.shape == (3,) and batch.init_loss.shape == (3,)
  assert batch.diagnostics["star_loss"] == path
  for b, (p, k) in enumerate(zip(points, keys)):
    one = llc_lib.estimate_llc(_loss, p, data, key=k, **kwargs)
    np.testing.assert_allclose(batch.loss_trace[b], one.loss_trace, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch.llc_per_chain[b], one.llc_per_chain, rtol=1e-3, atol=1e-3)
    assert batch.init_loss[b] == pytest.approx(one.init_loss, rel=1e-5)
    assert batch.diagnostics["mala_acceptance"][b] == pytest.approx(
      one.diagnostics["mala_acceptance"], abs=1e-4
    )
  # Distinct points give distinct estimates: the batch does not repeat one point.
  assert len({round(float(v), 6) for v in batch.llc_mean}) == 3


@expect_unmixed
def test_batch_with_one_key_uses_it_for_every_point():
  data, w_star = _regression()
  stack = _stack([w_star, w_star])
  res = llc_lib.estimate_llc_batch(
    _loss, stack, data, key=jax.random.key(6), num_chains=2, num_draws=30, **SETTINGS
  )
  np.testing.assert_array_equal(res.loss_trace[0], res.loss_trace[1])


def test_batch_refuses_bad_input():
  data, w_star = _regression()
  kwargs = dict(num_chains=2, num_draws=10, **SETTINGS)
  ragged = {"w": jnp.zeros((3, D)), "b": jnp.zeros((2,))}
  with pytest.raises(ValueError, match="leading axis of B points"):
    llc_lib.estimate_llc_batch(_loss, ragged, data, key=jax.random.key(0), **kwargs)
  with pytest.raises(ValueError, match="one PRNG key or one per point"):
    llc_lib.estimate_llc_batch(
      _loss, _stack([w_star] * 3), data, key=jax.random.split(jax.random.key(0), 2), **kwargs
    )


@pytest.mark.slow
def test_chains_on_cpu_threads_are_the_chains_of_one_program():
  import mechjax

  if mechjax.usable_cpu_cores() < 2 or len(jax.devices()) != 1:
    pytest.skip("needs one JAX device and at least two cores")
  assert placement.cpu_thread_groups(4) > 1 and placement.cpu_thread_groups(4, shard=False) == 1
  assert placement.cpu_thread_groups(3) in (1, 3)  # equal groups only
  data, w_star = _regression()
  s = SGLDSettings(num_chains=4, num_draws=30, **SETTINGS)
  one = sgld.sample_chains(_loss, w_star, data, jax.random.key(7), s, shard=False)
  threads = sgld.sample_chains(_loss, w_star, data, jax.random.key(7), s)
  for name in ("loss", "loss_at_star", "acceptance"):
    np.testing.assert_array_equal(np.asarray(one[name]), np.asarray(threads[name]))
  stack = _stack([w_star, {"w": w_star["w"] + 0.1}])
  keys = jax.random.split(jax.random.key(8), 2)
  one = sgld.sample_points(_loss, stack, data, keys, s, shard=False)
  threads = sgld.sample_points(_loss, stack, data, keys, s)
  assert threads["loss"].shape == (2, 4, 30)
  np.testing.assert_array_equal(np.asarray(one["loss"]), np.asarray(threads["loss"]))


def test_a_large_model_s_chains_run_on_one_cpu_device(monkeypatch):
  """At THREAD_GROUPS_MAX_PARAMS and above, CPU devices do not split the chains (each device's
  program would hold its own parameter-sized temporaries) unless sharding is asked for."""
  monkeypatch.setattr(placement, "_all_cpu", lambda: True)
  big = placement.THREAD_GROUPS_MAX_PARAMS
  assert (
    placement.chains_shard(None, big) is False and placement.chains_shard(None, big - 1) is None
  )
  assert placement.chains_shard(True, big) is True and placement.chains_shard(False, 10) is False
  monkeypatch.setattr(placement, "_all_cpu", lambda: False)  # an accelerator splits them
  assert placement.chains_shard(None, big) is None


def test_the_heap_is_released_once_after_a_program_compiles(monkeypatch):
  released, traced = [], []
  monkeypatch.setattr(placement, "release_heap", lambda: released.append(1))
  program = jax.jit(lambda x: traced.append(1) or x * 2)
  first = placement._heap_released_after_compiling(program)
  assert float(first(jnp.float32(3.0))) == 6.0 and released == [1]
  assert float(first(jnp.float32(4.0))) == 8.0 and released == [1]  # compiled once, released once
  again = placement._heap_released_after_compiling(program)  # the same cached program
  assert again is program and float(again(jnp.float32(1.0))) == 2.0 and released == [1]
  assert len(traced) == 1  # the ahead-of-time compile is the one the calls ran
