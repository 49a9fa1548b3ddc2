"""The pretrained LLC study at the size researchers bring: a checkpoint of Pythia-70m's architecture
(6 layers, d_model 512, 8 heads, random weights: nothing is downloaded) and a token file, and
``python -m experiments.pretrained_llc`` on them in a fresh process, with its wall time and peak
resident memory.

  python -m benchmarks.pretrained_scale --dir=/tmp/pythia70m -- --num_draws=2 --num_burnin=1

Everything after ``--`` goes to the study (its defaults otherwise). The checkpoint and the token
file are built in ``--dir`` once and reused. The token file holds random ids (the memory and time
of a draw do not depend on what the tokens say); a file made from text is
:func:`mechjax.data.tokens.corpus_from_text`'s.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import numpy as np
from absl import app
from absl import flags

from benchmarks import pythia

PYTHIA_70M = dict(
  pythia.GPT_NEOX,
  hidden_size=512,
  num_hidden_layers=6,
  num_attention_heads=8,
  intermediate_size=2048,
)

_DIR = flags.DEFINE_string("dir", "/tmp/mechjax-pythia70m", "Where the checkpoint and corpus live.")
_VOCAB = flags.DEFINE_integer("vocab_size", 50304, "The vocabulary (Pythia's is 50,304).")
_TOKENS = flags.DEFINE_integer("corpus_tokens", 200_000, "Tokens in the random corpus.")


def build(directory: str, vocab_size: int, num_tokens: int) -> tuple[str, str]:
  """``(checkpoint directory, token file)``, made in ``directory`` unless they are there."""
  import jax

  from mechjax.data import tokens
  from mechjax.models import pretrained

  model_dir, corpus = os.path.join(directory, "model"), os.path.join(directory, "corpus.tokens")
  if not os.path.exists(os.path.join(model_dir, "config.json")):
    model = pythia.model(PYTHIA_70M, vocab_size=vocab_size)
    params = model.init(jax.random.key(0), np.zeros((1, 8), np.int32))["params"]
    pretrained.save(model_dir, model, params)
  if not os.path.exists(corpus):
    docs = np.random.default_rng(0).integers(1, vocab_size, (num_tokens // 500, 500))
    tokens.write_tokens(corpus, docs, eos_id=0)
  return model_dir, corpus


def main(argv):
  model_dir, corpus = build(_DIR.value, _VOCAB.value, _TOKENS.value)
  command = [
    sys.executable,
    "-m",
    "experiments.pretrained_llc",
    f"--model={model_dir}",
    f"--corpus={corpus}",
    f"--workdir={os.path.join(_DIR.value, 'run')}",
    "--overwrite",
    *argv[1:],
  ]
  print(" ".join(command[1:]), flush=True)
  start = time.perf_counter()
  done = subprocess.run(command)
  seconds = time.perf_counter() - start
  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB
  print(f"exit {done.returncode}; wall {seconds:.0f} s; peak resident memory {peak:.2f} GiB")


if __name__ == "__main__":
  app.run(main)
