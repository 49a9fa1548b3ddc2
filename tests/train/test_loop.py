"""The training core: vmap over seeds, chunking, resume, the NaN guard, metrics files."""

import functools
import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mechjax.studies import workdir as workdir_lib
from mechjax.train import checkpoint as ckpt_lib
from mechjax.train import loop
from mechjax.train import metrics as metrics_lib
from mechjax.train import schedule


def linear_problem(dim=4):
  """Noisy linear regression with data drawn from the step key."""
  w_true = jnp.arange(1.0, dim + 1)

  def init(key):
    return {"w": 0.1 * jax.random.normal(key, (dim,))}

  def loss(params, key):
    kx, kn = jax.random.split(key)
    x = jax.random.normal(kx, (8, dim))
    y = x @ w_true + 0.1 * jax.random.normal(kn, (8,))
    return jnp.mean((x @ params["w"] - y) ** 2), {"w_norm": jnp.linalg.norm(params["w"])}

  def evaluate(params, key):
    return {"err": jnp.linalg.norm(params["w"] - w_true)}

  return loop.Problem(init, loss, evaluate)


def run_chunks(problem, opt, keys, lengths):
  chunk = loop.make_chunk_fn(problem, opt)
  state = jax.vmap(functools.partial(loop.init_state, problem, opt))(keys)
  for n in lengths:
    state, _, _ = chunk(state, n)
  return state


@pytest.mark.slow
def test_vmap_over_seeds_equals_single_seed_runs():
  problem, opt = linear_problem(), optax.sgd(0.05)
  keys = loop.seed_keys(3, 4)
  together = run_chunks(problem, opt, keys, [60])
  for i in range(4):
    alone = run_chunks(problem, opt, keys[i : i + 1], [60])
    np.testing.assert_allclose(together["params"]["w"][i], alone["params"]["w"][0], atol=1e-6)
  # Different seeds really are different runs.
  assert float(jnp.max(jnp.abs(together["params"]["w"][0] - together["params"]["w"][1]))) > 1e-4


@pytest.mark.slow
def test_chunking_does_not_change_the_run():
  problem, opt = linear_problem(), optax.adam(0.01)
  keys = loop.seed_keys(0, 2)
  a = run_chunks(problem, opt, keys, [100])
  b = run_chunks(problem, opt, keys, [30, 70])
  np.testing.assert_allclose(a["params"]["w"], b["params"]["w"], atol=1e-6)
  assert int(b["step"][0]) == 100


def test_chunk_ends():
  assert schedule.chunk_ends(0, 10, 4, 6) == [4, 6, 8, 10]
  assert schedule.chunk_ends(6, 10, 4, 6) == [8, 10]
  assert schedule.chunk_ends(0, 3, 100, 100) == [3]


@pytest.mark.slow
def test_train_writes_metrics_and_resumes_in_process(tmp_path):
  problem, opt = linear_problem(), optax.sgd(0.05)
  keys = loop.seed_keys(0, 3)
  full = loop.train(
    problem,
    opt,
    keys=keys,
    steps=200,
    workdir=tmp_path / "a",
    log_every=50,
    checkpoint_every=100,
    progress=False,
  )
  assert [r["step"] for r in full.history] == [50, 100, 150, 200]
  assert len(full.history[0]["train_loss"]) == 3 and len(full.history[0]["err"]) == 3
  assert max(full.history[-1]["err"]) < 0.2  # started near |w_true| = 5.5

  # Stop after 150 steps (checkpoint at 100, lines up to 150), then resume to 200.
  part = tmp_path / "b"
  loop.train(
    problem,
    opt,
    keys=keys,
    steps=150,
    workdir=part,
    log_every=50,
    checkpoint_every=100,
    progress=False,
  )
  with ckpt_lib.Checkpointer(part / "checkpoints" / "main") as c:
    assert c.latest_step() == 150
  # Drop the step-150 checkpoint to mimic a process killed between checkpoints.
  import shutil

  shutil.rmtree(part / "checkpoints" / "main" / "150")
  resumed = loop.train(
    problem,
    opt,
    keys=keys,
    steps=200,
    workdir=part,
    log_every=50,
    checkpoint_every=100,
    progress=False,
  )
  assert resumed.resumed_from == 100
  assert [r["step"] for r in resumed.history] == [50, 100, 150, 200]
  np.testing.assert_allclose(resumed.state["params"]["w"], full.state["params"]["w"], atol=1e-6)
  for ra, rb in zip(full.history, resumed.history):
    np.testing.assert_allclose(ra["train_loss"], rb["train_loss"], atol=1e-6)
    np.testing.assert_allclose(ra["err"], rb["err"], atol=1e-6)

  # Extra checkpoints at irregular steps, run as power-of-two pieces: the same run, saved where
  # asked.
  extra = loop.train(
    problem,
    opt,
    keys=keys,
    steps=200,
    workdir=tmp_path / "c",
    log_every=50,
    checkpoint_every=100,
    progress=False,
    keep_checkpoints=None,
    checkpoint_steps=[2, 52],
    binary_chunks=True,
  )
  assert [r["step"] for r in extra.history] == [
    2,
    50,
    52,
    100,
    150,
    200,
  ]  # pieces of 2, 16 and 32 steps
  np.testing.assert_allclose(extra.state["params"]["w"], full.state["params"]["w"], atol=1e-6)
  saved = loop.checkpoint_params(problem, opt, keys=keys, workdir=tmp_path / "c")
  assert sorted(saved) == [2, 52, 100, 200]
  np.testing.assert_allclose(saved[200]["w"], full.state["params"]["w"], atol=1e-6)
  with pytest.raises(FileNotFoundError, match=r"no checkpoint for steps \[8\]"):
    loop.checkpoint_params(problem, opt, keys=keys, workdir=tmp_path / "c", steps=[2, 8])
  # (initial_params, for fine-tuning, is tested by the backdoor experiment's end-to-end test.)


@pytest.mark.slow
def test_nan_guard_names_step_and_seed_and_keeps_last_checkpoint(tmp_path):
  problem = linear_problem()
  keys = loop.seed_keys(0, 2)
  # Stable for 100 steps at a small rate, then the run continues in the same workdir... with a huge
  # rate.
  loop.train(
    problem,
    optax.sgd(0.01),
    keys=keys,
    steps=100,
    workdir=tmp_path,
    log_every=50,
    checkpoint_every=50,
    progress=False,
  )
  with pytest.raises(
    loop.NonFiniteError,
    match=r"non-finite (loss at step|parameters after step) 1\d\d \(seed \d\).*"
    r"last good checkpoint: step 100",
  ):
    loop.train(
      problem,
      optax.sgd(1e9),
      keys=keys,
      steps=300,
      workdir=tmp_path,
      log_every=50,
      checkpoint_every=50,
      progress=False,
    )
  with ckpt_lib.Checkpointer(tmp_path / "checkpoints" / "main") as c:
    assert c.latest_step() == 100
  rows = metrics_lib.read_jsonl(tmp_path / "metrics.jsonl")
  assert max(r["step"] for r in rows) == 100  # nothing from the bad chunk was written


def test_train_names_the_exact_step_whose_loss_is_non_finite(tmp_path):
  """w starts at 5.5 and SGD(1) on loss = w lowers it by 1 per step: step t sees w = 6.5 - t, NaN
  from t = 7."""
  problem = loop.Problem(
    init=lambda key: {"w": jnp.float32(5.5)},
    loss=lambda p, key: (p["w"] + jnp.where(p["w"] < 0, jnp.nan, 0.0), {}),
  )
  with pytest.raises(
    loop.NonFiniteError, match=r"non-finite loss at step 7 \(seed 0\).*last good checkpoint: step 4"
  ):
    loop.train(
      problem,
      optax.sgd(1.0),
      keys=loop.seed_keys(0, 2),
      steps=12,
      workdir=tmp_path,
      log_every=4,
      checkpoint_every=4,
      progress=False,
    )


def test_nan_guard_reports_the_first_bad_step():
  loss = np.ones((3, 10))
  loss[2, 7] = np.nan
  loss[1, 4] = np.inf
  with pytest.raises(loop.NonFiniteError, match=r"loss at step 25 \(seed 1\)"):
    loop._check_finite(loss, np.ones(3, bool), first_step=21, name="r", last_good=None)
  with pytest.raises(loop.NonFiniteError, match=r"parameters after step 30 \(seed 2\)"):
    loop._check_finite(
      np.ones((3, 10)), np.array([True, True, False]), first_step=21, name="r", last_good=20
    )


def test_metrics_truncation_keeps_other_runs(tmp_path):
  path = tmp_path / "metrics.jsonl"
  a, b = metrics_lib.MetricsWriter(path, "a"), metrics_lib.MetricsWriter(path, "b")
  for s in (1, 2, 3):
    a.write(s, {"x": [s]})
    b.write(s, {"x": [s]})
  with open(path, "a") as f:
    f.write('{"run": "a", "st')  # a torn line from a killed writer
  a.truncate_after(2)
  assert [r["step"] for r in a.history()] == [1, 2]
  assert [r["step"] for r in b.history()] == [1, 2, 3]


def test_workdir_rules(tmp_path):
  cfg = {"steps": 10, "alpha": ["0"], "workdir": "x", "overwrite": False}
  wd = str(tmp_path / "run")
  assert workdir_lib.prepare(wd, cfg) is workdir_lib.Status.NEW
  assert json.loads(pathlib.Path(wd, "config.json").read_text())["steps"] == 10
  assert workdir_lib.prepare(wd, {**cfg, "workdir": "y"}) is workdir_lib.Status.RESUME
  with pytest.raises(workdir_lib.WorkdirError, match=r"--steps=10 \(now 20\)"):
    workdir_lib.prepare(wd, {**cfg, "steps": 20})
  metrics_lib.write_json(os.path.join(wd, "summary.json"), {})
  assert workdir_lib.prepare(wd, cfg) is workdir_lib.Status.COMPLETE
  assert workdir_lib.prepare(wd, {**cfg, "steps": 20}, overwrite=True) is workdir_lib.Status.NEW
  assert not os.path.exists(os.path.join(wd, "summary.json"))
  other = tmp_path / "not_a_run"
  other.mkdir()
  (other / "precious.txt").write_text("keep me")
  with pytest.raises(workdir_lib.WorkdirError, match="holds no mechjax run"):
    workdir_lib.prepare(str(other), cfg, overwrite=True)
  assert (other / "precious.txt").exists()


def teacher_problem(dim=3):
  """Regression on a teacher that each member brings in ``member_data``."""

  def loss(params, key, teacher):
    x = jax.random.normal(key, (8, dim))
    return jnp.mean((x @ params["w"] - x @ teacher["w"]) ** 2), {}

  def evaluate(params, key, teacher):
    return {"err": jnp.linalg.norm(params["w"] - teacher["w"])}

  return loop.Problem(lambda k: {"w": 0.1 * jax.random.normal(k, (dim,))}, loss, evaluate)


def test_member_data_gives_each_member_its_own_teacher_and_resumes_only_with_it(tmp_path):
  problem, opt = teacher_problem(), optax.sgd(0.1)
  keys = loop.seed_keys(0, 3)
  teachers = {"w": jnp.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -3.0]])}
  kw = dict(steps=40, log_every=20, checkpoint_every=20, progress=False)
  together = loop.train(
    problem, opt, keys=keys, workdir=tmp_path / "all", member_data=teachers, **kw
  )
  # Each member learned its own teacher, and equals the member trained alone with that teacher.
  np.testing.assert_allclose(together.state["params"]["w"], teachers["w"], atol=1e-2)
  for i in range(3):
    alone = loop.train(
      problem,
      opt,
      keys=keys[i : i + 1],
      workdir=tmp_path / f"alone{i}",
      member_data=jax.tree.map(lambda a: a[i : i + 1], teachers),
      **kw,
    )
    np.testing.assert_array_equal(alone.state["params"]["w"][0], together.state["params"]["w"][i])
  assert len(together.history[-1]["err"]) == 3
  # The checkpoints hold the teachers; params_at restores with them.
  saved = together.params_at([20])[20]
  assert saved["w"].shape == (3, 3)
  # A resume with other member data is refused, by name; a bad leading axis too.
  with pytest.raises(ValueError, match="other member_data"):
    loop.train(
      problem,
      opt,
      keys=keys,
      workdir=tmp_path / "all",
      member_data={"w": -teachers["w"]},
      **{**kw, "steps": 60},
    )
  with pytest.raises(ValueError, match=r"member_data\['w'\] must have the seed axis \(3"):
    loop.train(
      problem, opt, keys=keys, workdir=tmp_path / "bad", member_data={"w": teachers["w"][:2]}, **kw
    )
