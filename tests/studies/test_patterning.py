"""The pieces of the two patterning experiments that decide their outcome: groups, head masks, the
induction direction's sign, the re-weighting step, the formation step and the induction metrics."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.data import parens
from mechjax.data import repeats
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import attention_patterns
from mechjax.studies import frame
from mechjax.studies import patterning_induction as ind
from mechjax.studies import patterning_parens as pp
from mechjax.studies import patterning_parens_base as pb
from mechjax.studies import patterning_parens_llc as pl
from mechjax.studies import patterning_parens_probe as ppp
from tests.helpers import ROOT
from tests.helpers import check_report


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


@pytest.mark.slow
def test_a_forced_reference_short_of_perfect_trains_on_to_reference_max_steps(tmp_path):
  # Two layers: one does not reach 0.95 in 300 steps.
  bar = {"reference_steps": 1, "reference_max_steps": 300, "perfect_accuracy": 0.95}
  cfg = pp.Config().replace(**{**TINY_PARENS, **bar, "num_layers": 2})
  ctx = frame.Context(str(tmp_path), False, cfg.run)
  refs = pb.reference_solutions(cfg, pb.Model(cfg), pb.make_data(cfg, 0.5), ctx, max_steps=300)
  for algorithm, r in refs.items():
    assert r["train_accuracy_at"][1] < 0.95, algorithm  # one step is not enough: it trained on
    assert r["steps"] == 300 and r["train_accuracy"] == r["train_accuracy_at"][300] >= 0.95


@pytest.mark.slow
def test_parens_stops_with_one_line_only_when_no_share_qualifies(tmp_path):
  flags = [f"--{k}={v}" for k, v in TINY_PARENS.items() if k != "base_rate_fractions"]
  # One step and no more for every reference: a single short training per share.
  flags += ["--base_rate_fractions=0.5,0.3", "--reference_steps=1", "--reference_max_steps=1"]
  flags += ["--perfect_accuracy=0.999", f"--workdir={tmp_path / 'run'}"]
  r = subprocess.run(
    [sys.executable, "-m", "experiments.patterning_parens", *flags],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert r.returncode == 1, r.stderr[-2000:]
  last = r.stderr.strip().splitlines()[-1]
  assert last.startswith("error: no share's forced references reach training accuracy"), last
  assert "0.5: the" in last and "0.3: the" in last and "--reference_max_steps" in last
  assert "Traceback" not in r.stderr


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


def _two_trained_networks(tmp_path):
  """Two seeds of one short run, standing in for the two forced references (the pass-over test
  trains those): the LLC analysis' inputs at share 0.5."""
  cfg = pp.Config().replace(**{**TINY_PARENS, "steps": 200, "sgld.mala": False})
  model, data = pb.Model(cfg), pb.make_data(cfg, 0.5)
  ctx = frame.Context(str(tmp_path), False, cfg.run)
  trained = pb.train_weighted(cfg, model, data, np.ones(cfg.n), "two", ctx)
  refs = {a: {"params": trained.params_of(i)} for i, a in enumerate(parens.ALGORITHMS)}
  return cfg, model, data, refs, *parens.groups(data["train"]["tokens"])


@pytest.mark.slow
def test_parens_llc_responses_and_the_reweightings_they_give(tmp_path):
  """Each network's LLC responds to every group (finite, with standard errors); the re-weighting
  toward each algorithm moves the gap its way (by at most the margin, to first order); the random
  control moves as much."""
  cfg, model, data, refs, ids, names = _two_trained_networks(tmp_path)
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


@pytest.mark.slow
def test_parens_llcs_remeasured_under_a_reweighting_pair_their_chains(tmp_path):
  """Each network's LLC is re-measured under every re-weighting with the unweighted estimate's
  chains: re-weighting toward the training distribution itself changes nothing, chain by chain,
  and another moves it by a finite, paired amount."""
  cfg, model, data, refs, ids, names = _two_trained_networks(tmp_path)
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

  def responses(cfg, model, data, references, sub_ids, chosen, num_groups):
    keys = ("dllc_total", "dllc_implicit", "dllc_explicit", "dtest")
    out = {a: {k: r.normal(size=num_groups) for k in keys} for a in parens.ALGORITHMS}
    se = {k: r.uniform(0.1, 1, num_groups) for k in ("dllc_implicit_se", "dtest_se")}
    return {a: {**v, **se, "llc": 10.0, "test_loss_mean": 0.5} for a, v in out.items()}

  def measured(cfg, model, data, references, ids, distributions):
    names = ("unweighted", *distributions)
    return {a: {n: 10 + r.normal(size=cfg.sgld.num_chains) for n in names} for a in references}

  monkeypatch.setattr(pb, "reference_solutions", references)
  monkeypatch.setattr(pl, "llc_responses", responses)
  monkeypatch.setattr(pl, "measure_llcs", measured)


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


def _tiny_attn_model():
  return Transformer(
    vocab_size=8,
    heads=(("token", 8),),
    d_model=8,
    num_layers=2,
    num_heads=2,
    max_len=8,
    attn_only=True,
  )


@pytest.mark.slow
def test_head_masks_select_exactly_one_head():
  model = _tiny_attn_model()
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))
  masks = ind.head_masks(params, num_layers=2, num_heads=2)
  assert list(masks) == ["L0H0", "L0H1", "L1H0", "L1H1"]
  total = jax.tree.map(lambda *m: sum(m), *masks.values())
  attn = total["params"]["attn_1"]
  # The heads partition every attention weight (each entry in exactly one mask) and touch nothing
  # else.
  for name in ("query", "key", "value", "out"):
    assert np.all(np.asarray(attn[name]["kernel"]) == 1)
  assert np.all(np.asarray(total["params"]["embed"]["embedding"]) == 0)
  m = masks["L1H0"]["params"]["attn_1"]
  assert np.all(np.asarray(m["query"]["kernel"])[:, 0] == 1) and np.all(
    np.asarray(m["query"]["kernel"])[:, 1] == 0
  )
  assert np.all(np.asarray(m["out"]["kernel"])[0] == 1) and np.all(
    np.asarray(m["out"]["kernel"])[1] == 0
  )
  assert np.all(np.asarray(masks["L0H0"]["params"]["attn_1"]["query"]["kernel"]) == 0)


@pytest.mark.slow
def test_repeats_copy_the_first_half_and_the_prefix_matching_score_finds_an_induction_head():
  data = repeats.sample(jax.random.PRNGKey(0), 64, 8, 16, 0.5)
  tok, rep = np.asarray(data["tokens"]), np.asarray(data["repeat"]).astype(bool)
  assert 0 < rep.sum() < 64 and np.array_equal(tok[rep, 4:], tok[rep, :4])
  assert not np.array_equal(tok[~rep, 4:], tok[~rep, :4])
  t = 8
  perfect = np.zeros((2, 1, t, t))
  perfect[:, 0, np.arange(t), np.arange(t)] = 1.0  # attends to itself everywhere ...
  q = np.arange(4, t)
  perfect[:, 0, q] = 0.0
  perfect[:, 0, q, q - 3] = (
    1.0  # ... except in the second copy, where it attends to the induction target
  )
  np.testing.assert_allclose(np.asarray(repeats.prefix_matching_score(jnp.asarray(perfect))), [1.0])
  diagonal = np.broadcast_to(np.eye(t), (2, 1, t, t))
  np.testing.assert_allclose(
    np.asarray(repeats.prefix_matching_score(jnp.asarray(diagonal))), [0.0]
  )
  model = _tiny_attn_model()
  params = model.init(jax.random.PRNGKey(1), tok[:2] % 8)
  pattern = np.asarray(attention_patterns(model, params, jnp.asarray(tok[:3] % 8)))
  assert pattern.shape == (2, 3, 2, 8, 8)
  np.testing.assert_allclose(pattern.sum(-1), 1.0, rtol=1e-5)
  assert np.all(np.triu(pattern, 1) == 0)  # causal


def test_formation_step_interpolates_and_reports_never():
  steps = np.array([0, 100, 200, 300])
  assert ind.formation_step(steps, np.array([4.0, 3.0, 1.0, 0.5]), 2.0) == 150.0
  assert ind.formation_step(steps, np.array([4.0, 3.0, 2.5, 2.1]), 2.0) is None


def test_induction_direction_points_to_the_induction_positions_and_reweighting_is_a_distribution():
  cfg = ind.Config(length=8, probe_sequences=4, top_components=3)
  groups = ind.group_ids(cfg, np.array([1, 1, 0, 0])).reshape(-1)
  is_induction = (groups >= cfg.length - 1) & ((groups % (cfg.length - 1)) >= cfg.length // 2)
  rng = np.random.default_rng(0)
  # χ = one component row loading *negatively* on the induction tokens, plus small noise.
  chi = np.outer([1.0, -0.5, 0.2], np.where(is_induction, -1.0, 0.3)) + 0.01 * rng.normal(
    size=(3, groups.size)
  )
  d = ind.induction_direction(cfg, chi, groups)
  assert d["component"] == 0 and abs(d["correlations"][0]) > 0.99
  induction_groups = cfg.length - 1 + np.arange(cfg.length // 2, cfg.length - 1)
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
  n=64,
  probe_sequences=4,
  eval_sequences=8,
  chains=2,
  draws=4,
  burnin=1,
  sgld_batch_size=8,
  eval_size=8,
  batch_size=8,
)


@pytest.mark.slow
def test_induction_study_end_to_end_and_resume_reuses_the_susceptibilities(tmp_path, monkeypatch):
  # Two of the four conditions (each condition is one more compiled training program; the suite's
  # budget).
  cfg = ind.Config().replace(**TINY_INDUCTION, conditions=("unweighted", "promote"))
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


def test_cpu_cores_as_devices_changes_nothing_once_jax_has_started():
  from mechjax.train import flags as shared

  jnp.ones(2).block_until_ready()
  before = jax.devices()
  assert shared.cpu_cores_as_devices() is False
  assert jax.devices() == before


def test_induction_conditions_are_a_setting_that_needs_the_baseline():
  from mechjax import config as config_lib

  assert ind.Config().conditions == ind.CONDITIONS
  with pytest.raises(config_lib.ConfigError, match="conditions.*must include unweighted"):
    ind.Config().replace(conditions=("promote", "random"))
  with pytest.raises(config_lib.ConfigError, match="conditions"):
    ind.Config().replace(conditions=("unweighted", "sideways"))
