"""Repeated sequences, their token groups and the prefix-matching score."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.data import repeats
from mechjax.models.transformer import attention_only
from mechjax.models.transformer import attention_patterns


def test_token_groups_their_shares_and_the_induction_groups():
  groups = repeats.token_groups(np.array([0, 1]), 6)
  np.testing.assert_array_equal(groups, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
  shares = repeats.group_shares(6, 0.25)
  np.testing.assert_allclose(shares, [0.15] * 5 + [0.05] * 5)
  assert shares.sum() == pytest.approx(1.0)
  # Length 6: the predictions at positions 3 and 4 (of tokens 4 and 5) copy tokens 1 and 2.
  np.testing.assert_array_equal(repeats.induction_groups(6), [8, 9])
  drawn = repeats.sample(jax.random.PRNGKey(0), 4000, 6, 4, 0.25)
  ids = repeats.token_groups(drawn["repeat"], 6).reshape(-1)
  np.testing.assert_allclose(np.bincount(ids, minlength=10) / ids.size, shares, atol=0.01)


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
  perfect[:, 0, q, q - 3] = 1.0  # ... except in the second copy, where it attends to the target
  np.testing.assert_allclose(np.asarray(repeats.prefix_matching_score(jnp.asarray(perfect))), [1.0])
  diagonal = np.broadcast_to(np.eye(t), (2, 1, t, t))
  np.testing.assert_allclose(
    np.asarray(repeats.prefix_matching_score(jnp.asarray(diagonal))), [0.0]
  )
  model = attention_only(vocab=8, length=8, d_model=8, num_layers=2, num_heads=2)
  params = model.init(jax.random.PRNGKey(1), tok[:2] % 8)
  pattern = np.asarray(attention_patterns(model, params, jnp.asarray(tok[:3] % 8)))
  assert pattern.shape == (2, 3, 2, 8, 8)
  np.testing.assert_allclose(pattern.sum(-1), 1.0, rtol=1e-5)
  assert np.all(np.triu(pattern, 1) == 0)  # causal
