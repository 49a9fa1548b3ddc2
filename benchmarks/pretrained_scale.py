"""The pretrained studies at the size researchers bring: checkpoints of Pythia-70m's architecture
(6 layers, d_model 512, 8 heads, Pythia's vocabulary of 50,304; random weights: nothing is
downloaded) and a token file made from text, and each study on them in a fresh process, as a user
calls it: ``pretrained_llc`` on one checkpoint and ``pretrained_polymorphism`` on two (seeds 0 and
1), with its defaults. Every line a study prints is echoed with the seconds since it started; at
the end, per study: when its plan and first progress line came, its wall time and its peak
resident memory (the kernel's high-water mark of the process).

  python -m benchmarks.pretrained_scale --dir=/tmp/pythia70m
  python -m benchmarks.pretrained_scale --dir=/tmp/pythia70m --study=llc --llc_seconds=0 -- \
    --components="l0h0,l5 mlp" --num_chains=2 --num_draws=100 --num_burnin=20 --batch_size=8 \
    --seq_len=32

Everything after ``--`` goes to the studies run (their defaults otherwise). ``pretrained_llc``'s
defaults are sized for an accelerator (tens of hours on a laptop CPU); it is stopped after
``--llc_seconds`` (0: run to the end), by which time its plan, first progress lines and the memory
of sampling are known.

The checkpoints and the token file are built in ``--dir`` once and reused. The token file is made
from text that every CPython ships: the topics of the Python Language Reference in
``pydoc_data.topics`` (about 465,000 characters of English prose and examples, under the Python
Software Foundation License). A byte-level BPE tokenizer of at most the model's vocabulary is
trained on it with the ``tokenizers`` package and saved as each checkpoint's ``tokenizer.json``;
:func:`mechjax.data.tokens.corpus_from_text` writes the token file, one document per topic.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
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
_STUDY = flags.DEFINE_enum("study", "both", ["both", "llc", "polymorphism"], "Which study to run.")
_LLC_SECONDS = flags.DEFINE_integer(
  "llc_seconds", 300, "Stop pretrained_llc after this many seconds (0: run it to the end)."
)


def text_corpus(model_dir: str, out: str, vocab_size: int) -> str:
  """Trains a byte-level BPE tokenizer of at most ``vocab_size`` ids on CPython's
  ``pydoc_data.topics`` text, saves it as ``model_dir/tokenizer.json``, and writes that text as the
  token file ``out`` (one document per topic)."""
  import tempfile
  from pydoc_data import topics

  import tokenizers

  from mechjax.data import tokens

  texts = [topics.topics[k] for k in sorted(topics.topics)]
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=["<|endoftext|>"],
    initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
  )
  tok.train_from_iterator(texts, trainer)
  tok.save(os.path.join(model_dir, "tokenizer.json"))
  with tempfile.TemporaryDirectory() as folder:
    for i, text in enumerate(texts):
      with open(os.path.join(folder, f"{i:03d}.txt"), "w") as f:
        f.write(text)
    return tokens.corpus_from_text(folder, model_dir, out)


def build(directory: str, vocab_size: int, seed: int = 0) -> tuple[str, str]:
  """``(checkpoint directory, token file)``, made in ``directory`` unless they are there: the
  checkpoint ``model`` (seed 0) or ``model-seed<seed>`` (random weights of that seed), with the
  token file's ``tokenizer.json``."""
  import jax

  from mechjax.models import pretrained

  model_dir = os.path.join(directory, "model" if seed == 0 else f"model-seed{seed}")
  corpus = os.path.join(directory, "corpus.tokens")
  if seed != 0:
    build(directory, vocab_size)  # the token file and its tokenizer
  if not os.path.exists(os.path.join(model_dir, "config.json")):
    model = pythia.model(PYTHIA_70M, vocab_size=vocab_size)
    params = model.init(jax.random.key(seed), np.zeros((1, 8), np.int32))["params"]
    pretrained.save(model_dir, model, params)
  if seed == 0 and not os.path.exists(corpus):
    text_corpus(model_dir, corpus, vocab_size)
  tokenizer = os.path.join(model_dir, "tokenizer.json")
  if seed != 0 and not os.path.exists(tokenizer):
    shutil.copy(os.path.join(directory, "model", "tokenizer.json"), tokenizer)
  return model_dir, corpus


def peak_rss(pid: int) -> int:
  """The process's resident high-water mark in bytes (``VmHWM``), 0 once it has ended."""
  try:
    with open(f"/proc/{pid}/status") as f:
      line = next((x for x in f if x.startswith("VmHWM:")), "VmHWM: 0 kB")
  except OSError:
    return 0
  return int(line.split()[1]) * 1024


def run_study(command: list[str], stop_after: float) -> dict:
  """Runs ``command``, echoing its lines with the seconds since it started; stops it after
  ``stop_after`` seconds (0: never). Returns when its plan and first progress line came, its wall
  time, exit code and peak resident memory."""
  print("$ python " + " ".join(command[1:]), flush=True)
  start = time.perf_counter()
  proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  seen = {}

  def echo():
    for line in proc.stdout:
      now = time.perf_counter() - start
      print(f"{now:8.1f}  {line.rstrip()}", flush=True)
      text = line.split("] ", 1)[-1].strip()
      for key, marker in (("plan", "plan:"), ("progress", "ETA")):
        if key not in seen and marker in text:
          seen[key] = now

  reader = threading.Thread(target=echo, daemon=True)
  reader.start()
  peak, stopped = 0, False
  while True:  # wait4 reaps the child itself, so that its own peak (ru_maxrss) is read
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid:
      break
    peak = max(peak, peak_rss(proc.pid))
    if stop_after and time.perf_counter() - start > stop_after:
      proc.terminate()
      stopped = True
      _, status, usage = os.wait4(proc.pid, 0)
      break
    time.sleep(0.5)
  proc.returncode = os.waitstatus_to_exitcode(status)
  reader.join(timeout=5)
  peak = max(peak, usage.ru_maxrss * 1024)
  return dict(
    seen,
    wall=time.perf_counter() - start,
    stopped=stopped,
    exit=proc.returncode,
    peak=peak,
  )


def summary(name: str, r: dict) -> str:
  at = lambda key: f"{r[key]:.1f} s" if key in r else "never"
  end = (
    f"stopped at {r['wall']:.0f} s" if r["stopped"] else f"exit {r['exit']} at {r['wall']:.0f} s"
  )
  return (
    f"{name}: plan at {at('plan')}, first progress line at {at('progress')}, {end}; "
    f"peak resident memory {r['peak'] / 2**30:.2f} GiB"
  )


def main(argv):
  model_a, corpus = build(_DIR.value, _VOCAB.value)
  lines = []
  if _STUDY.value in ("both", "llc"):
    command = [
      sys.executable,
      "-m",
      "experiments.pretrained_llc",
      f"--model={model_a}",
      f"--corpus={corpus}",
      f"--workdir={os.path.join(_DIR.value, 'run-llc')}",
      "--overwrite",
      *argv[1:],
    ]
    lines.append(summary("pretrained_llc", run_study(command, _LLC_SECONDS.value)))
  if _STUDY.value in ("both", "polymorphism"):
    model_b, _ = build(_DIR.value, _VOCAB.value, seed=1)
    command = [
      sys.executable,
      "-m",
      "experiments.pretrained_polymorphism",
      f"--model_a={model_a}",
      f"--model_b={model_b}",
      f"--corpus={corpus}",
      f"--workdir={os.path.join(_DIR.value, 'run-polymorphism')}",
      "--overwrite",
      *argv[1:],
    ]
    lines.append(summary("pretrained_polymorphism", run_study(command, 0)))
  print("\n".join(lines))


if __name__ == "__main__":
  app.run(main)
