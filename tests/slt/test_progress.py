"""Progress of a running sampler: every chain step is reported to the host once, and the meter's
lines give the steps done, the rate and the ETA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.slt import progress
from mechjax.slt import susceptibility as sus
from tests.helpers import expect_unmixed


@expect_unmixed
@pytest.mark.slow
def test_every_chain_step_of_every_component_is_reported_once():
  x = jax.random.normal(jax.random.key(0), (32, 3))
  data = {"x": x, "y": x @ jnp.array([1.0, -1.0, 0.5])}
  per_sample = lambda w, b: (b["x"] @ w["w"] - b["y"]) ** 2  # noqa: E731
  params = {"w": jnp.zeros(3)}
  reports = []
  with progress.listening(reports.append):
    sus.estimate_susceptibilities(
      per_sample, params, data, {"x": x[:2], "y": data["y"][:2]}, key=jax.random.key(1),
      components={"all": None, "w0": {"w": jnp.array([1.0, 0.0, 0.0])}}, num_chains=2,
      num_draws=43, num_burnin=10, step_size=1e-3, localization=10.0, batch_size=8,
    )  # fmt: skip
  # 2 components × 2 chains × 53 steps: after the first step, every step 2k − 1 (53 // 50 = 1
  # apart: every step) and the last.
  assert sum(reports) == 4 * 53 and len(reports) == 4 * 53, reports
  assert not progress._LISTENERS  # the listener is gone after the block


def test_a_chain_reports_its_first_step_every_kth_and_its_last():
  reports = []

  @jax.jit
  def chain(steps):
    return jax.lax.scan(lambda c, t: (progress.tick(t, 5, 53), None)[::-1], None, steps)

  with progress.listening(reports.append):
    jax.block_until_ready(chain(jnp.arange(53)))
  jax.effects_barrier()
  assert reports == [1, 4] + [5] * 9 + [3], reports


def test_the_meter_measures_its_part_from_the_first_report_and_gives_the_eta():
  lines = []
  meter = progress.Meter(1000, lines.append, interval=0.0, settle=5.0)
  meter.skip(100)  # a part done in an earlier run
  meter.start("l0 heads")
  meter(10)  # the clock starts: no rate yet, no line
  assert not lines and meter.rate is None
  meter._first = (meter._first[0] - 10.0, meter._first[1])  # as if 10 s had passed
  meter(50)
  assert abs(meter.rate - 5.0) < 0.1 and len(lines) == 1
  assert lines[0].startswith("  l0 heads: 160/1,000 chain steps, 5 steps/s, ETA of the run 2 min 4")
  assert progress.duration(3725) == "1 h 02 min" and progress.duration(np.nan) == "unknown"
