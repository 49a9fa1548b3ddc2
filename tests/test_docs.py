"""The examples in the docs run: every ```python block of docs/your_model.md and docs/pretrained.md
on its own, each in
a fresh process from a folder outside the checkout (blocks marked ``# requires: torch`` only where
torch is installed), and the README's "Use it on your model" example."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(path: str) -> list[str]:
  with open(path) as f:
    return BLOCK.findall(f.read())


def _run(code: str, folder) -> subprocess.CompletedProcess:
  script = folder / "example.py"
  script.write_text(code)
  env = {**os.environ, "PYTHONPATH": ROOT}
  return subprocess.run(
    [sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=600
  )


YOUR_MODEL = blocks(os.path.join(ROOT, "docs", "your_model.md"))

# What each block of docs/your_model.md prints (the doc quotes these); a block that needs an earlier
# block's names fails with NameError in its own process.
PRINTS = [
  ("LLC ", "probes that lower the expected loss most"),
  ("equinox LLC", "params leaf"),  # the whole equinox module is refused by name
  ("TwoLayer matches torch from .pt, .npz and .safetensors",),
  ("BilinearNet matches torch",),
  ("Transformer matches torch",),
  ("TwoLayer from .npz matches the formula",),
  ("scale 1.700", "rotation recovered: True", "eigenangle_ks"),
  ("population LLC at n = 1024", "susceptibilities from a sampler: (1, 1, 128)"),
]


PRETRAINED = blocks(os.path.join(ROOT, "docs", "pretrained.md"))
PRETRAINED_PRINTS = [
  ("gpt_neox 2 layers, d_model 32", "logits (2, 12, 61)", "final_norm", "moved the logits by True"),
  ("111 tokens; end-of-document id 0 ; windows (4, 8)",),
  ("(uniform guessing: 4.111)", "10 components", "LLC of head 1.2: "),
  ("chi (3, 1, 22) per ('attn_1.head_0', 'attn_1.head_3', 'mlp_1') ; probe tokens (2, 11)",),
  ("same function: True", "rotation recovered: True", "against sqrt(2d) = 8.0"),
]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PRETRAINED_PRINTS)))
def test_each_example_in_pretrained_runs_alone(index, tmp_path):
  assert len(PRETRAINED) == len(PRETRAINED_PRINTS)
  r = _run(PRETRAINED[index], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  for text in PRETRAINED_PRINTS[index]:
    assert text in r.stdout, (text, r.stdout[-2000:])


def test_the_block_finder_sees_every_block():
  assert len(YOUR_MODEL) == len(PRINTS), len(YOUR_MODEL)
  assert sum(b.startswith("# requires: torch") for b in YOUR_MODEL) == 3


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PRINTS)))
def test_each_example_in_your_model_runs_alone(index, tmp_path):
  block = YOUR_MODEL[index]
  if block.startswith("# requires: torch") and importlib.util.find_spec("torch") is None:
    pytest.skip("needs torch")
  r = _run(block, tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  for text in PRINTS[index]:
    assert text in r.stdout, (text, r.stdout[-2000:])


@pytest.mark.slow
def test_the_readme_example_runs_outside_the_checkout(tmp_path):
  with open(os.path.join(ROOT, "README.md")) as f:
    text = f.read()
  section = text[text.index("## Use it on your model") :]
  r = _run(BLOCK.findall(section)[0], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  llc = float(re.search(r"LLC ([\d.]+) ±", r.stdout).group(1))
  assert 3.5 < llc < 5.5  # a regular 9-parameter model: λ = 9/2
