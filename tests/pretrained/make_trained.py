"""Trains the tiny language models of ``checkpoints/trained/`` with mechjax's own trainer
(``train_lm``, on a tiny wiki corpus) and records what transformers computes on the checkpoints it
exported, for tests/pretrained/test_trained.py (which needs neither torch nor transformers).

Run it where torch, transformers and jax are installed (a separate venv: ``pip install
torch==2.13.0+cpu transformers`` beside requirements.txt), from the repository root::

    python -m tests.pretrained.make_trained

Each ``checkpoints/trained/<arch>/`` gets the final export of seed 0 as train_lm wrote it
(``config.json``, ``model.safetensors``, ``tokenizer.json``) and ``expected.npz``: token windows
and transformers' logits on them.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import numpy as np
import torch
import transformers

from mechjax.data import language
from mechjax.studies.language import train_lm
from tests.helpers import write_wiki_dump
from tests.studies.test_train_lm import TINY_CONFIGS

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints", "trained")
ARCHES = ("gpt_neox", "llama")
# The suite's tiny config, trained long enough that attention matters to the logits (so that a
# wrong layout of its weights misses transformers' logits by far more than the tolerance).
SETTINGS = dict(
  TINY_CONFIGS["train_lm"],
  steps=200,
  log_every=100,
  checkpoint_every=200,
  warmup_steps=10,
  learning_rate=1e-2,
)


def main():
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    dump = write_wiki_dump(tmp / "dump.xml", n=12)
    corpus = language.make_corpus(tmp / "corpus", vocab_size=300, heldout_every=4, dump=dump)
    for arch in ARCHES:
      cfg = train_lm.Config().replace(corpus=corpus.directory, arch=arch, **SETTINGS)
      summary = train_lm.run(cfg, tmp / arch, progress=False)
      folder = os.path.join(HERE, arch)
      shutil.rmtree(folder, ignore_errors=True)
      shutil.copytree(os.path.join(summary["exports"][0], f"step{cfg.run.steps}"), folder)
      hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
      tokens = np.random.default_rng(2).integers(0, 300, size=(2, cfg.seq_len))
      with torch.no_grad():
        logits = hf(torch.tensor(tokens)).logits.numpy()
      np.savez_compressed(os.path.join(folder, "expected.npz"), tokens=tokens, logits=logits)
      size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
      print(f"trained/{arch}: {size / 1e3:.0f} kB")


if __name__ == "__main__":
  main()
