"""What several test modules share: the repository root, running a module as a user would, the
studies' tiny configs, and a sampler accumulator that keeps the running mean of the draws."""

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


def compile_setting() -> dict[str, str]:
  """The suite's compile setting (``JAX_DISABLE_MOST_OPTIMIZATIONS``, set by tests/conftest.py), for
  a subprocess that is otherwise given an environment of its own."""
  name = "JAX_DISABLE_MOST_OPTIMIZATIONS"
  return {name: os.environ[name]} if name in os.environ else {}


def as_flags(settings: dict) -> list[str]:
  """``{"steps": 20, "alpha": (0.0, 2.0)}`` as the command line takes it: ``["--steps=20",
  "--alpha=0.0,2.0"]``."""
  out = []
  for name, value in settings.items():
    text = ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
    out.append(f"--{name}={text}")
  return out


def tiny_configs() -> dict[str, dict]:
  """Every study's tiny config, ``{study name: settings for Config().replace}``: the
  ``TINY_CONFIGS`` that test modules define (each the config that module's end-to-end test of the
  study runs), found by reading ``tests/`` and imported. A study named twice is an error.
  ``.ci/tiny_summaries.py`` runs them; tests/studies/test_frame.py checks that every study has
  one."""
  import ast
  import importlib

  out, where = {}, {}
  for folder, _, files in sorted(os.walk(os.path.join(ROOT, "tests"))):
    for file in sorted(f for f in files if f.startswith("test_") and f.endswith(".py")):
      path = os.path.join(folder, file)
      with open(path) as f:
        tree = ast.parse(f.read(), path)
      if not any(
        isinstance(n, ast.Assign)
        and any(getattr(t, "id", None) == "TINY_CONFIGS" for t in n.targets)
        for n in tree.body
      ):
        continue
      module = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
      for name, settings in importlib.import_module(module).TINY_CONFIGS.items():
        if name in out:
          raise ValueError(f"{name}'s tiny config is in both {where[name]} and {module}")
        out[name], where[name] = dict(settings), module
  return out


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


_WIKI_DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
{pages}
</mediawiki>"""
_WIKI_PAGE = (
  "<page><title>{title}</title><ns>{ns}</ns>{redirect}<revision>"
  '<text xml:space="preserve">{text}\n</text></revision></page>'
)
_SENTENCES = (
  "The river runs north through the old town. ",
  "Its bridge was built of stone in the tenth century. ",
  "Words and more words follow here. ",
  "A market is held on the square every week. ",
)


def write_wiki_dump(path, n: int = 6):
  """A MediaWiki XML dump at ``path`` (a pathlib.Path) of ``n`` articles, ``Article 0`` to
  ``Article {n-1}`` (wiki markup, a few sentences each, longer with ``i``), one redirect and one
  talk page (neither an article): what :mod:`mechjax.data.wikitext` and
  :func:`mechjax.data.language.make_corpus` read. Returns ``path``."""
  pages = [
    _WIKI_PAGE.format(
      title=f"Article {i}",
      ns=0,
      redirect="",
      text=f"'''Article {i}''' is about [[topic {i}|subject {i}]]. "
      + "".join(_SENTENCES[(i + k) % len(_SENTENCES)] for k in range(5 + i)),
    )
    for i in range(n)
  ]
  pages.append(
    _WIKI_PAGE.format(title="Gone", ns=0, redirect='<redirect title="A"/>', text="#REDIRECT")
  )
  pages.append(_WIKI_PAGE.format(title="Talk:X", ns=1, redirect="", text="a talk page"))
  path.write_text(_WIKI_DUMP.format(pages="\n".join(pages)))
  return path
