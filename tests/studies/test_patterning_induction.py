"""The induction-head patterning study: the re-weighting along the induction direction, its
settings, and the study end to end."""

import numpy as np
import pytest

from mechjax.data import repeats
from mechjax.slt import patterning
from mechjax.studies.patterning import patterning_induction as ind
from tests.helpers import check_report


def test_reweightings_promote_and_suppress_the_induction_positions_and_stay_distributions():
  cfg = ind.Config(length=8, probe_sequences=4, top_components=3)
  groups = repeats.token_groups(np.array([1, 1, 0, 0]), cfg.length).reshape(-1)
  induction_groups = repeats.induction_groups(cfg.length)
  rng = np.random.default_rng(0)
  # χ = one component row loading *negatively* on the induction tokens, plus small noise.
  chi = np.outer([1.0, -0.5, 0.2], np.where(np.isin(groups, induction_groups), -1.0, 0.3))
  chi += 0.01 * rng.normal(size=chi.shape)
  d = patterning.principal_group_change(chi, groups, induction_groups, cfg.num_groups, 3)
  assert d["component"] == 0 and abs(d["correlations"][0]) > 0.99
  assert d["direction"][induction_groups].mean() > 0  # promote = more weight on induction tokens
  dists = ind.reweightings(cfg, d["direction"])
  for c in ind.CONDITIONS:
    assert np.all(dists[c] >= 0) and abs(dists[c].sum() - 1) < 1e-9
  assert (
    dists["promote"][induction_groups].sum()
    > dists["unweighted"][induction_groups].sum()
    > dists["suppress"][induction_groups].sum()
  )
  # strength 0.5: the binding group of the binding direction keeps half its base weight.
  ratio = np.minimum(dists["promote"], dists["suppress"]) / dists["unweighted"]
  assert abs(ratio.min() - 0.5) < 1e-9
  # The control moves as much weight, in another direction.
  tv = {c: 0.5 * np.abs(dists[c] - dists["unweighted"]).sum() for c in ("promote", "random")}
  assert tv["random"] == pytest.approx(tv["promote"], rel=1e-9) or tv["random"] < tv["promote"]
  assert abs(np.corrcoef(dists["random"] - dists["unweighted"], d["direction"])[0, 1]) < 0.9


# Most of the end-to-end test's time is compiling, once per shape: the posterior's 8 sequences are
# all of its evaluation set (eval_size >= n) and as many as the probes, and the probe and
# evaluation sets are 4 sequences of each kind.
TINY_INDUCTION = dict(
  vocab=8,
  length=8,
  d_model=8,
  num_layers=1,
  num_heads=2,
  steps=20,
  log_every=10,
  checkpoint_every=10,
  chi_step=10,
  num_seeds=2,
  n=8,
  probe_sequences=8,
  eval_sequences=4,
  chains=2,
  draws=4,
  burnin=1,
  sgld_batch_size=8,
  eval_size=8,
  batch_size=8,
)
# The end-to-end run, with two of the four conditions (each condition is one more compiled
# training program; the suite's budget). .ci/tiny_summaries.py runs it too.
TINY_CONFIGS = {
  "patterning_induction": dict(TINY_INDUCTION, conditions=("unweighted", "promote")),
}


@pytest.mark.slow
def test_induction_study_end_to_end_and_resume_reuses_the_susceptibilities(tmp_path, monkeypatch):
  cfg = ind.Config().replace(**TINY_CONFIGS["patterning_induction"])
  summary = ind.run(cfg, str(tmp_path), progress=False)
  assert set(summary["formation_step"]) == {"unweighted", "promote"}
  assert all(len(v) == 2 for v in summary["formation_step"].values())
  weights = summary["induction_weight"]
  assert weights["promote"] > weights["unweighted"]
  for name in summary["figures"]:
    assert (tmp_path / "figures" / name).stat().st_size > 10_000
  assert sorted(check_report(tmp_path)) == sorted(f"figures/{f}" for f in summary["figures"])
  assert (tmp_path / "susceptibility.npz").exists()
  monkeypatch.setattr(
    ind, "susceptibilities", lambda *a, **k: pytest.fail("recomputed the susceptibilities")
  )
  (tmp_path / "summary.json").unlink()  # an analysis interrupted after the susceptibility stage
  again = ind.run(cfg, str(tmp_path), progress=False)
  assert again["formation_step"] == summary["formation_step"]
  assert again["group_distributions"] == summary["group_distributions"]


def test_induction_conditions_are_a_setting_that_needs_the_baseline():
  from mechjax import config as config_lib

  assert ind.Config().conditions == ind.CONDITIONS
  with pytest.raises(config_lib.ConfigError, match="conditions.*must include unweighted"):
    ind.Config().replace(conditions=("promote", "random"))
  with pytest.raises(config_lib.ConfigError, match="conditions"):
    ind.Config().replace(conditions=("unweighted", "sideways"))
