"""The studies on pretrained checkpoints, end to end on the tiny checkpoints
(experiments.pretrained_llc)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from mechjax.data import tokens
from mechjax.studies import pretrained_llc
from tests.helpers import ROOT
from tests.helpers import check_report

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints")


def corpus(tmp_path):
  docs = np.random.default_rng(0).integers(1, 61, (20, 40))
  return tokens.write_tokens(tmp_path / "corpus.tokens", docs, eos_id=0)


def test_without_the_checkpoint_and_corpus_it_says_what_to_pass(tmp_path):
  r = subprocess.run(
    [sys.executable, "-m", "experiments.pretrained_llc", f"--workdir={tmp_path / 'run'}"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
  assert "model, corpus: required; pass --model:" in r.stderr and "huggingface-cli" in r.stderr
  assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.slow
def test_pretrained_llc_end_to_end_and_rerun(tmp_path):
  cfg = pretrained_llc.Config().replace(
    model=os.path.join(HERE, "gpt_neox"),
    corpus=corpus(tmp_path),
    seq_len=8,
    num_windows=64,
    num_probes=2,
    eval_size=32,
    num_chains=2,
    num_draws=10,
    num_burnin=5,
    batch_size=8,
  )
  summary = pretrained_llc.run(cfg, tmp_path / "run", progress=False)
  comps = summary["components"]
  assert list(comps)[:2] == ["all", "attn_0.head_0"] and len(comps) == 1 + 2 * (4 + 1)
  assert summary["probe_tokens"] == 2 * 7  # two windows of 8 tokens predict 7 each
  for c in comps.values():
    assert np.isfinite(c["llc"]) and 0 <= c["resolved_fraction"] <= 1
  saved = np.load(tmp_path / "run" / "susceptibilities.npz")
  assert saved["chi"].shape == (11, 14) and saved["probes"].shape == (2, 8)
  assert sorted(check_report(tmp_path / "run")) == ["figures/susceptibilities.png"]
  lines = pretrained_llc.report(summary)
  assert lines[0].startswith("  gpt_neox: 2 layers, d_model 32") and len(lines) == 12
  # A finished run is read back, not recomputed.
  assert pretrained_llc.run(cfg, tmp_path / "run", progress=False) == summary
