"""The examples in the docs run: every ```python block of docs/your_model.md and docs/pretrained.md
on its own, and the README's "Use it on your model" example. Each document's blocks run in one
fresh process started from a folder outside the checkout, each block in a namespace and a working
folder of its own (so a block that uses an earlier block's names or files fails), one after the
other; blocks marked ``# requires: torch`` run only where torch is installed. One process per
document rather than per block, so JAX is imported twice rather than once a block: the blocks
share the imported modules and JAX's global settings, which no block changes."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

# Runs the blocks of a JSON list, each with ``exec`` in a fresh namespace (``__name__`` is
# ``"__main__"``, as in ``python block.py``) from a fresh folder; writes each block's stdout and
# its traceback (empty when it ran) as a JSON list to the file named second.
RUNNER = """
import contextlib, io, json, os, sys, traceback
codes = json.load(open(sys.argv[1]))
out = []
for i, code in enumerate(codes):
  folder = os.path.abspath(f"block{i}")
  os.mkdir(folder)
  os.chdir(folder)
  buf, error = io.StringIO(), ""
  with contextlib.redirect_stdout(buf):
    try:
      exec(compile(code, f"block{i}.py", "exec"), {"__name__": "__main__"})
    except BaseException:
      error = traceback.format_exc()
  out.append({"stdout": buf.getvalue(), "error": error})
json.dump(out, open(sys.argv[2], "w"))
"""


def blocks(path: str) -> list[str]:
  with open(path) as f:
    return BLOCK.findall(f.read())


def _run_all(codes: list[str], folder) -> list[dict]:
  """Each of ``codes`` run as described above, in one process in ``folder``: ``[{"stdout",
  "error"}]`` in order."""
  (folder / "blocks.json").write_text(json.dumps(codes))
  env = {**os.environ, "PYTHONPATH": ROOT}
  r = subprocess.run(
    [sys.executable, "-c", RUNNER, str(folder / "blocks.json"), str(folder / "out.json")],
    cwd=folder,
    env=env,
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads((folder / "out.json").read_text())


def _runnable(code: str) -> bool:
  return not code.startswith("# requires: torch") or importlib.util.find_spec("torch") is not None


def _check(result: dict, prints) -> None:
  assert not result["error"], result["error"][-3000:]
  for text in prints:
    assert text in result["stdout"], (text, result["stdout"][-2000:])


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


@pytest.fixture(scope="module")
def pretrained_runs(tmp_path_factory):
  return _run_all(PRETRAINED, tmp_path_factory.mktemp("pretrained_docs"))


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PRETRAINED_PRINTS)))
def test_each_example_in_pretrained_runs_alone(index, pretrained_runs):
  assert len(PRETRAINED) == len(PRETRAINED_PRINTS)
  _check(pretrained_runs[index], PRETRAINED_PRINTS[index])


def test_the_block_finder_sees_every_block():
  assert len(YOUR_MODEL) == len(PRINTS), len(YOUR_MODEL)
  assert sum(b.startswith("# requires: torch") for b in YOUR_MODEL) == 3


def _readme_example() -> str:
  with open(os.path.join(ROOT, "README.md")) as f:
    text = f.read()
  return BLOCK.findall(text[text.index("## Use it on your model") :])[0]


@pytest.fixture(scope="module")
def your_model_runs(tmp_path_factory):
  """docs/your_model.md's runnable blocks (None for one that needs torch where it is not
  installed), then the README's example, in one process."""
  runnable = [b for b in YOUR_MODEL if _runnable(b)]
  results = iter(_run_all([*runnable, _readme_example()], tmp_path_factory.mktemp("your_model")))
  return [next(results) if _runnable(b) else None for b in YOUR_MODEL] + [next(results)]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PRINTS)))
def test_each_example_in_your_model_runs_alone(index, your_model_runs):
  if your_model_runs[index] is None:
    pytest.skip("needs torch")
  _check(your_model_runs[index], PRINTS[index])


@pytest.mark.slow
def test_the_readme_example_runs_outside_the_checkout(your_model_runs):
  _check(your_model_runs[-1], ())
  llc = float(re.search(r"LLC ([\d.]+) ±", your_model_runs[-1]["stdout"]).group(1))
  assert 3.5 < llc < 5.5  # a regular 9-parameter model: λ = 9/2
