"""llc_over_training: the LLC and the probes over a folder of checkpoints."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from mechjax.data import language
from mechjax.models import pretrained
from mechjax.models.pretrained import revisions
from mechjax.studies.language import llc_over_training
from mechjax.studies.language import llc_over_training_report
from mechjax.studies.language import probes
from mechjax.studies.language import train_lm
from tests.helpers import check_report
from tests.helpers import expect_unmixed
from tests.helpers import write_wiki_dump
from tests.studies.test_train_lm import TINY_CONFIGS as TRAIN

TINY_CONFIGS = {
  "llc_over_training": dict(
    seq_len=8,
    num_windows=32,
    probe_sequences=16,
    num_chains=2,
    num_draws=8,
    num_burnin=2,
    batch_size=4,
  )
}
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pretrained")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A tiny train_lm run's exports (steps 0, 1, 6 of seed 0) and its corpus."""
  folder = tmp_path_factory.mktemp("lm")
  dump = write_wiki_dump(folder / "dump.xml", n=12)
  corpus = language.make_corpus(folder / "corpus", vocab_size=300, heldout_every=4, dump=dump)
  cfg = train_lm.Config().replace(
    corpus=corpus.directory, num_seeds=1, **{k: v for k, v in TRAIN["train_lm"].items()}
  )
  summary = train_lm.run(cfg, folder / "run", progress=False)
  return summary["exports"][0], corpus


def test_critical_points_need_significant_slopes_on_both_sides():
  steps = [0, 1, 10, 100, 1000]
  llc = [0.0, 1.0, 5.0, 9.0, 4.0]  # rises, then falls after step 100
  tight = llc_over_training.critical_points(steps, llc, [0.1] * 5)
  assert tight == [{"step": 100, "from": 10, "to": 1000, "kind": "peak", "resolved": True}]
  loose = llc_over_training.critical_points(steps, llc, [5.0] * 5)
  assert [(c["step"], c["resolved"]) for c in loose] == [(100, False)]
  assert llc_over_training.critical_points(steps, [0, 1, 2, 3, 4], [0.1] * 5) == []
  # A flat top between a significant rise and fall: one resolved peak at its highest checkpoint.
  steps = [1, 10, 100, 1000, 10000, 100000]
  flat = llc_over_training.critical_points(steps, [1, 5, 9, 9.05, 4, 2], [0.1] * 6)
  assert flat == [{"step": 1000, "from": 10, "to": 10000, "kind": "peak", "resolved": True}]
  # A checkpoint whose LLC is negative beyond two standard errors is left out: with it, the rise
  # from -50 would make step 10 a peak.
  found = llc_over_training.critical_points([1, 10, 100, 1000], [-50, 5, 1, 6], [1] * 4)
  assert found == [{"step": 100, "from": 10, "to": 1000, "kind": "trough", "resolved": True}]
  with_it = llc_over_training.critical_points([1, 10, 100, 1000], [-50, 5, 1, 6], [100, 1, 1, 1])
  assert [c["step"] for c in with_it] == [10, 100]


def test_prefix_matching_is_uniform_attentions_at_initialisation():
  model, params = pretrained.load(os.path.join(HERE, "checkpoints", "gpt_neox"))
  seqs = probes.repeated_sequences(model.arch.vocab_size, 6, 8, seed=0)
  assert seqs.shape == (8, 12) and (seqs[:, :6] == seqs[:, 6:]).all()
  scores = np.asarray(probes.prefix_matching(model, params, seqs))
  assert scores.shape == (model.arch.num_layers, model.arch.num_heads)
  assert ((scores > 0) & (scores < 1)).all()


def test_revisions_are_ordered_by_step_and_duplicates_found(trained, tmp_path):
  exports, _ = trained
  folder = tmp_path / "revs"
  for name in ("step0", "step6", "step1"):
    shutil.copytree(os.path.join(exports, name), folder / name)
  shutil.copytree(os.path.join(exports, "step6"), folder / "step60")  # the same weights again
  found, duplicates = revisions.revisions(folder)
  assert [r.step for r in found] == [0, 1, 6, 60]
  assert list(duplicates.values()) == [[6, 60]]
  (folder / "final").mkdir()
  (folder / "final" / "config.json").write_text("{}")
  with pytest.raises(pretrained.CheckpointError, match="no step number in the folder's name"):
    revisions.revisions(folder)
  with pytest.raises(pretrained.CheckpointError, match="it is itself a checkpoint"):
    revisions.revisions(folder / "step0")


@expect_unmixed
@pytest.mark.slow
def test_llc_over_training_on_a_folder_it_did_not_write(trained, tmp_path, capsys):
  """A folder of revisions named as Pythia's are, one a copy of another: estimated once."""
  exports, corpus = trained
  folder = tmp_path / "revisions"
  for name, step in (("step0", 0), ("step1", 1000), ("step6", 6000)):
    shutil.copytree(os.path.join(exports, name), folder / f"step{step}")
  shutil.copytree(os.path.join(exports, "step6"), folder / "step7000")
  cfg = llc_over_training.Config().replace(
    checkpoints=str(folder), corpus=corpus.train, **TINY_CONFIGS["llc_over_training"]
  )
  summary = llc_over_training.run(cfg, tmp_path / "run", progress=True)
  out = capsys.readouterr().out
  assert (
    "plan: 4 checkpoints, steps 0 to 7000 (1 with the weights of another, estimated once)" in out
  )
  assert "2 restrictions (all, l0 attn+l0 mlp), each one program over the 3 distinct" in out
  assert summary["steps"] == [0, 1000, 6000] and summary["duplicates"] == [[6000, 7000]]
  assert summary["checkpoints"][-1]["same_as"] == 6000
  for name, r in summary["llc"].items():
    assert len(r["llc"]) == 3 and np.all(np.isfinite(r["llc"])), name
  assert np.asarray(summary["probes"]["prefix_matching"]).shape == (3, 1, 2)
  verdict = llc_over_training_report.verdict(
    json.loads((tmp_path / "run" / "summary.json").read_text())
  )
  assert "Identical weights under several steps, estimated once: 6000, 7000." in verdict
  assert any(line.startswith("Stages: ") for line in verdict)
  assert re.search(r"restriction 2/2 \(l0 attn\+l0 mlp\): 120/120 chain steps", out)
  assert check_report(tmp_path / "run") == ["figures/landscape.png"]
