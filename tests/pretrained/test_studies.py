"""The studies on pretrained checkpoints, end to end on the tiny checkpoints
(experiments.pretrained_llc, experiments.pretrained_polymorphism)."""

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax import config
from mechjax import slt
from mechjax.align import haar
from mechjax.data import tokens
from mechjax.models import pretrained
from mechjax.slt import restriction
from mechjax.studies.llc import pretrained_llc
from mechjax.studies.rotation import pretrained_polymorphism
from tests.helpers import ROOT
from tests.helpers import check_report
from tests.helpers import expect_unmixed

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints")

# The tiny checkpoints have no tokenizer.json and the corpora here are random ids, so the studies
# cannot check the corpus against a tokenizer and warn that they do not; test_tokens.py and
# test_bad_inputs.py test that check.
pytestmark = pytest.mark.filterwarnings("ignore::mechjax.data.tokens.CorpusWarning")


def corpus(tmp_path):
  docs = np.random.default_rng(0).integers(1, 61, (20, 40))
  return tokens.write_tokens(tmp_path / "corpus.tokens", docs, eos_id=0)


@pytest.mark.parametrize(
  "name, missing",
  [("pretrained_llc", "model, corpus"), ("pretrained_polymorphism", "model_a, model_b, corpus")],
)
@pytest.mark.slow
def test_without_the_checkpoints_and_corpus_it_says_what_to_pass(tmp_path, name, missing):
  r = subprocess.run(
    [sys.executable, "-m", f"experiments.{name}", f"--workdir={tmp_path / 'run'}"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
  assert f"{missing}: required; pass --{missing.split(',')[0]}:" in r.stderr
  assert "huggingface-cli download" in r.stderr and "corpus_from_text" in r.stderr
  assert not (tmp_path / "run").exists()  # nothing written


def planted_pair(tmp_path, q=None):
  """llama_gqa and the same function with its residual stream rotated by a Haar ``q``, saved."""
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"))
  if q is None:
    q = np.asarray(haar.haar_orthogonal(jax.random.key(5), 32))
  pretrained.save(tmp_path / "rotated", *pretrained.rotate_residual(model, params, q))
  return os.path.join(HERE, "llama_gqa"), str(tmp_path / "rotated"), q


# The end-to-end runs' settings besides the checkpoints and the corpus (.ci/tiny_summaries.py runs
# them too, on the same checkpoints and a corpus made the same way).
TINY_CONFIGS = {
  "pretrained_polymorphism": dict(seq_len=8, fit_windows=16, held_windows=8, num_null=19),
  "pretrained_llc": dict(
    seq_len=8,
    num_windows=64,
    num_probes=2,
    eval_size=32,
    num_chains=2,
    num_draws=10,
    num_burnin=5,
    batch_size=8,
  ),
}


@pytest.mark.slow
def test_pretrained_polymorphism_recovers_a_planted_rotation_end_to_end(tmp_path, capsys):
  model_a, model_b, q = planted_pair(tmp_path)
  cfg = pretrained_polymorphism.Config().replace(
    model_a=model_a,
    model_b=model_b,
    corpus=corpus(tmp_path),
    **TINY_CONFIGS["pretrained_polymorphism"],
  )
  summary = pretrained_polymorphism.run(cfg, tmp_path / "run", progress=True)
  sites = ["resid_pre_0", "resid_mid_0", "resid_post_0", "resid_mid_1", "resid_post_1"]
  # The plan before the measurements, the Haar reference drawn once, a progress line per site.
  out = capsys.readouterr().out
  assert "parameters, d = 32; 5 residual sites; 16 fit and 8 held-out windows of 8 tokens" in out
  assert "(6 passes)" in out and "(4 forward passes)" in out and "GiB on the device" in out
  assert "R fitted at 5 sites in " in out
  # The planted rotation is one matrix, so every site's R is in its coset: one reference.
  assert len(re.findall(r"Haar reference of the det [+−]1 coset \(d = 32, 19 nulls\)", out)) == 1
  for i, site in enumerate(sites):
    assert re.search(rf"  {site}: {i + 1}/5 sites, .* (per site|sites/s), ETA of the run ", out)
  assert list(summary["sites"]) == sites and summary["sqrt_2d"] == 8.0
  rotations = np.load(tmp_path / "run" / "rotations.npz")
  for site, row in summary["sites"].items():
    np.testing.assert_allclose(rotations[site], q, atol=1e-5)  # float32 forwards, float64 fit
    assert row["cross_covariance_rank"] == 32
    assert row["aligned_ev_held_out"] > 1 - 1e-6 and row["identity_ev_held_out"] < 0.5
    assert abs(row["frobenius_to_identity"] - np.linalg.norm(q - np.eye(32))) < 1e-4
    assert abs(row["rotation_split_half_agreement"] - 1) < 1e-6
    # B's own vector is A's through q, so the transferred one steers B exactly as much.
    effect = row["steer_effect"]
    assert abs(effect["native"]) > 1e-4 and abs(row["steer_cos_aligned"] - 1) < 1e-6
    assert abs(effect["aligned"] - effect["native"]) < 1e-3 * abs(effect["native"])
    # A ratio only over a clearly positive native effect (these random weights' is not: one
    # held-out batch, so no standard error, and a negative effect).
    if effect["native"] > 0:
      assert abs(row["steer_ratio"]["aligned"] - 1) < 1e-3
    else:
      assert row["steer_ratio"] is None or row["steer_ratio"]["aligned"] is None
  assert sorted(check_report(tmp_path / "run")) == ["figures/alignment.png"]
  page = (tmp_path / "run" / "report.html").read_text()
  assert page.index("<h2>Verdict</h2>") < page.index("<img ")
  assert "resid_pre_0: R determined (split-half agreement 1.00)" in page
  lines = pretrained_polymorphism.report(summary)
  assert len(lines) == 1 + len(sites) and "EV " in lines[1] and "→ 1.000" in lines[1]


def test_the_studies_refuse_different_widths_long_windows_and_too_few_fit_tokens(tmp_path):
  import dataclasses

  model, _ = pretrained.load(os.path.join(HERE, "llama_gqa"))
  narrow = pretrained.DecoderLM(dataclasses.replace(model.arch, d_model=16))
  shapes = jax.eval_shape(narrow.init, jax.random.key(0), np.zeros((1, 2), np.int32))["params"]
  params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)  # only the width is read
  pretrained.save(tmp_path / "narrow", narrow, params)
  cfg = pretrained_polymorphism.Config().replace(
    model_a=os.path.join(HERE, "llama_gqa"),
    model_b=str(tmp_path / "narrow"),
    corpus=corpus(tmp_path),
  )
  with pytest.raises(
    ValueError, match="model_a, model_b: must have the same d_model; got 32 and 16"
  ):
    pretrained_polymorphism.run(cfg, tmp_path / "run", progress=False)
  with pytest.raises(ValueError, match="seq_len: must be at most 24, the models' position limit"):
    pretrained_polymorphism.run(cfg.replace(model_b=cfg.model_a), tmp_path / "run1")
  with pytest.raises(ValueError, match="seq_len: must be at most 24, the model's position limit"):
    pretrained_llc.run(
      pretrained_llc.Config().replace(model=cfg.model_a, corpus=cfg.corpus), tmp_path / "run3"
    )
  cfg = cfg.replace(model_b=cfg.model_a, seq_len=8, fit_windows=3)
  with pytest.raises(
    ValueError, match="fit_windows × seq_len = 24 tokens must be at least d_model"
  ):
    pretrained_polymorphism.run(cfg, tmp_path / "run2", progress=False)


@expect_unmixed
@pytest.mark.slow
def test_pretrained_llc_end_to_end_plan_progress_and_rerun(tmp_path, capsys, monkeypatch):
  cfg = pretrained_llc.Config().replace(
    model=os.path.join(HERE, "gpt_neox"),
    corpus=corpus(tmp_path),
    components="l0h0, l0h1, l1 mlp",  # the default, every head and MLP: the test below
    **TINY_CONFIGS["pretrained_llc"],
  )
  summary = pretrained_llc.run(cfg, tmp_path / "run", progress=True)
  out = capsys.readouterr().out
  assert "4 restrictions in 3 parts; 2 chains × (5 burn-in + 10 draws) each" in out
  assert "every 2 draws (5 per chain)" in out and "memory per device: " in out
  # A line as each part ends: 2 chains × 15 steps for all, the two heads together, the MLP.
  for done, label in ((30, "1/3 (all)"), (90, "2/3 (l0h0 … l0h1)"), (120, "3/3 (l1 mlp)")):
    assert f"part {label}: {done}/120 chain steps, " in out, out
  comps = summary["components"]
  assert list(comps) == ["all", "l0h0", "l0h1", "l1 mlp"]
  assert summary["probe_tokens"] == 2 * 7  # two windows of 8 tokens predict 7 each
  for c in comps.values():
    assert np.isfinite(c["llc"]) and 0 <= c["resolved_fraction"] <= 1
  saved = np.load(tmp_path / "run" / "susceptibilities.npz")
  assert saved["chi"].shape == (4, 14) and saved["probes"].shape == (2, 8)
  assert sorted(check_report(tmp_path / "run")) == [
    "figures/llc.png",
    "figures/susceptibilities.png",
  ]
  page = (tmp_path / "run" / "report.html").read_text()
  assert page.index("<h2>Verdict</h2>") < page.index("<img ")
  assert "Loss at w*: " in page and "Mixing: " in page
  lines = pretrained_llc.report(summary)
  assert lines[0].startswith("  gpt_neox: 2 layers, d_model 32") and len(lines) == 1 + 4
  # A finished run is read back, not recomputed.
  assert pretrained_llc.run(cfg, tmp_path / "run", progress=False) == summary
  calls, real = [], slt.estimate_susceptibilities
  monkeypatch.setattr(
    slt, "estimate_susceptibilities", lambda *a, **k: calls.append(k) or real(*a, **k)
  )
  # An interruption after the last part: the rerun loads every part and compiles no sampler.
  for name in ("susceptibilities.npz", "summary.json"):
    os.remove(tmp_path / "run" / name)
  loaded = pretrained_llc.run(cfg, tmp_path / "run", progress=False)
  assert loaded["components"] == summary["components"]
  assert [k for k in calls if "components" in k] == []
  # An interruption before the last part: the rerun loads the others and samples that one, the
  # only part its plan compiles.
  for name in ("susceptibilities.npz", "summary.json", "part-02.npz"):
    os.remove(tmp_path / "run" / name)
  again = pretrained_llc.run(cfg, tmp_path / "run", progress=False)
  for analyze in (True, False):
    assert [list(k["components"]) for k in calls if k.get("analyze", False) == analyze] == [
      ["l1 mlp"]
    ], analyze
  assert again["components"] == summary["components"]
  # A plan that does not fit the device stops before sampling, in one line naming what would fit.
  monkeypatch.setattr(pretrained_llc, "device_memory", lambda: 1000)
  with pytest.raises(config.ConfigError, match="the plan needs .* GiB per device for part all"):
    pretrained_llc.run(cfg, tmp_path / "small", progress=False)


def test_site_activations_are_the_sites_of_one_forward_pass_batch_by_batch():
  model, params = pretrained.load(os.path.join(HERE, "gpt2"))
  tokens = np.asarray(jax.random.randint(jax.random.PRNGKey(0), (5, 6), 0, model.arch.vocab_size))
  sites = pretrained.site_names(model)[:2]
  acts = pretrained_polymorphism.site_activations(
    model, params, {"w": tokens, "one": tokens[:1]}, sites, 2
  )
  _, expected = model.apply({"params": params}, jnp.asarray(tokens), return_sites=True)
  assert set(acts) == {"w", "one"} and list(acts["w"]) == sites
  for s in sites:
    x = expected[s].reshape(-1, model.arch.d_model)
    assert acts["w"][s].dtype == np.float64 and acts["w"][s].shape == (30, model.arch.d_model)
    np.testing.assert_allclose(acts["w"][s], x, rtol=1e-5, atol=1e-6)  # batches of 2, 2 and 1
    np.testing.assert_allclose(acts["one"][s], x[:6], rtol=1e-5, atol=1e-6)


def test_by_default_every_head_and_mlp_is_a_restriction_and_a_layers_heads_one_part():
  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  comps = pretrained_llc.restrictions("", model, params)
  heads = [f"attn_{i}.head_{h}" for i in range(2) for h in range(4)]
  assert sorted(comps) == sorted(["all", *heads, "mlp_0", "mlp_1"]) and comps["all"] is None
  todo = pretrained_llc.parts(comps)
  labels = ["all", "attn_0.head_0 … attn_0.head_3", "mlp_0", "attn_1.head_0 … attn_1.head_3"]
  assert [label for label, _ in todo] == [*labels, "mlp_1"]
  assert [list(group) for _, group in todo][1] == heads[:4]


def test_pretrained_llc_samples_the_restrictions_it_is_given():
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"))
  comps = pretrained_llc.restrictions("l1 mlp, l0h0+l0h2", model, params)
  assert list(comps) == ["all", "l1 mlp", "l0h0+l0h2"] and comps["all"] is None
  assert isinstance(comps["l1 mlp"], restriction.Restriction)  # carried as its boxes
  # Heads 0 and 2 are not one box of the query kernel: sampled as their mask, full-size.
  masks = pretrained.component_masks(model, params)
  union = jax.tree.map(np.maximum, masks["attn_0.head_0"], masks["attn_0.head_2"])
  for a, b in zip(jax.tree.leaves(comps["l0h0+l0h2"]), jax.tree.leaves(union)):
    np.testing.assert_array_equal(a, b)
  assert pretrained_llc.count(comps["l0h0+l0h2"]) == int(
    sum(np.sum(m) for m in jax.tree.leaves(union))
  )
  every = pretrained_llc.restrictions("", model, params)
  assert list(every) == ["all", *pretrained.component_boxes(model)]
  with pytest.raises(config.ConfigError, match="unknown restriction 'l0x'") as e:
    pretrained_llc.restrictions("l0x", model, params)
  assert tuple(e.value.names) == ("components",)


def test_one_draw_is_refused_before_sampling():
  with pytest.raises(config.ConfigError, match="at least 2: χ is a covariance over the draws"):
    pretrained_llc.Config().replace(num_draws=1)
  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  windows = np.zeros((32, 6), np.int32)
  for draws, every in ((1, 1), (5, 5)):  # one draw, or five thinned to one
    with pytest.raises(ValueError, match=f"got num_draws={draws} with eval_every={every}"):
      slt.estimate_susceptibilities(
        pretrained.lm_losses(model)[1],
        params,
        windows,
        windows[:1],
        key=jax.random.key(0),
        settings=pretrained_llc.Config().sgld,
        num_draws=draws,
        eval_every=every,
      )


@pytest.mark.slow
@pytest.mark.parametrize("chains, draws", [(1, 10), (2, 2)])
def test_a_run_of_one_chain_or_two_draws_completes_and_says_mixing_cannot_be_judged(
  tmp_path, chains, draws
):
  cfg = pretrained_llc.Config().replace(
    model=os.path.join(HERE, "gpt_neox"),
    corpus=corpus(tmp_path),
    components="all",
    **(TINY_CONFIGS["pretrained_llc"] | dict(num_chains=chains, num_draws=draws, num_burnin=0)),
  )
  assert cfg.eval_every == 0 and pretrained_llc.eval_stride(cfg) <= draws // 2
  summary = pretrained_llc.run(cfg, tmp_path / "run", progress=False)
  assert summary["chains"] == chains and summary["evaluated_draws"] >= 2
  page = (tmp_path / "run" / "report.html").read_text()
  why = "one chain" if chains == 1 else "2 evaluated draws per chain"
  assert f"Mixing: {why}: mixing cannot be judged" in page and "figures/llc.png" in page


def test_the_report_says_when_mixing_cannot_be_judged():
  mixing = {"rhat_max": None, "ess_min": None, "share_failing": 0.0}
  row = dict(llc=1.0, chi_mean=0.1, chi_abs_mean=0.1, chi_se_mean=None, resolved_fraction=0.0)
  summary = {
    "model": {"family": "gpt_neox", "layers": 6, "d_model": 512, "parameters": 70},
    "nbeta": 15.4,
    "probe_tokens": 504,
    "chains": 1,
    "evaluated_draws": 40,
    "components": {"all": {**row, "mixing": mixing}},
  }
  lines = pretrained_llc.report(summary)
  assert lines[1].endswith("one chain: mixing cannot be judged (no standard error, R̂ or ESS)")
  lines = pretrained_llc.report({**summary, "chains": 4, "evaluated_draws": 2})
  assert lines[1].endswith(
    "2 evaluated draws per chain: mixing cannot be judged (R̂ and ESS need more)"
  ), lines
