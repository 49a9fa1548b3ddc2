"""The tensor-similarity experiments end to end at toy size (their data: tests/data/test_digits.py,
tests/data/test_modular.py; their measures: tests/similarity/test_checkpoints.py)."""

import json
import os

import numpy as np
import pytest

from mechjax.studies.tensor_similarity import tensor_similarity_backdoor
from mechjax.studies.tensor_similarity import tensor_similarity_grokking
from tests.helpers import as_flags
from tests.helpers import check_report
from tests.helpers import run_module

# The end-to-end runs (.ci/tiny_summaries.py runs them too).
TINY_CONFIGS = {
  "tensor_similarity_grokking": dict(
    p=7,
    hidden=8,
    num_seeds=1,
    steps=64,
    num_checkpoints=4,
    log_every=32,
    batch_size=16,
    learning_rate=0.01,
    weight_decays=(0.01, 3.0),
  ),
  "tensor_similarity_backdoor": dict(
    hidden=16,
    steps=100,
    checkpoint_every=100,
    log_every=50,
    poison_steps=40,
    poison_checkpoint_every=10,
    poison_fraction=0.5,
    learning_rate=0.01,
    num_seeds=1,
  ),
}


@pytest.mark.slow
def test_grokking_experiment_end_to_end(tmp_path):
  wd = tmp_path / "g"
  args = [*as_flags(TINY_CONFIGS["tensor_similarity_grokking"]), f"--workdir={wd}"]
  r = run_module("experiments.tensor_similarity_grokking", *args)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "Pearson r with logit cosine" in r.stdout
  summary = json.loads((wd / "summary.json").read_text())
  # Chunk ends 4, 16, 32, 36, 64 run as pieces of 16, 8 and 4 steps: three compiled programs.
  assert summary["checkpoint_steps"] == [0, 4, 16, 36, 64]
  # Two weight decays trained side by side in one program, each member paired with the same seed.
  assert [(s["weight_decay"], s["seed"]) for s in summary["seeds"]] == [(0.01, 0), (3.0, 0)]
  assert set(summary["by_weight_decay"]) == {"0.01", "3.0"}
  w_small, w_large = (s["similarity_init_to_final"]["weight_cosine"] for s in summary["seeds"])
  assert w_small != w_large  # the decay reached the optimizer: the runs differ
  seed = summary["seeds"][0]
  assert np.isfinite(summary["pearson_r_tensor_vs_logit_cosine"])
  assert seed["final_train_acc"] > 0.5  # 64 steps at lr 0.01 fit 15 training pairs
  sims = np.load(wd / "similarity.npz")
  for m in tensor_similarity_grokking.MEASURES:
    assert sims[f"seed1/{m}"].shape == (5, 5)
    mat = sims[f"seed0/{m}"]
    assert mat.shape == (5, 5)
    np.testing.assert_allclose(mat, mat.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(mat), 1.0, atol=1e-5)
  assert sims["seed0/tensor"][0, -1] < 0.99  # training moved the function
  for f in summary["figures"]:
    assert (wd / "figures" / f).stat().st_size > 0
  assert sorted(check_report(wd)) == sorted(f"figures/{f}" for f in summary["figures"])


@pytest.mark.slow
def test_backdoor_experiment_end_to_end(tmp_path):
  wd = tmp_path / "b"
  r = run_module(
    "experiments.tensor_similarity_backdoor",
    *as_flags(TINY_CONFIGS["tensor_similarity_backdoor"]),
    f"--workdir={wd}",
  )
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((wd / "summary.json").read_text())
  assert summary["checkpoint_steps"] == [10, 20, 30, 40]
  seed = summary["seeds"][0]
  assert seed["clean_test_acc"] > 0.5 and seed["clean_attack_success"] < 0.5
  assert seed["final_attack_success"] >= 0.5, (
    seed
  )  # half the batches poisoned at lr 0.01 plant the trigger
  onset = seed["onset"]
  assert onset is not None and "onset at fine-tuning step" in r.stdout
  for m in tensor_similarity_backdoor.MEASURES:
    assert 0 < onset["similarity_poisoned"][m] <= 1 + 1e-6
  # Both fine-tunes start from the clean weights (a fresh start would be near 0 in tensor
  # similarity).
  assert onset["similarity_continued"]["tensor"] > 0.9, onset
  curves = json.loads((wd / "similarity.json").read_text())["0"]
  assert len(curves["poisoned"]["tensor"]) == len(curves["continued"]["tensor"]) == 4
  assert os.path.getsize(wd / "figures" / "backdoor_similarity.png") > 0
  assert "figures/backdoor_similarity.png" in check_report(wd)
