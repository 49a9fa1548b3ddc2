"""train_lm: language models trained on a token corpus, exported as Hugging Face folders."""

import math
import os

import jax
import numpy as np
import pytest

from mechjax.data import language
from mechjax.data import tokens
from mechjax.models import pretrained
from mechjax.studies.language import train_lm
from mechjax.train import loop
from tests.helpers import check_report
from tests.helpers import write_wiki_dump

TINY_CONFIGS = {
  "train_lm": dict(
    d_model=16,
    num_layers=1,
    num_heads=2,
    seq_len=8,
    batch_size=4,
    steps=6,
    log_every=3,
    checkpoint_every=6,
    warmup_steps=1,
    num_exports=2,
    eval_windows=2,
  )
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  folder = tmp_path_factory.mktemp("corpus")
  dump = write_wiki_dump(folder / "dump.xml", n=12)
  return language.make_corpus(folder / "corpus", vocab_size=300, heldout_every=4, dump=dump)


def test_export_steps_are_log_spaced_and_end_at_the_last_step():
  cfg = train_lm.Config().replace(steps=1000, num_exports=4)
  assert train_lm.export_steps(cfg) == [1, 10, 100, 1000]
  cfg = train_lm.Config().replace(steps=300, warmup_steps=10, num_exports=40)
  steps = train_lm.export_steps(cfg)
  assert steps[0] == 1 and steps[-1] == 300 and steps == sorted(set(steps)) and len(steps) < 40


@pytest.mark.slow
def test_a_steps_batch_depends_on_its_key_alone(corpus):
  cfg = train_lm.Config().replace(**TINY_CONFIGS["train_lm"])
  model = pretrained.DecoderLM(train_lm.make_arch(cfg, 300))
  ids = np.asarray(tokens.read_tokens(corpus.train))
  problem = train_lm.make_problem(cfg, model, ids, np.zeros((2, 9), np.int32))
  params = jax.jit(problem.init)(jax.random.key(0))
  loss = jax.jit(lambda key: problem.loss(params, key)[0])  # one program for the three keys
  a = loss(jax.random.key(5))
  assert float(a) == float(loss(jax.random.key(5)))
  assert float(a) != float(loss(jax.random.key(6)))
  assert abs(float(a) - math.log(300)) < 0.05  # sd-0.02 weights: nearly uniform predictions


@pytest.mark.slow
def test_heldout_loss_weighs_every_window_once(corpus):
  cfg = train_lm.Config().replace(**TINY_CONFIGS["train_lm"])
  model = pretrained.DecoderLM(train_lm.make_arch(cfg, 300))
  params_S = jax.jit(jax.vmap(lambda k: train_lm.init_params(model, k)))(
    jax.random.split(jax.random.key(1), 2)
  )
  w = np.random.default_rng(0).integers(0, 300, (7, 9)).astype(np.int32)
  got = train_lm.heldout_loss(model, params_S, w, batch=3)  # 3 + 3 + 1 (padded)
  losses = jax.jit(lambda p: pretrained.next_token_losses(model, p, w).mean())
  for i in range(2):
    want = float(losses(jax.tree.map(lambda a: a[i], params_S)))
    assert got[i] == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gpt_neox", "llama"])
def test_train_lm_trains_seeds_and_exports_checkpoints_transformers_can_read(
  arch, corpus, tmp_path, capsys
):
  cfg = train_lm.Config().replace(corpus=corpus.directory, arch=arch, **TINY_CONFIGS["train_lm"])
  summary = train_lm.run(cfg, tmp_path / "run", progress=True)
  out = capsys.readouterr().out
  assert f"train_lm: 2 seeds of a {arch} model (" in out and "6 steps of 4 × 8 tokens" in out
  assert "3 exports per seed" in out
  assert summary["export_steps"] == [0, 1, 6]
  assert len(summary["heldout_loss"]) == 2 and all(np.isfinite(summary["heldout_loss"]))
  model = pretrained.DecoderLM(train_lm.make_arch(cfg, 300))
  problem = train_lm.make_problem(cfg, model, np.zeros(100, np.uint16), np.zeros((1, 9), np.int32))
  keys = loop.seed_keys(cfg.run.seed, cfg.run.num_seeds)
  optimizer = train_lm.make_optimizer(cfg)
  saved = loop.checkpoint_params(problem, optimizer, keys=keys, workdir=tmp_path / "run", name="lm")
  start = jax.jit(jax.vmap(lambda k: loop.init_state(problem, optimizer, k)))(keys)
  for seed in range(2):
    folder = os.path.join(summary["exports"][seed])
    assert sorted(os.listdir(folder)) == ["step0", "step1", "step6"]
    loaded_model, params = pretrained.load(os.path.join(folder, "step6"))
    assert loaded_model.arch == model.arch
    want = jax.tree.map(lambda a: a[seed], saved[6])
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), params, want))
    assert (
      tokens.fingerprint(os.path.join(folder, "step6")) == corpus.manifest["tokenizer_fingerprint"]
    )
    _, init = pretrained.load(os.path.join(folder, "step0"))
    want = jax.tree.map(lambda a: a[seed], start["params"])  # the state training started from
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), init, want))
  assert check_report(tmp_path / "run") == ["figures/loss.png"]
  again = train_lm.run(cfg, tmp_path / "run", progress=False)  # finished: read back
  assert again["heldout_loss"] == summary["heldout_loss"]
