"""The progress line: a run's own ETA and, in a study of several runs, its position among them and
the ETA of all of them (mechjax.train.progress, frame.Context.plan)."""

import dataclasses
import io

import jax
import jax.numpy as jnp
import optax
import pytest

from mechjax import config
from mechjax.studies import frame
from mechjax.train import progress as progress_lib


class Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_overall_eta_counts_the_runs_still_to_come(monkeypatch):
  clock = Clock()
  monkeypatch.setattr(progress_lib.time, "perf_counter", clock)
  out = io.StringIO()
  plan = progress_lib.Plan(3, "condition")

  def run(updates):
    plan.begin()
    bar = progress_lib.Progress("c", 100, 0, stream=out, plan=plan)
    for t, step in updates:
      clock.now = t
      bar.update(step)
    plan.end()

  run([(5, 10), (10, 60), (14, 100)])  # 10 steps/s after compiling: 4 s left at step 60
  clock.now = 20.0  # analysis between runs
  run([(21, 10), (26, 60)])
  lines = out.getvalue().splitlines()
  assert lines[0].startswith("[c] condition 1/3 | step 10/100") and "ETA ? (all: ?)" in lines[0]
  # Before any run has finished, each run to come is taken to last as long as this one will:
  # 4 s left + 2 runs x (10 s so far + 4 s) = 32 s.
  assert "ETA 0:00:04 (all: 0:00:32)" in lines[1]
  assert "ETA 0:00:00 (all: 0:00:28)" in lines[2]
  # Then the finished runs' mean duration (14 s): while compiling, 14 - 1 s left + 1 run x 14 s;
  # after, 4 s left + 1 run x 14 s.
  assert lines[3].startswith("[c] condition 2/3") and "ETA ? (all: 0:00:27)" in lines[3]
  assert lines[4].startswith("[c] condition 2/3") and "ETA 0:00:04 (all: 0:00:18)" in lines[4]


def test_a_run_found_complete_is_not_averaged(monkeypatch):
  clock = Clock()
  monkeypatch.setattr(progress_lib.time, "perf_counter", clock)
  plan = progress_lib.Plan(3)
  plan.begin()  # a rerun finds this run finished: no progress line, no time
  plan.end()
  plan.begin()
  clock.now = 4.0
  assert plan.eta(2.0) == pytest.approx(2.0 + 1 * 6.0) and plan.position() == "run 2/3"


def test_a_plan_without_runs_is_refused():
  with pytest.raises(ValueError, match="at least one run"):
    progress_lib.Plan(0)


def test_without_a_plan_the_line_is_unchanged():
  out = io.StringIO()
  bar = progress_lib.Progress("main", 10, 0, stream=out)
  bar.update(5)
  assert out.getvalue().startswith("[main] step 5/10 (50%) | compiling | ETA ?\n")


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=4, log_every=2, checkpoint_every=4, num_seeds=1)
  )


def problem():
  from mechjax.train import loop

  def init(key):
    return {"w": jax.random.normal(key, (2,))}

  def loss(params, key):
    return jnp.sum(params["w"] ** 2), {}

  return loop.Problem(init, loss, lambda params, key: {})


def two_runs_science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Two training runs, planned."""
  ctx.plan(2, "condition")
  for name in ("a", "b"):
    ctx.train(name, problem(), optax.sgd(0.1))
  return frame.Outputs({"done": True})


two_runs = frame.Study("two_runs", Config, two_runs_science).run


def test_a_study_that_plans_its_runs_shows_their_position(tmp_path, capfd):
  two_runs(Config(), tmp_path)
  err = capfd.readouterr().err.splitlines()
  assert [line.split(" | ")[0] for line in err] == [
    "[a] condition 1/2",
    "[a] condition 1/2",
    "[b] condition 2/2",
    "[b] condition 2/2",
  ]
  assert all("(all: " in line for line in err)
