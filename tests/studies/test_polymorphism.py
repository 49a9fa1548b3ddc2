"""The polymorphism study on planted answers, and the experiment as a user runs it."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import flags as absl_flags

from mechjax import cli
from mechjax.align.haar import haar_orthogonal
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import fold_rmsnorm_gains
from mechjax.models.transformer import rotate_residual
from mechjax.studies.rotation import polymorphism
from mechjax.studies.rotation import polymorphism_analysis as analysis_lib
from mechjax.studies.rotation import polymorphism_report as report_lib
from tests.helpers import as_flags
from tests.helpers import check_report
from tests.helpers import run_module

CFG = polymorphism.Config().replace(
  optimizer=("sgd",),
  length=16,
  max_depth=4,
  d_model=16,
  num_heads=2,
  d_mlp=32,
  num_seeds=3,
  fit_sequences=64,
  eval_sequences=64,
  sae_latents=32,
  sae_top_k=4,
  sae_steps=200,
  num_null=59,
)
# The end-to-end run: as small as the pipeline allows (one chunk of training, one checkpoint, 16
# sequences per batch). Its time is mostly compiling the training and analysis programs, which no
# size below this makes cheaper.
TINY_CONFIGS = {
  "polymorphism": dict(
    optimizer=("sgd",),
    length=16,
    max_depth=4,
    d_model=16,
    num_heads=2,
    d_mlp=32,
    num_seeds=2,
    fit_sequences=16,
    eval_sequences=16,
    sae_latents=32,
    sae_top_k=4,
    sae_steps=20,
    num_null=59,
    steps=20,
    log_every=20,
    checkpoint_every=20,
  ),
}


def _signed_permutation(key, d):
  k_perm, k_sign = jax.random.split(key)
  perm = jnp.eye(d)[jax.random.permutation(k_perm, d)]
  return perm * jnp.where(jax.random.bernoulli(k_sign, 0.5, (d,)), 1.0, -1.0)[None, :]


@pytest.fixture(scope="module")
def planted():
  """Seed 0 is a model; seed 1 is the same model in a Haar-rotated basis with its stream scaled by
  2; seed 2 in a signed-permuted basis."""
  model = polymorphism.model_of(CFG)
  params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, CFG.length), jnp.int32))
  q = haar_orthogonal(jax.random.PRNGKey(1), CFG.d_model)
  p = _signed_permutation(jax.random.PRNGKey(2), CFG.d_model)
  seeds = [
    fold_rmsnorm_gains(params, CFG.num_layers),
    rotate_residual(model, params, q, scale=2.0)[1],
    rotate_residual(model, params, p)[1],
  ]
  params_S = jax.tree.map(lambda *a: jnp.stack(a), *seeds)
  out = analysis_lib.analyze(
    CFG, model, functools.partial(polymorphism.sample, CFG), params_S, progress=False
  )
  return out["sites"], out["rotations"], q, p


def test_the_sites_are_the_distinct_points_of_the_stream():
  assert analysis_lib.analysis_sites(Transformer(vocab_size=8, num_layers=2)) == [
    "resid_pre_0",
    "resid_mid_0",
    "resid_post_0",
    "resid_mid_1",
    "resid_post_1",
  ]


@pytest.mark.slow
def test_analysis_recovers_a_planted_rotation_and_its_transfers(planted):
  analysis, rotations, q, _ = planted
  assert list(analysis) == analysis_lib.analysis_sites(polymorphism.model_of(CFG))
  for site, a in analysis.items():
    np.testing.assert_allclose(rotations[f"{site}/0_1"], q, atol=2e-3, err_msg=site)
    pair = next(p for p in a["pairs"] if p["seeds"] == [0, 1])
    assert pair["rotation_split_half_agreement"] > 0.999, site
    assert pair["cka"] == pytest.approx(1.0, abs=1e-3) and pair["procrustes_distance"] < 0.05, site
    to_1 = next(x for x in pair["directions"] if x["source"] == 0)
    assert to_1["scale"] == pytest.approx(2.0, rel=1e-3), site
    assert to_1["aligned_ev_held_out"] > 0.999 and to_1["rotation_only_ev_held_out"] < 0.9, site
    assert to_1["identity_ev_held_out"] < 0.5, site  # without R the bases do not match
    # Seed 0's SAE, moved through sR, reconstructs seed 1 exactly as well as it reconstructs seed 0.
    assert to_1["sae_ev_aligned"] == pytest.approx(a["seeds"]["sae_ev_within"][0], abs=2e-3), site
    assert to_1["sae_ev_raw"] < to_1["sae_ev_aligned"] - 0.2, site
    # Seed 0's steering vector, moved through sR, does in seed 1 what seed 1's own vector does.
    assert to_1["steer_effect_aligned"] == pytest.approx(
      to_1["steer_effect_native"], rel=1e-2, abs=1e-4
    ), site
    assert to_1["steer_cos_aligned"] > 0.999, site


@pytest.mark.slow
def test_haar_tests_separate_a_haar_rotation_from_a_signed_permutation(planted):
  analysis, rotations, _, p = planted
  site = "resid_post_1"
  pairs = {tuple(x["seeds"]): x for x in analysis[site]["pairs"]}
  np.testing.assert_allclose(rotations[f"{site}/0_2"], p, atol=2e-3)
  permuted, haar_pair = pairs[(0, 2)]["haar"], pairs[(0, 1)]["haar"]
  floor = 1 / (CFG.num_null + 1)
  for stat in analysis_lib.BASIS_STATS:
    assert permuted[stat]["p_value"] == pytest.approx(floor), stat  # as extreme as it gets
    assert haar_pair[stat]["p_value"] > 0.05, stat
  # The paper's two tests cannot tell the signed permutation from Haar.
  assert permuted["frobenius_to_identity"]["p_value"] > 0.05
  summary = analysis[site]["summary"]
  assert summary["haar_applicable"] and summary["min_cross_covariance_rank"] == CFG.d_model
  # Pair (0, 2) is privileged; pair (0, 1) is Haar; pair (1, 2) is q^T p, Haar as well.
  assert summary["haar_basis_rejections"] == pytest.approx(1 / 3)
  table = report_lib.table_markdown({"sites": {s: a["summary"] for s, a in analysis.items()}})
  assert len(table.splitlines()) == 2 + len(analysis) and "resid_post_1" in table


@pytest.mark.slow
def test_experiment_writes_the_table_and_figures(tmp_path):
  wd = tmp_path / "poly"
  r = run_module(
    "experiments.polymorphism", *as_flags(TINY_CONFIGS["polymorphism"]), f"--workdir={wd}"
  )
  assert r.returncode == 0, r.stderr
  for f in (
    "config.json",
    "metrics.jsonl",
    "summary.json",
    "pairs.json",
    "rotations.npz",
    "table.md",
    "figures/training.png",
    "figures/dictionary_transfer.png",
    "figures/haar_tests.png",
    "figures/steering_transfer.png",
    "figures/rotation_matrices.png",
  ):
    assert (wd / f).exists(), f
  assert len(check_report(wd)) == 5
  summary = json.loads((wd / "summary.json").read_text())
  sites = summary["optimizers"]["sgd"]["sites"]
  assert summary["sites"] == analysis_lib.analysis_sites(Transformer(vocab_size=8, num_layers=2))
  assert set(sites) == set(summary["sites"])
  for m in sites.values():
    assert all(
      np.isfinite(m[k])
      for k in ("sae_ev_within", "sae_ev_raw", "sae_ev_aligned", "cka", "steer_ratio_aligned")
    )
  assert "| resid_post_1 |" in r.stdout and "sgd: test accuracy" in r.stdout
  with np.load(wd / "rotations.npz") as rot:
    assert rot["sgd/resid_post_1/0_1"].shape == (16, 16)


BAD_FLAGS = [
  ("--optimizer=rmsprop", "--optimizer"),
  ("--num_seeds=1", "--num_seeds"),
  ("--num_heads=3", "--num_heads"),
  ("--sgd_momentum=1", "--sgd_momentum"),
  ("--sae_top_k=300", "--sae_top_k"),
  ("--num_null=5", "--num_null"),
]


@pytest.mark.parametrize("flag,name", BAD_FLAGS)
def test_bad_flags_are_refused_naming_the_flag(flag, name):
  """The experiment's flags, parsed as its command line parses them, into its config."""
  fv = absl_flags.FlagValues()
  cli.define(
    polymorphism.Config, module_name="experiments.polymorphism", workdir="w", flag_values=fv
  )
  with pytest.raises((cli.FlagError, absl_flags.Error), match=name):
    fv(["polymorphism", flag])
    cli.config_from_flags(polymorphism.Config, fv)


@pytest.mark.slow
def test_a_bad_flag_gives_one_line_and_writes_nothing(tmp_path):
  flag, name = BAD_FLAGS[1]
  r = run_module("experiments.polymorphism", flag, f"--workdir={tmp_path / 'w'}")
  assert r.returncode == 2, r.stderr
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and name in lines[0], r.stderr
  assert not (tmp_path / "w").exists()
