"""The experiment as a user runs it: flags, workdir rules, the NaN guard, and resume after
SIGKILL."""

import functools
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import optax
import pytest

from mechjax import cli
from mechjax.errors import InputError
from mechjax.studies.fourier import fourier_phase
from mechjax.studies.frame import StudyStopped
from mechjax.train import checkpoint as ckpt_lib
from mechjax.train import loop
from mechjax.train import metrics as metrics_lib
from tests.helpers import ROOT
from tests.helpers import check_report
from tests.helpers import run_module

SMALL = [
  "--tasks=amplitude",
  "--width=16",
  "--eval_samples=256",
  "--num_seeds=2",
  "--batch_size=32",
]
RUN = "amplitude_alpha0_vs_1"


# Every refused value is checked in-process in tests/test_config.py; these run the real command
# line.
@pytest.mark.slow
@pytest.mark.parametrize(
  "flag,name", [("--steps=0", "--steps"), ("--shape=abc", "--shape"), ("--alpha=1,1.0", "--alpha")]
)
def test_bad_flag_gives_one_line_and_nonzero_exit(flag, name, tmp_path):
  r = run_module("experiments.fourier_phase", flag, f"--workdir={tmp_path / 'w'}")
  assert r.returncode != 0
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1, r.stderr
  assert r.returncode == 2 and name in lines[0] and "must" in lines[0]
  assert "Traceback" not in r.stderr + r.stdout
  assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_a_bad_multihost_setting_gives_one_line(tmp_path):
  env = {**os.environ, "MECHJAX_DISTRIBUTED": "1", "MECHJAX_PROCESS_ID": "first"}
  r = run_module("experiments.template", f"--workdir={tmp_path / 'w'}", env=env)
  assert r.returncode == 2, r.stderr
  assert r.stderr.strip() == "error: MECHJAX_PROCESS_ID='first' must be an integer", r.stderr
  assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_huge_learning_rate_stops_with_the_nan_message(tmp_path):
  wd = tmp_path / "nan"
  r = run_module(
    "experiments.fourier_phase",
    *SMALL,
    "--learning_rate=1e9",
    "--steps=400",
    "--log_every=100",
    "--checkpoint_every=100",
    f"--workdir={wd}",
  )
  assert r.returncode == 1, r.stderr
  assert "Traceback" not in r.stderr
  err = [l for l in r.stderr.splitlines() if l.startswith("error:")]
  assert len(err) == 1 and "non-finite" in err[0] and "step" in err[0] and "seed" in err[0], (
    r.stderr
  )
  assert not (wd / "summary.json").exists()


def _check_finished_run(wd, args):
  """The files and report of the finished run in ``wd`` (run with ``args``), then: run again, it
  is not retrained; with another --steps, it is refused in one line naming the recorded value."""
  for f in (
    "config.json",
    "metrics.jsonl",
    "summary.json",
    "figures/amplitude_vs_phase.png",
    "figures/information_used.png",
  ):
    assert (wd / f).exists(), f
  check_report(wd)
  page = (wd / "report.html").read_text()
  assert page.index("<h2>Results</h2>") < page.index("<img") < page.index("<h2>Config")
  assert "shaded bands: ±1 sd over seeds" in page  # the figures' captions
  before = {f: (wd / f).stat().st_mtime_ns for f in ("metrics.jsonl", "summary.json")}
  r = run_module("experiments.fourier_phase", *args, f"--workdir={wd}")
  assert r.returncode == 0 and "complete" in r.stdout
  assert {f: (wd / f).stat().st_mtime_ns for f in before} == before
  r = run_module("experiments.fourier_phase", *args, "--steps=300", f"--workdir={wd}")
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "--steps=16000" in r.stderr, r.stderr


def _final_state(wd, steps_args):
  cfg = fourier_phase.Config().replace(
    tasks=("amplitude",), width=16, eval_samples=256, num_seeds=2, batch_size=32
  )
  problem = fourier_phase.make_problem(cfg, fourier_phase.conditions(cfg)[0])
  opt = optax.sgd(cfg.learning_rate)
  abstract = jax.eval_shape(
    jax.vmap(functools.partial(loop.init_state, problem, opt)), loop.seed_keys(0, 2)
  )
  with ckpt_lib.Checkpointer(os.path.join(wd, "checkpoints", RUN)) as c:
    assert c.latest_step() == steps_args
    return c.restore(abstract)


@pytest.mark.slow
@pytest.mark.compute_bound
def test_sigkill_then_rerun_matches_uninterrupted_run(tmp_path):
  """A run killed between checkpoints, run again, ends as the uninterrupted run does. The
  uninterrupted run, finished, is not retrained when run again and refuses other settings; with
  --overwrite it starts afresh."""
  steps = 16000
  args = [*SMALL, f"--steps={steps}", "--log_every=1000", "--checkpoint_every=2000"]
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  r = run_module("experiments.fourier_phase", *args, f"--workdir={straight}")
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip().splitlines()[-1].endswith(f"open {straight}/report.html")  # the last line
  _check_finished_run(straight, args)

  env = {**os.environ, "PYTHONPATH": ROOT}
  proc = subprocess.Popen(
    [sys.executable, "-m", "experiments.fourier_phase", *args, f"--workdir={killed}"],
    cwd=ROOT,
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  # Kill between checkpoints: once a checkpoint is on disk (saves are asynchronous: orbax renames a
  # finished step's folder to the bare step number) and a metrics line has been written after it, so
  # the rerun must both restore that checkpoint and drop the line.
  metrics, ckpts = killed / "metrics.jsonl", killed / "checkpoints" / RUN
  deadline = time.time() + 300
  while proc.poll() is None and time.time() < deadline:
    done = [int(p.name) for p in ckpts.iterdir() if p.name.isdigit()] if ckpts.exists() else []
    if done and any(r["step"] > max(done) for r in metrics_lib.read_jsonl(metrics)):
      break
    time.sleep(0.005)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  with ckpt_lib.Checkpointer(killed / "checkpoints" / RUN) as c:
    at_kill = c.latest_step()
  assert at_kill is not None and at_kill < steps, "the run was not killed mid-way"
  assert max(r["step"] for r in metrics_lib.read_jsonl(metrics)) > at_kill, (
    "no line after the checkpoint to drop"
  )
  assert not (killed / "summary.json").exists()

  r = run_module("experiments.fourier_phase", *args, f"--workdir={killed}")
  assert r.returncode == 0, r.stderr
  assert f"step {at_kill + 1000}/{steps}" in r.stderr and "step 1000/" not in r.stderr  # it resumed
  a, b = _final_state(straight, steps), _final_state(killed, steps)
  diffs = jax.tree.leaves(
    jax.tree.map(
      lambda x, y: float(np.max(np.abs(np.asarray(x, float) - np.asarray(y, float)))),
      a["params"],
      b["params"],
    )
  )
  assert max(diffs) <= 1e-6
  rows_a = metrics_lib.read_jsonl(straight / "metrics.jsonl")
  rows_b = metrics_lib.read_jsonl(killed / "metrics.jsonl")
  assert (
    [r["step"] for r in rows_a] == [r["step"] for r in rows_b] == list(range(1000, steps + 1, 1000))
  )
  for ra, rb in zip(rows_a, rows_b):
    for k in ("train_loss", "test_loss", "test_acc"):
      np.testing.assert_allclose(ra[k], rb[k], atol=1e-6)
  summary_mtime = (straight / "summary.json").stat().st_mtime_ns
  sa = json.loads((straight / "summary.json").read_text())
  sb = json.loads((killed / "summary.json").read_text())
  assert sa["conditions"] == sb["conditions"]
  # --overwrite starts afresh, here with settings of its own.
  again = [*SMALL, "--steps=200", "--log_every=100", f"--workdir={straight}", "--overwrite"]
  r = run_module("experiments.fourier_phase", *again)
  assert r.returncode == 0 and "step 200/200" in r.stderr, r.stderr
  assert (straight / "summary.json").stat().st_mtime_ns != summary_mtime


@pytest.mark.parametrize(
  "error,code",
  [(StudyStopped("no share qualifies;\n raise --x"), 1), (InputError("--x must be 1"), 2)],
)
def test_a_study_that_stops_or_a_refused_input_exits_with_one_line(
  error, code, monkeypatch, capsys
):
  monkeypatch.setattr(sys, "argv", ["study"])

  def main(argv):
    raise error

  with pytest.raises(SystemExit) as e:
    cli.execute(main)
  assert e.value.code == code
  assert capsys.readouterr().err == f"error: {' '.join(str(error).split())}\n"


def test_mechjax_warnings_print_as_one_line_and_others_as_python_does():
  from mechjax.data.tokens import CorpusWarning

  said = cli._format_warning(
    CorpusWarning("the corpus records no tokenizer"), CorpusWarning, "f.py", 7
  )
  assert said == "warning: the corpus records no tokenizer\n"
  other = cli._format_warning(UserWarning("x"), UserWarning, "f.py", 7, line="call()")
  assert "f.py:7: UserWarning: x" in other
