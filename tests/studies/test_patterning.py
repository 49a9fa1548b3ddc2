"""The pieces of the two patterning experiments that decide their outcome: groups, head masks, the
induction direction's sign, the re-weighting step, the formation step and the induction metrics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.data import parens
from mechjax.data import repeats
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import attention_patterns
from mechjax.studies import patterning_induction as ind
from mechjax.studies import patterning_parens as pp
from tests.helpers import check_report


def test_parens_groups_separate_labels_and_first_token():
  data = parens.make_dataset(0, 400, 10)
  ids, names = pp.groups(data["tokens"])
  assert ids.shape == (400,) and len(names) == ids.max() + 1
  for g in range(len(names)):
    members = data["tokens"][ids == g]
    assert len(set(parens.label(members, "prefix"))) == 1  # a group never mixes labels
    assert len(set(members[:, 0])) == 1  # nor first tokens
  assert (
    sum(n.startswith("bal") for n in names) >= 1 and sum(n.startswith("uneq") for n in names) >= 2
  )


def test_parens_probes_are_where_the_algorithms_disagree():
  data = pp.make_data(pp.Config(n=64, num_probes=32, num_test=16, disagreement=16, length=10))
  probes = data["probes"]["tokens"]
  assert np.all(parens.label(probes, "counts") == 1) and np.all(parens.label(probes, "prefix") == 0)
  assert np.all(probes[:, 0] == parens.OPEN) and np.all(probes[:, -1] == parens.CLOSE)
  assert np.array_equal(parens.label(data["train"]["tokens"], "counts"), data["train"]["label"])


def test_parens_config_refuses_a_chi_step_that_is_not_a_checkpoint():
  with pytest.raises(ValueError, match="multiple of checkpoint_every"):
    pp.Config().replace(steps=1000, checkpoint_every=250, chi_step=300)


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
  monkeypatch.setattr(ind, "CONDITIONS", ("unweighted", "promote"))
  cfg = ind.Config().replace(**TINY_INDUCTION)
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
