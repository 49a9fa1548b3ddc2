"""What several test modules share: the repository root, running a module as a user would, and a
sampler accumulator that keeps the running mean of the draws."""

import dataclasses
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_module(
  module: str, *args: str, timeout: float = 300, env: dict | None = None, **kwargs
) -> subprocess.CompletedProcess:
  """Runs ``python -m module args`` from the repository root, as a user would (in ``env``, this
  process's environment by default, with the checkout on ``PYTHONPATH``)."""
  env = {
    **(os.environ if env is None else env),
    "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
  }
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
    **kwargs,
  )


def check_report(workdir, captioned: bool = True) -> list[str]:
  """Parses ``<workdir>/report.html`` and checks that it shows every figure in ``figures/`` (each
  ``<img>`` pointing at a file that exists), with a caption beyond its file name when
  ``captioned``, the config's settings and the run metadata; returns the figures it shows."""
  import html.parser
  import json

  workdir = os.fspath(workdir)

  class Parser(html.parser.HTMLParser):
    def __init__(self):
      super().__init__()
      self.images, self.text, self.captions = [], [], []
      self.in_caption = False

    def handle_starttag(self, tag, attrs):
      if tag == "img":
        self.images.append(dict(attrs)["src"])
      elif tag == "figcaption":
        self.in_caption = True
        self.captions.append("")

    def handle_endtag(self, tag):
      if tag == "figcaption":
        self.in_caption = False

    def handle_data(self, data):
      self.text.append(data)
      if self.in_caption:
        self.captions[-1] += data

  parser = Parser()
  with open(os.path.join(workdir, "report.html")) as f:
    parser.feed(f.read())
  text = "".join(parser.text)
  figures = sorted(f"figures/{n}" for n in os.listdir(os.path.join(workdir, "figures")))
  assert figures, "the run wrote no figures"
  assert sorted(parser.images) == figures, (parser.images, figures)
  for src in parser.images:
    assert os.path.isfile(os.path.join(workdir, src)), src
  if captioned:
    for src, caption in zip(parser.images, parser.captions):
      said = caption.replace(f"({src})", "").strip()
      assert len(said) > 20, f"{src} has no caption saying what its curves and bands are"
  with open(os.path.join(workdir, "config.json")) as f:
    for key in json.load(f):
      assert key in text, f"report.html does not show the setting {key}"
  for key in ("mechjax.version", "packages.jax", "devices.count", "command.argv"):
    assert key in text, f"report.html does not show {key}"
  return parser.images


@dataclasses.dataclass(frozen=True)
class MeanDraw:
  """A sampler accumulator (:class:`mechjax.slt.chain.Accumulator`) whose state is
  the running mean of the draws ``w``: it sees every draw, with the draws' own placement."""

  def init(self, w, data):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(jnp.zeros_like, w)

  def update(self, acc, w, t, data):
    import jax

    return jax.tree.map(lambda a, x: a + (x - a) / (t + 1), acc, w)


# The suite turns every warning into an error (pytest.ini). A test whose SGLD chains are too short
# to mix, on purpose (a few dozen draws keep it fast), expects the sampler's ChainsNotMixedWarning
# and says so with this mark; any other warning still fails it.
expect_unmixed = pytest.mark.filterwarnings("ignore::mechjax.slt.mixing.ChainsNotMixedWarning")
