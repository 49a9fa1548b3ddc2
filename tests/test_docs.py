"""The examples in the docs run: every ```python block of docs/your_model.md, top to bottom in one
process from a folder outside the checkout (blocks marked ``# requires: torch`` only where torch is
installed), and the README's "Use it on your model" example."""

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


def test_the_block_finder_sees_every_block():
  found = blocks(os.path.join(ROOT, "docs", "your_model.md"))
  assert len(found) == 9, len(found)
  assert sum(b.startswith("# requires: torch") for b in found) == 3


@pytest.mark.slow
def test_every_example_in_your_model_runs(tmp_path):
  has_torch = importlib.util.find_spec("torch") is not None
  code = []
  for block in blocks(os.path.join(ROOT, "docs", "your_model.md")):
    if block.startswith("# requires: torch") and not has_torch:
      continue
    code.append(block)
  r = _run("\n".join(code), tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  out = r.stdout
  assert "LLC" in out and "equinox LLC" in out and "TwoLayer from .npz matches" in out
  assert "params leaf" in out  # the whole equinox module is refused by name
  assert "rotation recovered: True" in out and "population LLC" in out
  if has_torch:
    assert "Transformer matches torch" in out and "BilinearNet matches torch" in out


@pytest.mark.slow
def test_the_readme_example_runs_outside_the_checkout(tmp_path):
  with open(os.path.join(ROOT, "README.md")) as f:
    text = f.read()
  section = text[text.index("## Use it on your model") :]
  r = _run(BLOCK.findall(section)[0], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  llc = float(re.search(r"LLC ([\d.]+) ±", r.stdout).group(1))
  assert 3.5 < llc < 5.5  # a regular 9-parameter model: λ = 9/2
