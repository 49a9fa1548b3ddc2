"""The template study end to end on a tiny config: it trains, analyses, plots and reports, and a
rerun returns the same summary without training again."""

import json

import pytest

from mechjax.studies import template
from tests.helpers import check_report

TINY = dict(widths=(1, 8), steps=150, num_seeds=2, log_every=50, checkpoint_every=150)
# The end-to-end run (.ci/tiny_summaries.py runs it too).
TINY_CONFIGS = {"template": dict(TINY, eval_samples=256)}


@pytest.mark.slow
def test_the_template_trains_analyses_plots_and_reports(tmp_path):
  cfg = template.Config().replace(**TINY_CONFIGS["template"])
  summary = template.run(cfg, tmp_path, progress=False)
  wide, narrow = summary["widths"]["8"], summary["widths"]["1"]
  assert wide["final_test_acc_mean"] > 0.85  # a linear teacher is easy for 8 ReLU units
  assert wide["teacher_cosine_mean"] > 0.8  # ... which find its direction
  assert summary["figures"] == ["accuracy.png"] and check_report(tmp_path) == [
    "figures/accuracy.png"
  ]
  assert (tmp_path / "alignment_width8.json").exists()
  assert any("width    8" in line for line in template.report(summary))
  assert json.loads((tmp_path / "summary.json").read_text()) == summary
  assert template.run(cfg, tmp_path, progress=False) == summary
  assert narrow["final_test_acc_mean"] > 0.5
