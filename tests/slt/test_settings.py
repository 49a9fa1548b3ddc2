"""One way to pass sampler settings: ``settings=`` plus keyword overrides, each a field of
SGLDSettings, in every SLT entry point (mechjax.slt.sgld.settings_from)."""

import dataclasses

import jax
import numpy as np
import pytest

from mechjax import config
from mechjax.slt import llc as llc_lib
from mechjax.slt import susceptibility as sus
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import settings_from
from tests.helpers import expect_unmixed
from tests.slt import regression

BASE = SGLDSettings(step_size=1e-4, localization=10.0, batch_size=32, num_chains=2)


def test_overrides_replace_the_settings_fields_and_none_keeps_them():
  s = settings_from(BASE, num_draws=7, nbeta=None)
  assert s == dataclasses.replace(BASE, num_draws=7)
  assert settings_from(BASE) is BASE
  loose = settings_from(step_size=1e-4, localization=10.0, batch_size=32, num_chains=2)
  assert loose == BASE
  with pytest.raises(config.ConfigError, match="num_draws"):
    settings_from(BASE, num_draws=0)


def test_a_name_that_is_not_a_setting_is_refused_in_every_entry_point():
  with pytest.raises(TypeError, match=r"unknown SGLD settings \['num_chain'\].*num_chains"):
    settings_from(BASE, num_chain=4)
  with pytest.raises(TypeError, match=r"missing the SGLD settings \['batch_size'\]"):
    settings_from(step_size=1e-4, localization=10.0)
  with pytest.raises(TypeError, match="settings must be an SGLDSettings; got dict"):
    settings_from({"step_size": 1e-4})
  data, key = regression.data(), jax.random.PRNGKey(0)
  calls = [
    lambda: llc_lib.estimate_llc(
      regression.loss, regression.w_star(1.0), data, key=key, settings=BASE, draws=5
    ),
    lambda: llc_lib.estimate_llc_batch(
      regression.loss,
      jax.tree.map(lambda a: a[None], regression.w_star(1.0)),
      data,
      key=key,
      settings=BASE,
      draws=5,
    ),
    lambda: sus.estimate_susceptibilities(
      regression.per_sample, regression.w_star(1.0), data, data, key=key, settings=BASE, draws=5
    ),
    lambda: sus.bif(
      regression.per_sample,
      regression.w_star(1.0),
      data,
      data,
      data,
      key=key,
      settings=BASE,
      draws=5,
    ),
  ]
  for call in calls:
    with pytest.raises(TypeError, match=r"unknown SGLD settings \['draws'\]"):
      call()


@expect_unmixed
def test_settings_with_an_override_run_the_chains_the_replaced_settings_run():
  data, key = regression.data(), jax.random.PRNGKey(3)
  got = llc_lib.estimate_llc(
    regression.loss, regression.w_star(1.0), data, key=key, settings=BASE, num_draws=12
  )
  want = llc_lib.estimate_llc(
    regression.loss,
    regression.w_star(1.0),
    data,
    key=key,
    settings=dataclasses.replace(BASE, num_draws=12),
  )
  assert np.asarray(got.loss_trace).shape == (2, 12)
  np.testing.assert_array_equal(got.loss_trace, want.loss_trace)
