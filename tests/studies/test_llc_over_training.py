"""llc_over_training: the LLC and the probes over a folder of checkpoints."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from mechjax.data import tokens
from mechjax.models import pretrained
from mechjax.models.pretrained import revisions
from mechjax.studies.language import llc_over_training
from mechjax.studies.language import llc_over_training_report
from mechjax.studies.language import probes
from tests.helpers import check_report
from tests.helpers import expect_unmixed

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


REVISIONS = os.path.join(HERE, "checkpoints", "revisions")  # written by transformers


def token_file(path, vocab: int = 61) -> str:
  """A token file of random ids below ``vocab`` that records no tokenizer (the revisions have
  none to check against)."""
  rng = np.random.default_rng(0)
  return tokens.write_tokens(path, [rng.integers(1, vocab, 200) for _ in range(8)], 0)


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


def test_revisions_are_ordered_by_step_and_duplicates_found(tmp_path):
  found, duplicates = revisions.revisions(REVISIONS)
  assert [r.step for r in found] == [0, 100, 1000, 2000]
  assert list(duplicates.values()) == [[1000, 2000]]
  assert len({r.weights for r in found}) == 3
  folder = tmp_path / "revs"
  shutil.copytree(REVISIONS, folder)
  (folder / "final").mkdir()
  (folder / "final" / "config.json").write_text("{}")
  with pytest.raises(pretrained.CheckpointError, match="no step number in the folder's name"):
    revisions.revisions(folder)
  shutil.rmtree(folder / "final")
  with pytest.raises(pretrained.CheckpointError, match="it is itself a checkpoint"):
    revisions.revisions(folder / "step0")
  shutil.copytree(folder / "step0", folder / "step00")
  with pytest.raises(pretrained.CheckpointError, match="step0 and step00 both name step 0"):
    revisions.revisions(folder)


@pytest.mark.filterwarnings("ignore::mechjax.data.tokens.CorpusWarning")
@expect_unmixed
@pytest.mark.slow
def test_llc_over_training_on_revisions_transformers_wrote(tmp_path, capsys):
  """Revisions of a GPT-NeoX model as transformers saved them, one a copy of another: every
  distinct checkpoint estimated once, the copy reported."""
  cfg = llc_over_training.Config().replace(
    checkpoints=REVISIONS,
    corpus=token_file(tmp_path / "corpus.tokens"),
    **TINY_CONFIGS["llc_over_training"],
  )
  summary = llc_over_training.run(cfg, tmp_path / "run", progress=True)
  out = capsys.readouterr().out
  assert (
    "plan: 4 checkpoints, steps 0 to 2000 (1 with the weights of another, estimated once)" in out
  )
  assert "2 restrictions (all, l0 attn+l0 mlp), each one program over the 3 distinct" in out
  assert "restriction 1/2 (all): 3 checkpoints × 2 chains × 10 steps in one program" in out
  assert re.search(r"restriction 2/2 \(l0 attn\+l0 mlp\) done in .*; ETA of the LLCs 0", out)
  assert summary["steps"] == [0, 100, 1000] and summary["duplicates"] == [[1000, 2000]]
  assert summary["checkpoints"][-1]["same_as"] == 1000
  for name, r in summary["llc"].items():
    assert len(r["llc"]) == 3 and np.all(np.isfinite(r["llc"])), name
  assert np.asarray(summary["probes"]["prefix_matching"]).shape == (3, 1, 2)
  saved = json.loads((tmp_path / "run" / "summary.json").read_text())
  verdict = llc_over_training_report.verdict(saved)
  assert "Identical weights under several steps, estimated once: 1000, 2000." in verdict
  assert any(line.startswith("Stages: ") for line in verdict)
  lines = llc_over_training_report.report(saved)
  assert len(lines) == 3 and all(
    re.search(r"LLC all \S+ ± \S+ \(R̂ [\d.]+, ESS \d+\)", x) for x in lines
  )
  assert check_report(tmp_path / "run") == ["figures/landscape.png"]
