"""SGLD and the LLC estimator: determinism, a regular model's λ = d/2, masks, diagnostics, bad
input."""

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import llc as llc_lib
from mechjax.slt import placement
from mechjax.slt import sgld
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from tests.helpers import ROOT
from tests.helpers import expect_unmixed

D, N = 4, 20_000


def _regression(key=jax.random.PRNGKey(0)):
  k_x, k_w, k_e = jax.random.split(key, 3)
  x = jax.random.normal(k_x, (N, D))
  w0 = jax.random.normal(k_w, (D,))
  y = x @ w0 + 0.5 * jax.random.normal(k_e, (N,))
  w_star = jnp.linalg.lstsq(x, y)[0]  # the empirical minimum, so w* is a local minimum of L_n
  return {"x": x, "y": y}, {"w": w_star}


def _loss(params, batch):
  return 0.5 * jnp.mean((batch["x"] @ params["w"] - batch["y"]) ** 2)


SETTINGS = dict(step_size=1e-4, nbeta=default_nbeta(N), localization=1.0, batch_size=500)


@pytest.mark.slow
@pytest.mark.compute_bound
def test_regular_model_gives_half_its_dimension():
  # At eps = 1e-5 the Euler discretisation inflates the posterior variance by about eps * nbeta / 4
  # = 0.5%, and the chains' spread (sd ~0.07 each) puts the 4-chain mean within ~0.04 of the truth.
  data, w_star = _regression()
  res = llc_lib.estimate_llc(
    _loss,
    w_star,
    data,
    key=jax.random.PRNGKey(1),
    num_chains=4,
    num_draws=6000,
    num_burnin=1200,
    **{**SETTINGS, "step_size": 1e-5, "batch_size": 2000},
  )
  assert res.llc_mean == pytest.approx(D / 2, rel=0.06), res.llc_per_chain
  assert res.loss_trace.shape == (4, 6000) and res.llc_per_chain.shape == (4,)
  assert res.diagnostics["mala_acceptance"] > 0.5
  assert (
    0 < res.diagnostics["fraction_below_init_loss"] < 0.5
  )  # w* is a minimum: most draws are above it


@expect_unmixed
def test_same_key_same_result_bit_for_bit_and_another_key_differs():
  data, w_star = _regression()
  run = lambda seed: llc_lib.estimate_llc(
    _loss, w_star, data, key=jax.random.PRNGKey(seed), num_chains=2, num_draws=50, **SETTINGS
  )
  misses = placement.chains_program.cache_info().misses
  a, b, c = run(3), run(3), run(4)
  # one program for the three calls
  assert placement.chains_program.cache_info().misses <= misses + 1
  np.testing.assert_array_equal(a.loss_trace, b.loss_trace)
  assert a.llc_mean == b.llc_mean
  assert not np.array_equal(a.loss_trace, c.loss_trace)


@pytest.mark.slow
def test_param_mask_keeps_masked_coordinates_at_w_star():
  data, w_star = _regression()
  mask = {"w": jnp.zeros(D)}
  res = llc_lib.estimate_llc(
    _loss,
    w_star,
    data,
    key=jax.random.PRNGKey(2),
    num_chains=2,
    num_draws=100,
    param_mask=mask,
    **SETTINGS,
  )
  assert np.all(res.diagnostics["distance_final"] == 0.0)
  half = {"w": jnp.array([1.0, 1.0, 0.0, 0.0])}  # sampling half the coordinates: about half the LLC
  res = llc_lib.estimate_llc(
    _loss,
    w_star,
    data,
    key=jax.random.PRNGKey(2),
    num_chains=4,
    num_draws=2000,
    num_burnin=200,
    param_mask=half,
    **SETTINGS,
  )
  assert res.llc_mean == pytest.approx(D / 4, rel=0.25)


@expect_unmixed
def test_rmsprop_variant_runs_and_is_deterministic():
  data, w_star = _regression()
  run = lambda: llc_lib.estimate_llc(
    _loss,
    w_star,
    data,
    key=jax.random.PRNGKey(5),
    num_chains=2,
    num_draws=100,
    rmsprop=0.99,
    **{**SETTINGS, "step_size": 1e-6},
  )
  a, b = run(), run()
  np.testing.assert_array_equal(a.loss_trace, b.loss_trace)
  assert np.isfinite(a.llc_mean)


def test_a_diverging_chain_names_the_chain_and_the_step():
  data, w_star = _regression()
  with pytest.raises(
    llc_lib.ChainDivergedError, match=r"chain \d+ became non-finite at step \d+.*smaller step_size"
  ):
    llc_lib.estimate_llc(
      _loss,
      w_star,
      data,
      key=jax.random.PRNGKey(0),
      num_chains=2,
      num_draws=200,
      **{**SETTINGS, "step_size": 1.0},
    )


@pytest.mark.parametrize(
  "bad,match",
  [
    (dict(step_size=0.0), "step_size=0.0: must be a finite number > 0"),
    (dict(nbeta=-1.0), "nbeta=-1.0: must be a finite number > 0"),
    (dict(batch_size=0), "batch_size=0: must be an integer >= 1"),
    (dict(batch_size=N + 1), "exceeds the"),
    (dict(localization=-1.0), "localization"),
    (dict(num_draws=0), "num_draws"),
  ],
)
def test_bad_settings_are_refused(bad, match):
  data, w_star = _regression()
  with pytest.raises(ValueError, match=match):
    llc_lib.estimate_llc(_loss, w_star, data, key=jax.random.PRNGKey(0), **{**SETTINGS, **bad})


def test_default_nbeta_and_init_loss_over_seeded_batches():
  assert default_nbeta(1000) == pytest.approx(1000 / math.log(1000))
  with pytest.raises(ValueError, match="n must be >= 2"):
    default_nbeta(1)
  data, w_star = _regression()
  full = llc_lib.init_loss(_loss, w_star, data, jax.random.PRNGKey(0), 500)
  assert full == pytest.approx(float(_loss(w_star, data)), rel=1e-6)


_SHARDED = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 2)
import numpy as np
from tests.slt import test_llc as t
from mechjax.slt import sgld
from mechjax.slt.settings import SGLDSettings
data, w_star = t._regression()
settings = SGLDSettings(**t.SETTINGS, num_chains=4, num_draws=30)
out = sgld.sample_chains(t._loss, w_star, data, jax.random.PRNGKey(5), settings)
again = sgld.sample_chains(t._loss, w_star, data, jax.random.PRNGKey(5), settings)
mapped_settings = SGLDSettings(**t.SETTINGS, num_chains=4, num_draws=30, chain_loop="map")
mapped = sgld.sample_chains(t._loss, w_star, data, jax.random.PRNGKey(5), mapped_settings)
chi = t._susceptibilities(data, w_star)
# w* left on one device (as training leaves it) is replicated onto the chains' devices, not refused.
on_one = jax.device_put(w_star, jax.devices()[0])
committed = sgld.sample_chains(t._loss, on_one, data, jax.random.PRNGKey(5), settings)
chi_committed = t._susceptibilities(data, on_one)
print(json.dumps({"devices": len(out["loss"].sharding.device_set),
                  "committed": bool(np.array_equal(out["loss"], committed["loss"])
                                    and np.array_equal(chi, chi_committed)),
                  "loss": np.asarray(out["loss"]).tolist(),
                  "mapped": np.asarray(mapped["loss"]).tolist(),
                  "same": bool(np.array_equal(out["loss"], again["loss"])), "chi": chi.tolist()}))
"""


def _susceptibilities(data, w_star):
  """Two components (all weights; the first only) and 3 probes: the component program sharded or
  not."""
  from mechjax.slt import susceptibility as sus

  per_sample = lambda p, b: 0.5 * (b["x"] @ p["w"] - b["y"]) ** 2
  probes = jax.tree.map(lambda a: a[:3], data)
  first = {"w": jnp.zeros(D).at[0].set(1.0)}
  res = sus.estimate_susceptibilities(
    per_sample,
    w_star,
    data,
    probes,
    key=jax.random.PRNGKey(6),
    components={"all": None, "first": first},
    num_chains=4,
    num_draws=20,
    **SETTINGS,
    eval_size=256,
  )
  return res.chi


@expect_unmixed
@pytest.mark.slow
def test_chains_are_sharded_over_devices_and_agree_with_one_device():
  done = subprocess.run(
    [sys.executable, "-c", _SHARDED],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": ROOT},
  )
  assert done.returncode == 0, done.stderr[-2000:]
  sharded = json.loads(done.stdout.strip().splitlines()[-1])
  assert sharded["devices"] == 2 and sharded["same"] and sharded["committed"]
  data, w_star = _regression()
  single = sgld.sample_chains(
    _loss,
    w_star,
    data,
    jax.random.PRNGKey(5),
    SGLDSettings(**SETTINGS, num_chains=4, num_draws=30),
  )
  assert len(single["loss"].sharding.device_set) == 1
  # Same key, same chains: only the rounding of the programs differs.
  np.testing.assert_allclose(np.asarray(sharded["loss"]), np.asarray(single["loss"]), rtol=1e-5)
  # Mapped chains (a larger model's default on a CPU) each have the arithmetic of a lone chain, so
  # the device count changes nothing, bit for bit.
  mapped = sgld.sample_chains(
    _loss,
    w_star,
    data,
    jax.random.PRNGKey(5),
    SGLDSettings(**SETTINGS, num_chains=4, num_draws=30, chain_loop="map"),
  )
  np.testing.assert_array_equal(np.asarray(sharded["mapped"]), np.asarray(mapped["loss"]))
  # The susceptibility program shards its chains the same way (components vmapped outside them).
  chi = _susceptibilities(data, w_star)
  assert np.abs(chi).max() > 0
  np.testing.assert_allclose(
    np.asarray(sharded["chi"]), chi, rtol=1e-3, atol=1e-3 * np.abs(chi).max()
  )
