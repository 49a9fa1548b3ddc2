"""The same SGLD computation is traced and compiled once: repeated calls with another key, another
w* or other data of the same shapes reuse the program (mechjax.slt.sgld's program cache)."""

import contextlib

import jax
import numpy as np
import pytest
from jax import monitoring

from mechjax.slt import llc as llc_lib
from mechjax.slt import susceptibility as sus
from mechjax.slt.settings import SGLDSettings
from tests.helpers import expect_unmixed
from tests.slt import regression

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


SETTINGS = dict(step_size=1e-4, localization=10.0, batch_size=32, num_chains=2, num_draws=20)


@expect_unmixed
def test_repeated_estimate_llc_with_a_new_key_and_w_star_compiles_nothing():
  data = regression.data()
  w_first, w_next, keys = (
    regression.w_star(1.0),
    regression.w_star(0.5),
    jax.random.split(jax.random.PRNGKey(0), 3),
  )
  llc_lib.estimate_llc(regression.loss, w_first, data, key=keys[0], **SETTINGS)
  with count_traces() as n:
    res = llc_lib.estimate_llc(regression.loss, w_next, data, key=keys[1], **SETTINGS)
    again = llc_lib.estimate_llc(
      regression.loss, w_next, data, key=keys[2], settings=SGLDSettings(**SETTINGS)
    )
  assert n == [0]
  assert (
    np.isfinite(res.llc_mean) and res.llc_mean != again.llc_mean
  )  # the calls did run, with their keys


@expect_unmixed
def test_a_fresh_lambda_per_call_is_a_new_program_which_the_counter_sees():
  data = regression.data()
  w, key = regression.w_star(1.0), jax.random.PRNGKey(0)
  with count_traces() as n:
    llc_lib.estimate_llc(lambda p, b: regression.loss(p, b), w, data, key=key, **SETTINGS)
  assert n[0] >= 1


@expect_unmixed
@pytest.mark.slow
def test_repeated_bif_and_susceptibility_calls_compile_nothing():
  data = regression.data()
  queries, probes = jax.tree.map(lambda a: a[:4], data), jax.tree.map(lambda a: a[4:10], data)
  call_bif = lambda key, w: sus.bif(
    regression.per_sample, w, data, queries, probes, key=key, **SETTINGS
  )
  call_chi = lambda key, w: sus.estimate_susceptibilities(
    regression.per_sample, w, data, probes, key=key, eval_size=64, settings=SGLDSettings(**SETTINGS)
  )
  ws, keys = (
    [regression.w_star(v) for v in (1.0, 0.9, 0.8)],
    jax.random.split(jax.random.PRNGKey(0), 5),
  )
  call_bif(keys[0], ws[0])
  call_chi(keys[1], ws[0])
  with count_traces() as n:
    first = call_bif(keys[2], ws[1])
    second = call_bif(keys[3], ws[2])
    chi = call_chi(keys[4], ws[1]).chi
  assert n == [0]
  assert first.shape == (4, 6) and not np.array_equal(first, second) and np.all(np.isfinite(chi))
