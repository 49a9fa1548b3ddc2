"""The parenthesis patterning studies: probes, the ranking of shares, the LLC re-weightings and
their comparison, the forced references, and each study end to end."""

import types

import jax
import numpy as np
import pytest

from mechjax.data import parens
from mechjax.studies import frame
from mechjax.studies.patterning import patterning_parens as pp
from mechjax.studies.patterning import patterning_parens_base as pb
from mechjax.studies.patterning import patterning_parens_llc as pl
from mechjax.studies.patterning import patterning_parens_probe as ppp
from tests.helpers import check_report
from tests.helpers import expect_unmixed


def test_parens_probes_are_where_the_algorithms_disagree():
  data = pb.make_data(pp.Config(n=64, num_probes=32, num_test=16, disagreement=16, length=10))
  probes = data["probes"]["tokens"]
  assert np.all(parens.label(probes, "counts") == 1) and np.all(parens.label(probes, "prefix") == 0)
  assert np.all(probes[:, 0] == parens.OPEN) and np.all(probes[:, -1] == parens.CLOSE)
  assert np.array_equal(parens.label(data["train"]["tokens"], "counts"), data["train"]["label"])


def test_ranked_fractions_start_at_the_base_rate_nearest_one_half_or_the_given_one():
  sweep = [
    {"fraction": 0.0, "counts_share": 1.0},
    {"fraction": 0.25, "counts_share": 0.625},
    {"fraction": 0.5, "counts_share": 0.125},
  ]
  # By the distance of the counts share from one half: 0.125, 0.375, 0.5.
  assert pp.ranked_fractions(pp.Config(), sweep) == [
    (0.25, "sweep", True),
    (0.5, "sweep", False),
    (0.0, "sweep", False),
  ]
  cfg = pp.Config().replace(neg_prefix_fraction=0.5)
  assert pp.ranked_fractions(cfg, sweep) == [(0.5, "given", False)]
  cfg = pp.Config().replace(neg_prefix_fraction=0.9)
  assert pp.ranked_fractions(cfg, sweep) == [(0.9, "given", None)]
  lopsided = [{"fraction": 0.0, "counts_share": 1.0}, {"fraction": 0.5, "counts_share": 0.875}]
  assert pp.ranked_fractions(pp.Config(), lopsided)[0] == (0.5, "sweep", False)


def _responses(seed=0, groups=6):
  r = np.random.default_rng(seed)
  return {
    a: {"dllc_total": r.normal(size=groups).tolist(), "dtest": r.normal(size=groups).tolist()}
    for a in parens.ALGORITHMS
  }


def test_llc_targets_lower_the_gap_by_the_margin_and_keep_the_held_out_loss():
  responses = _responses()
  base = np.full(6, 1 / 6)
  out = pl.targets(responses, base, margin=0.05)
  for target, sign in (("counts", -1), ("prefix", 1)):
    rw = out[f"toward_{target}"]
    dist = np.asarray(rw["group_distribution"])
    assert np.all(dist >= -1e-12) and abs(dist.sum() - 1) < 1e-9
    pred = rw["predicted"]
    # toward counts lowers λ_counts − λ_prefix by the margin; toward prefix raises it by as much.
    assert abs(pred["dllc_counts_minus_prefix"] - sign * 0.05) < 1e-4, pred
    assert abs(pred["dtest_counts"]) < 1e-4 and abs(pred["dtest_prefix"]) < 1e-4
    assert 0 < rw["total_variation"] < 0.5


def test_random_reweighting_has_the_given_total_variation_and_stays_a_distribution():
  base = np.array([0.1, 0.2, 0.3, 0.4])
  flat = {a: {"dllc_total": np.ones(4), "dtest": np.ones(4)} for a in parens.ALGORITHMS}
  rw = pl.random_reweighting(0, base, 0.05, flat)
  dist = np.asarray(rw["group_distribution"])
  assert abs(rw["total_variation"] - 0.05) < 1e-12 and np.all(dist >= 0)
  assert abs(dist.sum() - 1) < 1e-12
  assert abs(rw["predicted"]["dllc_counts"]) < 1e-12  # a constant response sees no re-weighting
  np.testing.assert_equal(rw, pl.random_reweighting(0, base, 0.05, flat))  # a named stream


def test_compare_pairs_the_chains_and_fisher_counts_seeds():
  measured = {
    "counts": {"unweighted": [10.0, 12.0, 11.0], "x": [9.0, 11.5, 10.0]},
    "prefix": {"unweighted": [20.0, 21.0, 22.0], "x": [20.0, 21.0, 22.0]},
  }
  rw = {
    "x": {"predicted": {"dllc_counts": -1.0, "dllc_prefix": 0.0, "dllc_counts_minus_prefix": -1}}
  }
  row = pl.compare(rw, measured)["x"]
  assert row["dllc_counts"]["measured"] == pytest.approx(-2.5 / 3)
  assert row["dllc_counts"]["se"] == pytest.approx(np.std([-1, -0.5, -1], ddof=1) / np.sqrt(3))
  assert row["dllc_prefix"] == {"predicted": 0.0, "measured": 0.0, "se": 0.0}
  a = {"selected": {"counts": 8, "prefix": 0, "not perfect": 0}}
  b = {"selected": {"counts": 0, "prefix": 8, "not perfect": 0}}
  assert pl.fisher_p(a, b, "counts") == pytest.approx(2 / 12870)  # 2 / C(16, 8)
  assert pl.fisher_p(a, a, "counts") == 1.0


def test_parens_configs_refuse_a_chi_step_that_is_not_a_checkpoint_and_an_empty_sweep():
  with pytest.raises(ValueError, match="multiple of checkpoint_every"):
    ppp.Config().replace(steps=1000, checkpoint_every=250, chi_step=300)
  with pytest.raises(ValueError, match="needs --base_rate_fractions to choose from"):
    pp.Config().replace(base_rate_fractions=())
  assert pp.Config().replace(base_rate_fractions=(), neg_prefix_fraction=0.3).n == 4000
  # Each study has only its own settings; the shared ones keep their flag names in both.
  flat = {s: set(c().to_flat()) for s, c in (("llc", pp.Config), ("probe", ppp.Config))}
  assert {"chi_step", "target"} <= flat["probe"] - flat["llc"]
  assert {"base_rate_fractions", "reference_max_steps", "llc_margin"} <= flat["llc"] - flat["probe"]
  assert {"n", "chains", "sgld.mala", "llc_draws", "perfect_accuracy"} <= flat["llc"] & flat[
    "probe"
  ]
  assert "design" not in flat["llc"] | flat["probe"]


TINY_PARENS = dict(
  length=8,
  n=96,
  num_probes=8,
  num_test=32,
  disagreement=16,
  d_model=8,
  num_layers=1,
  num_heads=2,
  d_mlp=8,
  steps=20,
  checkpoint_every=10,
  log_every=10,
  num_seeds=2,
  chains=2,
  draws=8,
  burnin=2,
  llc_draws=8,
  per_group=2,
  eval_size=16,
  sgld_batch_size=16,
  batch_size=16,
  base_rate_fractions=(0.5,),
  reference_steps=200,
  perfect_accuracy=0.6,
)
# The end-to-end runs (.ci/tiny_summaries.py runs them too).
TINY_CONFIGS = {
  "patterning_parens": TINY_PARENS,
  "patterning_parens_probe": dict(
    {k: v for k, v in TINY_PARENS.items() if k != "base_rate_fractions"}, chi_step=10
  ),
}


@pytest.mark.slow
def test_a_forced_reference_short_of_perfect_trains_on_to_reference_max_steps(tmp_path):
  # One layer of width 16 reaches 0.95 in 300 steps (one of width 8 does not; two layers of width 8
  # do, at half again the compile time).
  bar = {"reference_steps": 1, "reference_max_steps": 300, "perfect_accuracy": 0.95}
  cfg = pp.Config().replace(**{**TINY_PARENS, **bar, "d_model": 16, "d_mlp": 16})
  ctx = frame.Context(str(tmp_path), False, cfg.run)
  refs = pb.reference_solutions(cfg, pb.Model(cfg), pb.make_data(cfg, 0.5), ctx, max_steps=300)
  for algorithm, r in refs.items():
    assert r["train_accuracy_at"][1] < 0.95, algorithm  # one step is not enough: it trained on
    assert r["steps"] == 300 and r["train_accuracy"] == r["train_accuracy_at"][300] >= 0.95


@pytest.mark.slow
def test_parens_stops_only_when_no_share_qualifies_naming_each(tmp_path):
  """With one step and no more for every reference, no share's references train: the study stops
  (StudyStopped: ``python -m`` prints it as one line and exits 1, tests/test_cli.py) naming each
  share it tried and the setting to raise."""
  bar = {"reference_steps": 1, "reference_max_steps": 1, "perfect_accuracy": 0.999}
  cfg = pp.Config().replace(**{**TINY_PARENS, **bar})
  sweep = [{"fraction": 0.5, "counts_share": 0.5}, {"fraction": 0.3, "counts_share": 1.0}]
  ctx = frame.Context(str(tmp_path), False, cfg.run)
  with pytest.raises(frame.StudyStopped) as stopped:
    pp.solved_share(cfg, pb.Model(cfg), sweep, ctx)
  text = str(stopped.value)
  assert text.startswith("no share's forced references reach training accuracy"), text
  assert "0.5: the" in text and "0.3: the" in text and "--reference_max_steps" in text
  assert "\n" not in text


@pytest.mark.slow
def test_parens_passes_over_a_share_whose_references_do_not_train(tmp_path, monkeypatch):
  """The first share of the ranking whose forced references cannot train (a bar that one step cannot
  reach) is passed over and recorded; the next share's references are runs of their own, trained
  as configured; the report says so. (Training on to reference_max_steps: the test above.)"""
  cfg = pp.Config().replace(**TINY_PARENS)
  sweep = [{"fraction": 0.5, "counts_share": 0.5}, {"fraction": 0.3, "counts_share": 1.0}]
  real, tried = pb.reference_solutions, []

  def first_share_cannot_train(cfg, model, data, ctx, **kw):
    tried.append(kw["prefix"])
    if kw["prefix"] == "":
      cfg = cfg.replace(reference_steps=1, perfect_accuracy=0.999)
      kw["max_steps"] = 1
    return real(cfg, model, data, ctx, **kw)

  monkeypatch.setattr(pb, "reference_solutions", first_share_cannot_train)
  ctx = frame.Context(str(tmp_path), False, cfg.run)
  fraction, chosen_by, in_range, data, refs, passed = pp.solved_share(
    cfg, pb.Model(cfg), sweep, ctx
  )
  assert (fraction, in_range) == (0.3, False) and chosen_by.startswith("sweep, rank 2")
  assert tried == ["", "share_0.3_"]  # the second share's references are its own runs
  [p] = passed
  assert (p["fraction"], p["algorithm"], p["steps"]) == (0.5, "counts", 1), p
  assert p["train_accuracy"] < 0.999
  assert np.array_equal(data["train"]["tokens"], pb.make_data(cfg, 0.3)["train"]["tokens"])
  for r in refs.values():
    assert r["steps"] == 200 and r["train_accuracy"] >= cfg.perfect_accuracy
  empty = dict.fromkeys(("reference_solutions", "predicted_vs_measured", "conditions"), {})
  lines = pp.report(
    {
      "base_rate_sweep": [],
      "shares_passed_over": passed,
      "neg_prefix_fraction": fraction,
      "neg_prefix_fraction_chosen_by": chosen_by,
      "base_rate_in_25_75": in_range,
      **empty,
    }
  )
  assert lines[1].startswith("  passed over 0.5: the forced counts reference reached"), lines
  assert lines[2].startswith("  continued at 0.3 (sweep, rank 2"), lines


@pytest.fixture(scope="module")
def two_trained_networks(tmp_path_factory):
  """Two seeds of one short run, standing in for the two forced references (the pass-over test
  trains those): the LLC analysis' inputs at share 0.5, trained once for the two tests below."""
  cfg = pp.Config().replace(**{**TINY_PARENS, "steps": 200, "sgld.mala": False})
  model, data = pb.Model(cfg), pb.make_data(cfg, 0.5)
  ctx = frame.Context(str(tmp_path_factory.mktemp("two")), False, cfg.run)
  trained = pb.train_weighted(cfg, model, data, np.ones(cfg.n), "two", ctx)
  refs = {a: {"params": trained.params_of(i)} for i, a in enumerate(parens.ALGORITHMS)}
  return cfg, model, data, refs, *parens.groups(data["train"]["tokens"])


@expect_unmixed
@pytest.mark.slow
def test_parens_llc_responses_and_the_reweightings_they_give(two_trained_networks):
  """Each network's LLC responds to every group (finite, with standard errors); the re-weighting
  toward each algorithm moves the gap its way (by at most the margin, to first order); the random
  control moves as much."""
  cfg, model, data, refs, ids, names = two_trained_networks
  chosen = pb.group_probes(cfg, ids, len(names))
  responses = pl.llc_responses(cfg, model, data, refs, ids[chosen], chosen, len(names))
  for r in responses.values():
    assert np.isfinite(r["llc"]) and np.all(np.isfinite(r["dllc_total"]))
    assert np.shape(r["dllc_implicit_se"]) == (len(names),) and np.all(r["dtest_se"] >= 0)
  base = np.bincount(ids) / len(ids)
  rw = pl.targets(responses, base, cfg.llc_margin)
  for target, sign in (("counts", -1), ("prefix", 1)):  # toward counts lowers λ_counts − λ_prefix
    gap = rw[f"toward_{target}"]["predicted"]["dllc_counts_minus_prefix"]
    assert 0 < sign * gap <= cfg.llc_margin + 1e-6, (target, gap)  # the simplex may stop it short
  tv = max(r["total_variation"] for r in rw.values())
  random = pl.random_reweighting(cfg.run.seed, base, tv, responses)
  # The random control moves as much, or as far as mixing toward its random distribution can.
  assert 0 < random["total_variation"] <= tv + 1e-9


@expect_unmixed
@pytest.mark.slow
def test_parens_llcs_remeasured_under_a_reweighting_pair_their_chains(two_trained_networks):
  """Each network's LLC is re-measured under every re-weighting with the unweighted estimate's
  chains: re-weighting toward the training distribution itself changes nothing, chain by chain,
  and another moves it by a finite, paired amount."""
  cfg, model, data, refs, ids, names = two_trained_networks
  base = np.bincount(ids) / len(ids)
  uniform = np.full(len(names), 1 / len(names))
  measured = pl.measure_llcs(cfg, model, data, refs, ids, {"base": base, "uniform": uniform})
  predicted = {"dllc_counts": 1.0, "dllc_prefix": 0.0, "dllc_counts_minus_prefix": 1.0}
  rows = pl.compare({k: {"predicted": predicted} for k in ("base", "uniform")}, measured)
  for a in parens.ALGORITHMS:
    llcs = measured[a]
    assert llcs["unweighted"].shape == (cfg.sgld.num_chains,) and np.all(
      np.isfinite(llcs["uniform"])
    )
    np.testing.assert_allclose(llcs["base"], llcs["unweighted"], rtol=1e-5)  # the same chains
    assert rows["base"][f"dllc_{a}"]["measured"] == pytest.approx(0, abs=1e-3)
  assert np.isfinite(rows["uniform"]["dllc_counts_minus_prefix"]["se"])


def _fake_references_and_estimates(monkeypatch):
  """Stands in for the forced references (:func:`pb.reference_solutions`) and the LLC analysis' two
  SGLD estimates (:func:`pl.llc_responses`, :func:`pl.measure_llcs`) with numbers of the right
  shapes, so that what the study does around them runs alone (the tests above run them)."""
  r = np.random.default_rng(0)

  def references(cfg, model, data, ctx, **kw):
    numbers = {"steps": 200, "train_accuracy": 1.0, "test_accuracy": 1.0, "phi_counts": 0.5}
    return {
      a: {"params": None, "counts_rate": float(a == "counts"), **numbers} for a in parens.ALGORITHMS
    }

  calls = []

  def responses(cfg, model, data, references, sub_ids, chosen, num_groups, held_out=True):
    calls.append(("responses", cfg.sgld.num_draws, cfg.sgld.batch_size, held_out))
    keys = ("dllc_total", "dllc_implicit", "dllc_explicit") + (("dtest",) if held_out else ())
    out = {a: {k: r.normal(size=num_groups) for k in keys} for a in parens.ALGORITHMS}
    se = {k: r.uniform(0.1, 1, num_groups) for k in ("dllc_implicit_se", "dtest_se")}
    chi = {"chi_rhat": r.uniform(1, 1.02, len(chosen)), "chi_ess": r.uniform(50, 500, len(chosen))}
    return {a: {**v, **se, **chi, "llc": 10.0, "test_loss_mean": 0.5} for a, v in out.items()}

  def measured(cfg, model, data, references, ids, distributions, mixing=None):
    calls.append(("measure", cfg.llc_draws, tuple(distributions)))
    names = ("unweighted", *distributions)
    if mixing is not None:
      mixing.update({a: {n: {"rhat": 1.0, "ess_bulk": 400.0} for n in names} for a in references})
    return {a: {n: 10 + r.normal(size=cfg.sgld.num_chains) for n in names} for a in references}

  monkeypatch.setattr(pb, "reference_solutions", references)
  monkeypatch.setattr(pl, "llc_responses", responses)
  monkeypatch.setattr(pl, "measure_llcs", measured)
  return calls


@pytest.mark.slow
def test_parens_llc_study_end_to_end_and_resume_reuses_the_analysis(tmp_path, monkeypatch):
  """The whole LLC study at one swept share (its unweighted seeds are the sweep's), with the
  references and the analysis' SGLD estimates stood in for: the re-weightings, four paired
  conditions, the summary, the report and the figure; a rerun after the analysis stage reuses it."""
  _fake_references_and_estimates(monkeypatch)
  cfg = pp.Config().replace(**TINY_PARENS)
  summary = pp.run(cfg, str(tmp_path), progress=False)
  [row] = summary["base_rate_sweep"]
  assert row["fraction"] == summary["neg_prefix_fraction"] == 0.5
  assert summary["neg_prefix_fraction_chosen_by"] == "sweep" and summary["shares_passed_over"] == []
  assert set(summary["conditions"]) == {"unweighted", *pl.REWEIGHTINGS}
  assert summary["conditions"]["unweighted"]["counts_rate"] == row["counts_rate"]  # the sweep's
  for c, o in summary["conditions"].items():
    assert sum(o["selected"].values()) == 2, c
  assert set(summary["fisher_p_vs_unweighted"]) == set(pl.REWEIGHTINGS)
  assert set(summary["predicted_vs_measured"]) == set(pl.REWEIGHTINGS)
  assert sorted(check_report(tmp_path)) == ["figures/patterning_parens.png"]
  lines = pp.report(summary)
  assert any("predicted" in line for line in lines)
  assert "continued at 0.5 (sweep" in (tmp_path / "report.html").read_text()  # led by the lines
  monkeypatch.setattr(pl, "llc_responses", lambda *a, **k: pytest.fail("recomputed the analysis"))
  monkeypatch.setattr(pl, "measure_llcs", lambda *a, **k: pytest.fail("recomputed the analysis"))
  (tmp_path / "summary.json").unlink()  # interrupted after the analysis stage
  again = pp.run(cfg, str(tmp_path), progress=False)
  assert again["predicted_vs_measured"] == summary["predicted_vs_measured"]
  assert again["conditions"] == summary["conditions"]


@pytest.mark.slow
def test_parens_reexamination_scales_the_study_s_own_reweightings_and_does_not_retrain(
  tmp_path, monkeypatch
):
  """With --total_variations: no base-rate sweep and no retraining; the re-weightings come from the
  responses at the study's own SGLD settings (500 draws, batches of 64, with the held-out loss),
  the predictions from those at this run's (8 draws, batches of 32, without it); each is scaled to
  every total variation, and the prediction scales with it; the LLCs are re-measured with this
  run's draws."""
  calls = _fake_references_and_estimates(monkeypatch)
  monkeypatch.setattr(pb, "train_weighted", lambda *a, **k: pytest.fail("trained seeds"))
  tvs = (0.001, 0.004)
  tiny = {**TINY_PARENS, "sgld_batch_size": 32}
  cfg = pp.Config().replace(**tiny, neg_prefix_fraction=0.5, total_variations=tvs)
  summary = pp.run(cfg, str(tmp_path), progress=False)
  assert calls[:2] == [("responses", 500, 64, True), ("responses", 8, 32, False)]
  names = {f"{n}@{tv:g}" for n in pl.REWEIGHTINGS for tv in tvs}
  assert calls[2][:2] == ("measure", 8) and set(calls[2][2]) == names
  assert set(summary["predicted_vs_measured"]) == names
  for n in pl.REWEIGHTINGS:
    small, large = (summary["predicted_vs_measured"][f"{n}@{tv:g}"] for tv in tvs)
    if f"{n}@0.004" in summary["clipped_to_the_simplex"]:
      continue
    assert summary["total_variation"][f"{n}@0.004"] == pytest.approx(0.004)
    gap = "dllc_counts_minus_prefix"
    assert large[gap]["predicted"] == pytest.approx(4 * small[gap]["predicted"])
  assert set(summary["chi"]) == set(parens.ALGORITHMS)
  assert 0 <= summary["chi"]["counts"]["share_failing"] <= 1
  assert any("predicted" in line for line in pp.report(summary))


@expect_unmixed
@pytest.mark.slow
def test_parens_probe_study_end_to_end_and_resume_reuses_the_patterning(tmp_path, monkeypatch):
  """The probe study on the tiny config, its forced references and their LLC estimates stood in for
  (the tests above train references; tests/slt estimates LLCs): the susceptibilities at
  ``chi_step``, a re-weighting toward each algorithm that stays a distribution, three paired
  conditions, the summary, the report and the figure; a rerun after the patterning stage reuses
  it."""

  def references(cfg, model, data, ctx, **kw):
    return {
      a: {
        "params": model.init(jax.random.PRNGKey(i)),
        "counts_rate": float(a == "counts"),
        "phi_counts": 0.3 + 0.4 * (a == "prefix"),
        "train_accuracy": 1.0,
        "test_accuracy": 1.0,
        "steps": 0,
      }
      for i, a in enumerate(parens.ALGORITHMS)
    }

  monkeypatch.setattr(pb, "reference_solutions", references)
  llc = types.SimpleNamespace(
    llc_mean=5.0, llc_per_chain=np.array([4.0, 6.0]), diagnostics={"rhat": 1.0, "ess_bulk": 400.0}
  )
  monkeypatch.setattr(ppp.llc_lib, "estimate_llc", lambda *a, **k: llc)
  cfg = ppp.Config().replace(**TINY_CONFIGS["patterning_parens_probe"])
  summary = ppp.run(cfg, str(tmp_path), progress=False)
  assert list(summary["conditions"]) == ["unweighted", "toward_counts", "toward_prefix"]
  for o in summary["conditions"].values():
    assert sum(o["selected"].values()) == cfg.run.num_seeds
  for r in summary["reference_solutions"].values():
    assert (r["llc_mean"], r["llc_sd_over_chains"]) == (5.0, 1.0)
  for a, t in summary["patterning"]["targets"].items():
    p = np.asarray(t["group_distribution"])
    assert np.all(p >= -1e-12) and p.sum() == pytest.approx(1.0) and t["total_variation"] > 0, a
  assert np.isfinite(summary["patterning"]["llc_at_w_star"])
  assert sorted(check_report(tmp_path)) == ["figures/patterning_parens.png"]
  assert len(ppp.report(summary)) == 2 + 1 + 3  # two references, χ's mixing, three conditions
  monkeypatch.setattr(ppp, "compute_patterning", lambda *a, **k: pytest.fail("recomputed"))
  (tmp_path / "summary.json").unlink()  # interrupted after the patterning stage
  again = ppp.run(cfg, str(tmp_path), progress=False)
  assert again["patterning"] == summary["patterning"]
  assert again["conditions"] == summary["conditions"]
