import jax
import numpy as np
import pytest

from mechjax.data import dyck


def reference_check(tokens, k, max_depth):
  stack, depths, valids, valid = [], [], [], True
  for t in tokens:
    if 2 <= t < 2 + k:
      if len(stack) >= max_depth:
        valid = False
      else:
        stack.append(t - 2)
    elif 2 + k <= t < 2 + 2 * k:
      if not stack or stack[-1] != t - 2 - k:
        valid = False
      if stack:
        stack.pop()
    depths.append(len(stack))
    valids.append(valid)
  return depths, valids


@pytest.mark.slow
def test_targets_match_a_reference_stack_machine():
  batch = dyck.sample_dyck(jax.random.PRNGKey(0), 120, length=32, k=3, max_depth=4)
  toks = np.asarray(batch["tokens"])
  assert toks.shape == (120, 32) and np.all(toks[:, 0] == dyck.BOS)
  assert toks.max() < dyck.vocab_size(3)
  for i in range(120):
    depths, valids = reference_check(toks[i].tolist(), 3, 4)
    np.testing.assert_array_equal(np.asarray(batch["depth"][i]), depths)
    np.testing.assert_array_equal(np.asarray(batch["valid"][i]), valids)
  np.testing.assert_array_equal(batch["next_token"][:, :-1], toks[:, 1:])
  assert not bool(batch["mask"][0, -1]) and bool(batch["mask"][0, 0])


@pytest.mark.slow
def test_uncorrupted_sequences_are_valid_and_corruption_breaks_about_half():
  clean = dyck.sample_dyck(jax.random.PRNGKey(1), 200, length=64, p_corrupt=0.0)
  assert bool(np.all(clean["valid"]))
  assert int(np.max(clean["depth"])) <= 8 and int(np.max(clean["depth"])) >= 4
  mixed = dyck.sample_dyck(jax.random.PRNGKey(2), 2000, length=64, p_corrupt=0.5)
  broken = 1 - np.mean(np.asarray(mixed["valid"][:, -1]))
  assert 0.25 < broken < 0.5  # some corruptions (a close turned into an open) leave a valid prefix


def test_bad_arguments():
  with pytest.raises(ValueError, match="p_open"):
    dyck.sample_dyck(jax.random.PRNGKey(0), 2, p_open=1.0)


@pytest.mark.slow
def test_losses_of_the_three_targets():
  batch = dyck.sample_dyck(jax.random.PRNGKey(3), 8, length=12, k=3, max_depth=4)
  classes = {"token": dyck.vocab_size(3), "depth": 5, "valid": 2}
  targets = {"token": batch["next_token"], "depth": batch["depth"], "valid": batch["valid"] * 1}
  right = {h: 20.0 * jax.nn.one_hot(targets[h], n) for h, n in classes.items()}
  # The last position has no next token: a wrong guess there does not count.
  right["token"] = right["token"].at[:, -1].set(20.0 * jax.nn.one_hot(2, classes["token"]))
  out = dyck.losses(right, batch)
  for h in classes:
    assert float(out[f"{h}_acc"]) == 1.0 and float(out[f"{h}_loss"]) < 1e-6, h
  uniform = dyck.losses({h: np.zeros((8, 12, n)) for h, n in classes.items()}, batch)
  for h, n in classes.items():
    np.testing.assert_allclose(uniform[f"{h}_loss"], np.log(n), rtol=1e-5)
