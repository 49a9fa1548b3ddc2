"""--tensorboard: event files that TensorBoard's own reader loads, mirroring metrics.jsonl."""

import json
import os

import numpy as np
import pytest

from mechjax.train import metrics as metrics_lib
from tests.helpers import run_module

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _scalars(folder: str) -> dict[str, list[tuple[int, float]]]:
  acc = event_accumulator.EventAccumulator(folder, size_guidance={"scalars": 0})
  acc.Reload()
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_writer_mirrors_rows_per_seed_and_purges_after_a_resume(tmp_path):
  path = tmp_path / "metrics.jsonl"
  w = metrics_lib.MetricsWriter(path, "main", tensorboard=True)
  w.truncate_after(0)
  for step in (10, 20, 30):
    w.write(step, {"train_loss": np.array([1.0, 3.0]) / step, "lr": 0.1})
  w.close()
  # A resume from the checkpoint at step 20 rewrites step 30 with other values.
  w = metrics_lib.MetricsWriter(path, "main", tensorboard=True)
  w.truncate_after(20)
  w.write(30, {"train_loss": np.array([5.0, 7.0]), "lr": 0.1})
  w.close()
  scalars = _scalars(str(tmp_path / "tensorboard" / "main"))
  assert set(scalars) == {"train_loss/seed_0", "train_loss/seed_1", "train_loss/mean", "lr"}
  assert [s for s, _ in scalars["train_loss/mean"]] == [10, 20, 30]
  assert scalars["train_loss/mean"][-1][1] == pytest.approx(6.0)  # the resumed value, once
  assert scalars["train_loss/seed_0"][0][1] == pytest.approx(0.1)
  rows = metrics_lib.read_jsonl(path)
  assert [r["step"] for r in rows] == [10, 20, 30] and rows[-1]["train_loss"] == [5.0, 7.0]


def test_without_the_flag_nothing_is_written(tmp_path):
  w = metrics_lib.MetricsWriter(tmp_path / "metrics.jsonl", "main")
  w.write(1, {"loss": 1.0})
  w.close()
  assert not (tmp_path / "tensorboard").exists()


@pytest.mark.slow
def test_experiment_flag_writes_events_that_match_metrics_jsonl(tmp_path):
  wd = tmp_path / "tb"
  args = [
    "--tasks=amplitude",
    "--width=8",
    "--eval_samples=64",
    "--num_seeds=2",
    "--batch_size=16",
    "--steps=40",
    "--log_every=20",
    "--checkpoint_every=40",
    f"--workdir={wd}",
    "--tensorboard",
  ]
  r = run_module("experiments.fourier_phase", *args)
  assert r.returncode == 0, r.stderr
  runs = sorted(os.listdir(wd / "tensorboard"))
  rows = [json.loads(line) for line in (wd / "metrics.jsonl").read_text().splitlines()]
  assert runs == sorted({row["run"] for row in rows})
  for run in runs:
    scalars = _scalars(str(wd / "tensorboard" / run))
    mine = [row for row in rows if row["run"] == run]
    assert [s for s, _ in scalars["train_loss/mean"]] == [row["step"] for row in mine]
    np.testing.assert_allclose(
      [v for _, v in scalars["train_loss/seed_1"]],
      [row["train_loss"][1] for row in mine],
      rtol=1e-6,
    )
