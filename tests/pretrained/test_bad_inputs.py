"""Every bad input a user can give the pretrained studies on the command line gets one line on
stderr and exit status 2, never a traceback, and leaves no run behind to refuse the corrected
command (experiments.pretrained_llc, experiments.pretrained_polymorphism).

Each study's cases run in one process (tests/pretrained/cli_cases.py), through the same entry
point as ``python -m experiments.<study>``."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mechjax.data import tokens
from tests.helpers import ROOT
from tests.pretrained.test_studies import HERE
from tests.pretrained.test_studies import TINY_CONFIGS

NEOX = os.path.join(HERE, "gpt_neox")
# Each study's cases run in a process of its own.
pytestmark = pytest.mark.slow


def word_tokenizer(path, shift=0):
  """A word-level tokenizer.json over the tiny checkpoints' 61 ids (``shift`` reorders the words,
  which makes another tokenizer with the same vocabulary size)."""
  tk = pytest.importorskip("tokenizers")
  words = [f"w{(i + shift) % 60 + 1}" for i in range(60)]
  vocab = {"<|endoftext|>": 0, **{w: i + 1 for i, w in enumerate(words)}}
  model = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token="w1"))
  model.pre_tokenizer = tk.pre_tokenizers.Whitespace()
  model.save(str(path))
  return str(path)


def fingerprinted_corpus(path, tokenizer_json):
  docs = np.random.default_rng(0).integers(1, 61, (20, 40))
  mark = tokens.fingerprint(tokenizer_json)
  return tokens.write_tokens(path, docs, eos_id=0, tokenizer_fingerprint=mark)


def _checkpoint(root, name, source=NEOX, **config):
  """A copy of the tiny checkpoint ``source`` with ``config`` merged into its config.json."""
  path = root / name
  shutil.copytree(source, path)
  if config:
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, **config}))
  return str(path)


def _inputs(root) -> dict:
  """The bad inputs, made on disk, and a good checkpoint and corpus: ``{name: path}``."""
  out = {"model": _checkpoint(root, "model")}
  word_tokenizer(root / "model" / "tokenizer.json")
  out["corpus"] = fingerprinted_corpus(root / "corpus.tokens", root / "model")
  other = word_tokenizer(root / "other.json", shift=7)
  out["other_corpus"] = fingerprinted_corpus(root / "other.tokens", other)
  out["no_config"] = str(root / "empty")
  os.makedirs(out["no_config"])
  hub = root / "models--EleutherAI--pythia-70m"
  _checkpoint(hub / "snapshots", "a1b2c3")
  (hub / "refs").mkdir()
  out["hub_root"] = str(hub)
  out["not_json"] = _checkpoint(root, "not_json")
  (root / "not_json" / "config.json").write_text("{ this is not json")
  out["bert"] = _checkpoint(root, "bert", architectures=["BertModel"], model_type="bert")
  out["yarn"] = _checkpoint(
    root,
    "yarn",
    os.path.join(HERE, "llama_gqa"),
    rope_scaling={"rope_type": "yarn", "factor": 4.0},
  )
  out["sliding"] = _checkpoint(
    root, "sliding", os.path.join(HERE, "qwen2"), use_sliding_window=True
  )
  weights = (root / _checkpoint(root, "truncated")) / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
  header = (root / _checkpoint(root, "bad_header")) / "model.safetensors"
  header.write_bytes(b"\xff" * 8 + header.read_bytes()[8:])
  out["truncated"], out["bad_header"] = str(weights.parent), str(header.parent)
  (root / "texts").mkdir()
  (root / "texts" / "a.txt").write_text("Some text that is not a token file.\n")
  out["text_file"] = str(root / "texts" / "a.txt")
  out["texts"] = str(root / "texts")
  out["wide"] = _checkpoint(root, "wide", os.path.join(HERE, "grid", "llama_head_dim_8"))
  return out


# (case, arguments, what the one line must say). {name} is replaced by the input's path.
LLC_CASES = [
  ("missing_model", ["--model={root}/typo"], "typo does not exist"),
  ("model_is_a_file", ["--model={corpus}"], "is a file; pass the Hugging Face model directory"),
  ("no_config", ["--model={no_config}"], "has no config.json"),
  ("hub_cache_root", ["--model={hub_root}"], "hub cache folder.*snapshots/a1b2c3"),
  ("config_not_json", ["--model={not_json}"], "config.json is not valid JSON"),
  ("unsupported_architecture", ["--model={bert}"], "architecture .*BertModel.* is not supported"),
  ("rope_scaling", ["--model={yarn}"], "rope type 'yarn' is not implemented"),
  ("sliding_window", ["--model={sliding}"], "sliding attention window is not implemented"),
  ("truncated_weights", ["--model={truncated}"], "model.safetensors is truncated or damaged"),
  ("damaged_header", ["--model={bad_header}"], "model.safetensors is truncated or damaged"),
  ("missing_corpus", ["--corpus={root}/nothing.tokens"], "nothing.tokens does not exist"),
  ("corpus_is_a_folder", ["--corpus={texts}"], "is a folder; pass a token file.*corpus_from_text"),
  ("corpus_is_text", ["--corpus={text_file}"], "not a mechjax token file.*corpus_from_text"),
  ("corpus_is_a_config", ["--corpus={yarn}/config.json"], "not a mechjax token file"),
  ("other_tokenizer", ["--corpus={other_corpus}"], "made with another tokenizer than .*model/"),
  (
    "model_axis",
    ["--model_axis=3"],
    "model_axis=3 must divide the 1 devices and leave a chains axis that divides the 2 "
    "chains; on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N devices",
  ),
  ("seq_len", ["--seq_len=4096"], "seq_len: must be at most 24"),
  ("components", ["--components=l9h0"], "components"),
]
POLY_CASES = [
  ("missing_model_b", ["--model_b={root}/typo"], "typo does not exist"),
  ("truncated_model_a", ["--model_a={truncated}"], "truncated or damaged"),
  ("hub_cache_root", ["--model_b={hub_root}"], "hub cache folder"),
  ("corpus_is_text", ["--corpus={text_file}"], "not a mechjax token file"),
  ("other_tokenizer", ["--corpus={other_corpus}"], "another tokenizer.*allow_other_tokenizer"),
  ("widths_differ", ["--model_b={wide}"], "must have the same d_model; got 32 and 24"),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
  """``{(study, case): {"status", "stderr", "traceback", "claimed"}}`` for every case."""
  root = tmp_path_factory.mktemp("bad")
  paths = {**_inputs(root), "root": str(root)}
  model, corpus = paths["model"], paths["corpus"]
  good = {
    "pretrained_llc": {"model": model, "corpus": corpus},
    "pretrained_polymorphism": {"model_a": model, "model_b": model, "corpus": corpus},
  }
  out = {}
  for study, cases in (("pretrained_llc", LLC_CASES), ("pretrained_polymorphism", POLY_CASES)):
    argv = {}
    for case, args, _ in cases:
      given = dict(a[2:].split("=", 1) for a in (x.format(**paths) for x in args))
      flags = {**good[study], **TINY_CONFIGS[study], **given}
      flags["workdir"] = str(root / "runs" / study / case)
      argv[case] = [f"--{k}={v}" for k, v in flags.items()]
    (root / f"{study}.json").write_text(json.dumps(argv))
    r = subprocess.run(
      [
        sys.executable,
        "-m",
        "tests.pretrained.cli_cases",
        study,
        root / f"{study}.json",
        root / "o",
      ],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for case, result in json.loads((root / "o").read_text()).items():
      workdir = root / "runs" / study / case
      out[study, case] = {**result, "claimed": os.path.exists(workdir)}
  return out


@pytest.mark.parametrize(
  "study, case, message",
  [("pretrained_llc", c, m) for c, _, m in LLC_CASES]
  + [("pretrained_polymorphism", c, m) for c, _, m in POLY_CASES],
)
def test_a_bad_input_gets_one_line_and_exit_status_2(outcomes, study, case, message):
  got = outcomes[study, case]
  assert not got["traceback"], got["stderr"]
  assert got["status"] == 2 and got["stderr"].count("\n") == 0, got
  assert got["stderr"].startswith("error: ") and re.search(message, got["stderr"]), got["stderr"]
  # The failed run leaves nothing behind: the corrected command needs no --overwrite.
  assert not got["claimed"], f"{case} left its workdir behind"
