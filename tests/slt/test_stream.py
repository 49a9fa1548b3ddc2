"""Chains on windows streamed from a token file on disk: the in-memory chains, step for step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax import slt
from mechjax.data import tokens
from mechjax.slt import sgld
from mechjax.slt import stream
from mechjax.slt.settings import settings_from
from tests.helpers import MeanDraw
from tests.helpers import expect_unmixed

VOCAB = 13


def bigram_loss(params, windows):
  """Next-token cross-entropy of a bigram model, the mean over windows and positions."""
  logits = params["embed"][windows[:, :-1]] @ params["unembed"]
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(logp, windows[:, 1:, None], axis=-1))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  docs = [np.random.default_rng(i).integers(1, VOCAB, 40) for i in range(12)]
  path = tmp_path_factory.mktemp("corpus") / "c.tokens"
  ids = tokens.read_tokens(tokens.write_tokens(path, docs, 0))
  k1, k2 = jax.random.split(jax.random.key(0))
  params = {
    "embed": jax.random.normal(k1, (VOCAB, 4)) / 2,
    "unembed": jax.random.normal(k2, (4, VOCAB)) / 2,
  }
  return ids, params


SETTINGS = dict(
  num_chains=2, num_draws=30, num_burnin=5, step_size=1e-3, nbeta=20.0, localization=10.0,
  batch_size=6, star_loss="per_step",
)  # fmt: skip


def test_disk_windows_are_a_view_of_the_memory_map(corpus):
  ids, _ = corpus
  windows = tokens.disk_windows(ids, 8)
  assert windows.shape == (len(ids) // 8, 8) and isinstance(windows, np.memmap)
  np.testing.assert_array_equal(windows[3], ids[24:32])
  with pytest.raises(ValueError, match="fewer than one window of seq_len=10000"):
    tokens.disk_windows(ids, 10_000)


@expect_unmixed
@pytest.mark.slow
def test_the_streamed_llc_is_the_in_memory_llc_with_the_same_key(corpus):
  ids, params = corpus
  windows = tokens.disk_windows(ids, 8)
  key = jax.random.key(3)
  memory = slt.estimate_llc(bigram_loss, params, np.asarray(windows, np.int32), key=key, **SETTINGS)
  # 35 steps in parts of 7 (the divisor of 35 nearest 8 from below), and in parts of 4 with a
  # shorter last one.
  for chunk in (8, 4):
    streamed = slt.estimate_llc(
      bigram_loss,
      params,
      slt.Streamed(windows, steps_per_chunk=chunk, dtype=np.int32),
      key=key,
      **SETTINGS,
    )
    np.testing.assert_array_equal(streamed.loss_trace, memory.loss_trace)
    np.testing.assert_array_equal(streamed.llc_per_chain, memory.llc_per_chain)
    assert streamed.init_loss == memory.init_loss
    assert streamed.diagnostics["star_loss"] == memory.diagnostics["star_loss"] == "per_step"
  # The per-sample path: the corpus streamed once through the loss at w*, and each part's losses
  # gathered beside its windows.
  settings = {**SETTINGS, "star_loss": "per_sample"}
  memory = slt.estimate_llc(bigram_loss, params, np.asarray(windows, np.int32), key=key, **settings)
  streamed = slt.estimate_llc(
    bigram_loss,
    params,
    slt.Streamed(windows, steps_per_chunk=8, dtype=np.int32),
    key=key,
    **settings,
  )
  assert streamed.diagnostics["star_loss"] == memory.diagnostics["star_loss"] == "per_sample"
  np.testing.assert_array_equal(streamed.llc_per_chain, memory.llc_per_chain)
  assert streamed.init_loss == memory.init_loss
  # Another key draws other windows: the equality above is not an accident of the data.
  other = slt.estimate_llc(
    bigram_loss, params, slt.Streamed(windows, dtype=np.int32), key=jax.random.key(4), **SETTINGS
  )
  assert not np.array_equal(other.loss_trace, memory.loss_trace)


@pytest.mark.slow
def test_an_accumulator_sees_the_same_draws_streamed(corpus):
  ids, params = corpus
  windows = tokens.disk_windows(ids, 8)
  s = settings_from(**{k: v for k, v in SETTINGS.items() if k != "star_loss"})
  args = (bigram_loss, params)
  memory = sgld.sample_chains(
    *args, np.asarray(windows, np.int32), jax.random.key(5), s, accumulator=MeanDraw()
  )
  streamed = sgld.sample_chains(
    *args,
    slt.Streamed(windows, steps_per_chunk=10, dtype=np.int32),
    jax.random.key(5),
    s,
    accumulator=MeanDraw(),
  )
  for name in ("embed", "unembed"):
    np.testing.assert_array_equal(streamed["accumulated"][name], memory["accumulated"][name])
  np.testing.assert_array_equal(streamed["distance"], memory["distance"])


def test_a_part_is_a_divisor_of_the_steps_when_one_is_near():
  assert stream.part_length(35, 8) == 7
  assert stream.part_length(37, 8) == 8  # a prime: parts of 8 and a last one of 5
  assert stream.part_length(10, 64) == 10
  assert stream.part_length(1000, 64) == 50


def test_bad_streamed_data_are_refused(corpus):
  ids, params = corpus
  with pytest.raises(ValueError, match=r"samples first, \(n, \.\.\.\) with n >= 1; got int"):
    slt.Streamed(3)
  with pytest.raises(ValueError, match="steps_per_chunk must be an int >= 1; got 0"):
    slt.Streamed(tokens.disk_windows(ids, 8), steps_per_chunk=0)
  small = slt.Streamed(tokens.disk_windows(ids, 8)[:4], dtype=np.int32)
  with pytest.raises(ValueError, match="batch_size=6 exceeds the 4 streamed samples"):
    slt.estimate_llc(bigram_loss, params, small, key=jax.random.key(0), **SETTINGS)


def bigram_token_losses(params, windows):
  """Per-token losses of the bigram model, ``(windows, positions)``."""
  logp = jax.nn.log_softmax(params["embed"][windows[:, :-1]] @ params["unembed"])
  return -jnp.take_along_axis(logp, windows[:, 1:, None], axis=-1)[..., 0]


@expect_unmixed
@pytest.mark.slow
def test_streamed_susceptibilities_are_the_in_memory_ones_with_the_same_key(corpus):
  ids, params = corpus
  windows = tokens.disk_windows(ids, 8)
  probes = np.asarray(windows[:2], np.int32)
  embed_only = {
    "embed": jnp.ones_like(params["embed"]),
    "unembed": jnp.zeros_like(params["unembed"]),
  }
  kwargs = dict(
    key=jax.random.key(4), components={"all": None, "embed": embed_only}, eval_size=16,
    **{k: v for k, v in SETTINGS.items() if k != "star_loss"},
  )  # fmt: skip
  memory = slt.estimate_susceptibilities(
    bigram_token_losses, params, np.asarray(windows, np.int32), probes, **kwargs
  )
  streamed = slt.estimate_susceptibilities(
    bigram_token_losses,
    params,
    slt.Streamed(windows, steps_per_chunk=4, dtype=np.int32),  # 35 steps: parts of 4 and a 3
    probes,
    **kwargs,
  )
  assert streamed.chi.shape == (2, 1, 14) and np.all(np.abs(memory.chi) > 0)
  # Float tolerance, not bits: the parts are programs of their own, whose compiled arithmetic may
  # round an ulp differently from the one long scan; over 35 steps that stayed under 1e-5 relative
  # (measured 6e-6). Another key, below, moves χ by far more.
  scale = np.abs(memory.chi_per_chain).max()
  np.testing.assert_allclose(
    streamed.chi_per_chain, memory.chi_per_chain, rtol=1e-4, atol=1e-6 * scale
  )
  np.testing.assert_allclose(streamed.llc, memory.llc, rtol=1e-4)
  np.testing.assert_array_equal(streamed.dloss_star, memory.dloss_star)
  other = slt.estimate_susceptibilities(
    bigram_token_losses,
    params,
    slt.Streamed(windows, steps_per_chunk=4, dtype=np.int32),
    probes,
    **{**kwargs, "key": jax.random.key(5)},
  )
  assert np.abs(other.chi - streamed.chi).max() > 1e-2 * np.abs(streamed.chi).max()
