"""The same SGLD computation is traced and compiled once: repeated calls with another key, another
w* or other data of the same shapes reuse the program (mechjax.slt.sgld's program cache)."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import monitoring

from mechjax.slt import llc as llc_lib
from mechjax.slt import susceptibility as sus
from mechjax.slt.settings import SGLDSettings
from tests.helpers import expect_unmixed

_TRACES = []
_COUNTING = [False]


def _listener(event, duration, **kwargs):
  del duration, kwargs
  if _COUNTING[0] and event == "/jax/core/compile/jaxpr_trace_duration":
    _TRACES.append(event)


monitoring.register_event_duration_secs_listener(_listener)


@contextlib.contextmanager
def count_traces():
  """Counts the programs JAX traces (for jit, eval_shape and every compilation) inside the block."""
  _TRACES.clear()
  _COUNTING[0] = True
  counted = []
  try:
    yield counted
  finally:
    _COUNTING[0] = False
    counted.append(len(_TRACES))


def _data(n=256, d=3):
  x = jax.random.normal(jax.random.PRNGKey(0), (n, d))
  return {"x": x, "y": x @ jnp.arange(1.0, d + 1.0)}


def _loss(params, batch):
  return 0.5 * jnp.mean((batch["x"] @ params["w"] - batch["y"]) ** 2)


def _w(value):
  """A w* of the same shape and dtype as every other (a weakly typed one would be another
  program)."""
  return {"w": jnp.asarray(np.full(3, value, np.float32))}


def _per_sample(params, batch):
  return 0.5 * (batch["x"] @ params["w"] - batch["y"]) ** 2


SETTINGS = dict(step_size=1e-4, localization=10.0, batch_size=32, num_chains=2, num_draws=20)


@expect_unmixed
def test_repeated_estimate_llc_with_a_new_key_and_w_star_compiles_nothing():
  data = _data()
  w_first, w_next, keys = _w(1.0), _w(0.5), jax.random.split(jax.random.PRNGKey(0), 3)
  llc_lib.estimate_llc(_loss, w_first, data, key=keys[0], **SETTINGS)
  with count_traces() as n:
    res = llc_lib.estimate_llc(_loss, w_next, data, key=keys[1], **SETTINGS)
    again = llc_lib.estimate_llc(
      _loss, w_next, data, key=keys[2], settings=SGLDSettings(**SETTINGS)
    )
  assert n == [0]
  assert (
    np.isfinite(res.llc_mean) and res.llc_mean != again.llc_mean
  )  # the calls did run, with their keys


@expect_unmixed
def test_a_fresh_lambda_per_call_is_a_new_program_which_the_counter_sees():
  data = _data()
  w, key = _w(1.0), jax.random.PRNGKey(0)
  with count_traces() as n:
    llc_lib.estimate_llc(lambda p, b: _loss(p, b), w, data, key=key, **SETTINGS)
  assert n[0] >= 1


@expect_unmixed
def test_repeated_bif_and_susceptibility_calls_compile_nothing():
  data = _data()
  queries, probes = jax.tree.map(lambda a: a[:4], data), jax.tree.map(lambda a: a[4:10], data)
  call_bif = lambda key, w: sus.bif(_per_sample, w, data, queries, probes, key=key, **SETTINGS)
  call_chi = lambda key, w: sus.estimate_susceptibilities(
    _per_sample, w, data, probes, key=key, eval_size=64, settings=SGLDSettings(**SETTINGS)
  )
  ws, keys = [_w(v) for v in (1.0, 0.9, 0.8)], jax.random.split(jax.random.PRNGKey(0), 5)
  call_bif(keys[0], ws[0])
  call_chi(keys[1], ws[0])
  with count_traces() as n:
    first = call_bif(keys[2], ws[1])
    second = call_bif(keys[3], ws[2])
    chi = call_chi(keys[4], ws[1]).chi
  assert n == [0]
  assert first.shape == (4, 6) and not np.array_equal(first, second) and np.all(np.isfinite(chi))
