"""The LLC-over-training study: its settings, resuming, and the experiment end to end (the deep
linear network and its teacher: tests/models/test_deep_linear.py)."""

import json
import os

import pytest

from mechjax.slt import closed_forms as cf
from mechjax.studies.llc import llc_dynamics
from tests.helpers import check_report
from tests.helpers import expect_unmixed

TINY = dict(
  widths=(3, 3, 3),
  singular_values=(2.0, 1.0),
  n=512,
  steps=40,
  log_every=20,
  checkpoint_every=20,
  num_seeds=1,
  llc_chains=2,
  llc_draws=30,
  llc_burnin=5,
  llc_batch_size=64,
  localization=(100.0,),
  learning_rate=0.1,
  init_scale=0.1,
)
TINY_CONFIGS = {"llc_dynamics": TINY}  # the end-to-end run (.ci/tiny_summaries.py runs it too)


def test_config_refuses_a_teacher_wider_than_the_network():
  with pytest.raises(ValueError, match="narrowest"):
    llc_dynamics.Config(widths=(3, 2, 3), singular_values=(1.0, 1.0, 1.0))


@expect_unmixed
@pytest.mark.slow
def test_resumed_run_reuses_the_llc_of_finished_checkpoints(tmp_path, monkeypatch):
  cfg = llc_dynamics.Config().replace(**TINY)
  first = llc_dynamics.run(cfg, str(tmp_path), progress=False)
  lines = (tmp_path / "llc.jsonl").read_text().splitlines()
  assert [json.loads(line)["item"] for line in lines] == [20, 40]  # one line per checkpoint
  # A checkpoint torn mid-way (its line cut short) is recomputed; the finished one is not.
  with open(tmp_path / "llc.jsonl", "w") as f:
    f.write(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
  calls = []
  original = llc_dynamics.llc_lib.estimate_llc_batch
  monkeypatch.setattr(
    llc_dynamics.llc_lib,
    "estimate_llc_batch",
    lambda *a, **k: calls.append(k["key"]) or original(*a, **k),
  )
  os.remove(tmp_path / "summary.json")
  second = llc_dynamics.run(cfg, str(tmp_path), progress=False)
  assert len(calls) == 1  # one program for the one missing checkpoint (padded), one γ
  assert (
    second["localizations"] == first["localizations"]
  )  # same keys: the recomputed row is bit for bit the same


@pytest.mark.slow
def test_experiment_writes_summary_and_figure(tmp_path, run_cli):
  args = [
    f"--workdir={tmp_path / 'run'}",
    "--widths=3,3,3",
    "--singular_values=2,1",
    "--n=512",
    "--steps=40",
    "--log_every=20",
    "--checkpoint_every=20",
    "--num_seeds=1",
    "--llc_chains=2",
    "--llc_draws=30",
    "--llc_burnin=5",
    "--llc_batch_size=64",
    "--localization=100",
    "--init_scale=0.1",
    "--learning_rate=0.1",
  ]
  done = run_cli("experiments.llc_dynamics", *args)
  assert done.returncode == 0, done.stderr[-2000:]
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  # Two layers 3-3-3 are reduced-rank regression 3-3-3: the two closed forms must agree.
  assert summary["closed_form_llc_by_rank"] == [
    float(cf.reduced_rank_regression(3, 3, 3, r)[0]) for r in range(3)
  ]
  assert os.path.getsize(tmp_path / "run" / "figures" / "llc_dynamics.png") > 10_000
  assert check_report(tmp_path / "run") == ["figures/llc_dynamics.png"]
  assert "final LLC" in done.stdout and "chains: R̂ ≤ " in done.stdout
  # Whether the chains mixed, the worst over checkpoints: 2 chains of 30 draws have an ESS < 200.
  mixed = summary["localizations"]["100"]
  assert mixed["rhat_max"] > 0.9 and 0 < mixed["ess_bulk_min"] < 200, mixed
  # A refused setting stops the command before anything is written (each refused value is checked
  # in-process in tests/test_config.py).
  too_deep = run_cli(
    "experiments.llc_dynamics",
    f"--workdir={tmp_path / 'bad'}",
    "--widths=3,2,3",
    "--singular_values=2,1,1",
  )
  assert (
    too_deep.returncode == 2 and "narrowest" in too_deep.stderr and not (tmp_path / "bad").exists()
  )
