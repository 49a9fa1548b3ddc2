"""report.html: a run's page names every figure, and (where chromium is installed) a real headless
browser renders the figures from the relative links."""

import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from mechjax import report
from tests.helpers import check_report


def _workdir(tmp_path):
  wd = tmp_path / "run"
  (wd / "figures").mkdir(parents=True)
  (wd / "config.json").write_text(json.dumps({"steps": 10, "tasks": ["a", "b"]}))
  meta = {
    "mechjax": {"version": "0"},
    "packages": {"jax": "x"},
    "devices": {"count": 1},
    "command": {"argv": ["experiments.demo"]},
  }
  (wd / "metadata.json").write_text(json.dumps({**meta, "resumes": []}))
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig = plt.figure(figsize=(3, 3), dpi=100)
  fig.patch.set_facecolor((1.0, 0.0, 0.0))  # a solid red figure, easy to find on a screenshot
  fig.savefig(wd / "figures" / "red.png", facecolor=fig.get_facecolor())
  plt.close(fig)
  return wd


def test_run_report_shows_summary_config_metadata_and_every_figure(tmp_path):
  wd = _workdir(tmp_path)
  (wd / "figures" / "extra.png").write_bytes((wd / "figures" / "red.png").read_bytes())
  path = report.write_run_report(str(wd), {"accuracy": {"mean": 0.93}, "figures": ["red.png"]})
  page = pathlib.Path(path).read_text()
  assert "accuracy.mean" in page and "0.93" in page and "experiments.demo" in page
  assert sorted(check_report(wd, captioned=False)) == ["figures/extra.png", "figures/red.png"]
  assert 'href="summary.json"' in page


def test_the_report_leads_with_the_results_and_captioned_figures_and_ends_with_the_summary(
  tmp_path,
):
  wd = _workdir(tmp_path)
  lines = ["  seeds at target: 4/4", "  exponent 3.15 <results & more>"]
  path = report.write_run_report(
    str(wd),
    {"sd": 0.003107402847011195, "figures": ["red.png"]},
    lines=lines,
    captions={"red.png": "Lines: means over seeds; bands: ±1 sd."},
  )
  page = pathlib.Path(path).read_text()
  order = [
    page.index(s) for s in ("seeds at target", "<img", "Lines: means over seeds", "<h2>Config")
  ]
  assert order == sorted(order), order
  assert "&lt;results &amp; more&gt;" in page  # the lines are escaped, not markup
  details = page.index("<details>")
  assert details > page.index("<h2>Ran on") and page.index('key">sd<') > details
  assert ">0.003107<" in page and "0.003107402847011195" not in page  # 4 significant digits


def test_a_studys_report_html_carries_its_report_lines(tmp_path):
  from mechjax import config
  from mechjax.studies import frame

  study = frame.Study(
    "answer",
    config.RunSettings,
    lambda cfg, ctx: frame.Outputs({"answer": 42.0}),
    report=lambda summary: [f"  the answer is {summary['answer']:g}"],
  )
  study.run(config.RunSettings(), str(tmp_path / "wd"), progress=False)
  page = (tmp_path / "wd" / "report.html").read_text()
  assert "<h2>Results</h2>" in page and "the answer is 42" in page


def test_long_values_are_cut_with_the_full_value_in_a_tooltip(tmp_path):
  wd = _workdir(tmp_path)
  report.write_run_report(str(wd), {"curve": list(range(500))})
  page = (wd / "report.html").read_text()
  assert "…</span>" in page and "499]" in page


def _red_pixels(wd, shot, size="1000,1200"):
  """A headless chromium screenshot of the report (``size``: the window, width,height); the mask
  of its pure-red pixels."""
  from PIL import Image

  page = f"file://{os.path.abspath(wd / 'report.html')}"
  subprocess.run(
    ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}"]
    + [f"--window-size={size}", "--hide-scrollbars", page],
    capture_output=True,
    timeout=120,
    check=True,
  )
  pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
  return (pixels[..., 0] > 200) & (pixels[..., 1] < 60) & (pixels[..., 2] < 60)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium to render the page")
def test_a_headless_browser_renders_the_figures(tmp_path):
  wd = _workdir(tmp_path)
  report.write_run_report(str(wd), {"figures": ["red.png"]})
  red = _red_pixels(wd, tmp_path / "shot.png")
  assert red.sum() > 200 * 200, red.sum()  # the 300 × 300 red figure is on the page
  # Without the figure file the page shows no red: the check can fail.
  os.remove(wd / "figures" / "red.png")
  red = _red_pixels(wd, tmp_path / "shot.png")
  assert red.sum() < 1000


def test_a_verdict_leads_the_page_and_the_results_fold_below_the_figures(tmp_path):
  wd = _workdir(tmp_path)
  report.write_run_report(
    str(wd), {"figures": ["red.png"]}, lines=["  every number"], verdict=["The answer & its error."]
  )
  page = (wd / "report.html").read_text()
  verdict, figure = page.index("<h2>Verdict</h2>"), page.index('<img src="figures/red.png"')
  folded = page.index("<details><summary>Results: every number")
  assert verdict < page.index("The answer &amp; its error.") < figure < folded
  assert page.index("  every number") > folded and "<h2>Figures</h2>" not in page  # no others
  # Without a verdict the results lead, unfolded, as before.
  report.write_run_report(str(wd), {"figures": ["red.png"]}, lines=["  every number"])
  page = (wd / "report.html").read_text()
  assert "Verdict" not in page and page.index("<h2>Results</h2>") < page.index("<h2>Figures</h2>")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium to render the page")
def test_a_long_verdict_and_the_first_figure_share_the_first_screen(tmp_path):
  wd = _workdir(tmp_path)
  said = ["A sentence of the verdict, long enough to wrap over several lines of the page. " * 8] * 8
  report.write_run_report(str(wd), {"figures": ["red.png"]}, lines=["  x"], verdict=said)
  red = _red_pixels(wd, tmp_path / "shot.png", size="1280,800")
  assert red.sum() > 200 * 200, red.sum()  # the figure is on the first 1280 × 800 screen
  # Below the verdict rather than beside it, the figure falls off the first screen.
  page = (wd / "report.html").read_text()
  (wd / "report.html").write_text(page.replace('class="lead"', 'class="stacked"'))
  assert _red_pixels(wd, tmp_path / "shot.png", size="1280,800").sum() < 1000
