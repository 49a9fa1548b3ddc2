"""Parenthesis data: the two algorithms agree on training strings and disagree on every probe."""

import numpy as np
import pytest

from mechjax.data import parens


def _s(text):
  return np.array([parens.OPEN if c == "(" else parens.CLOSE for c in text])


def test_rules_on_known_strings():
  assert parens.balanced(_s("(())()")) and parens.equal_counts(_s("(())()"))
  assert not parens.balanced(_s("())(")) and parens.equal_counts(_s("())("))
  assert not parens.equal_counts(_s("((()"))
  np.testing.assert_array_equal(parens.prefix_sums(_s("())(")), [1, 0, -1, 0])


def test_training_set_is_perfect_for_both_algorithms_and_probes_split_them():
  data = parens.make_dataset(seed=0, num=2000, length=10)
  t, y = data["tokens"], data["label"]
  assert t.shape == (2000, 10) and abs(y.mean() - 0.5) < 1e-9
  eq = parens.equal_counts(t)
  assert np.all(parens.balanced(t[eq]))  # no equal-count string with a negative prefix
  np.testing.assert_array_equal(parens.label(t, "counts"), parens.label(t, "prefix"))
  probes = parens.sample_probes(np.random.default_rng(1), 500, 10)
  assert np.all(parens.label(probes, "counts") == 1) and np.all(parens.label(probes, "prefix") == 0)


def test_balanced_strings_are_uniform_over_dyck_words():
  # Length 6 has 5 Dyck words; 5000 uniform draws give each about 1000 (sd 28).
  words = parens.sample_balanced(np.random.default_rng(0), 5000, 6)
  _, counts = np.unique(words, axis=0, return_counts=True)
  assert len(counts) == 5 and np.all(np.abs(counts - 1000) < 150)


def test_same_seed_same_dataset_and_bad_length_refused():
  a, b = parens.make_dataset(3, 100, 8), parens.make_dataset(3, 100, 8)
  np.testing.assert_array_equal(a["tokens"], b["tokens"])
  with pytest.raises(ValueError, match="even"):
    parens.make_dataset(0, 10, 7)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_neg_prefix_fraction_sets_the_share_of_negatives_with_the_cue(fraction):
  data = parens.make_dataset(0, 2000, 20, neg_prefix_fraction=fraction)
  neg = data["tokens"][data["label"] == 0]
  assert len(neg) == 1000 and not np.any(parens.equal_counts(neg))
  assert parens.has_negative_prefix(neg).mean() == fraction
  # Both algorithms still agree on every training string.
  np.testing.assert_array_equal(
    parens.label(data["tokens"], "counts"), parens.label(data["tokens"], "prefix")
  )


def test_uniform_negatives_mostly_carry_the_cue_and_a_bad_fraction_is_refused():
  neg = parens.sample_unequal(np.random.default_rng(0), 4000, 20)
  assert 0.78 < parens.has_negative_prefix(neg).mean() < 0.84  # about 81% at length 20
  with pytest.raises(ValueError, match=r"neg_prefix_fraction must be in \[0, 1\]"):
    parens.sample_unequal(np.random.default_rng(0), 10, 20, 1.5)


def test_groups_separate_labels_and_first_tokens():
  data = parens.make_dataset(0, 400, 10)
  ids, names = parens.groups(data["tokens"])
  assert ids.shape == (400,) and len(names) == ids.max() + 1
  for g in range(len(names)):
    members = data["tokens"][ids == g]
    assert len(set(parens.label(members, "prefix"))) == 1  # a group never mixes labels
    assert len(set(members[:, 0])) == 1  # nor first tokens
  assert (
    sum(n.startswith("bal") for n in names) >= 1 and sum(n.startswith("uneq") for n in names) >= 2
  )


def test_inner_probes_start_with_open_and_end_with_close_and_too_few_are_refused():
  probes = parens.sample_probes(np.random.default_rng(0), 50, 10, inner=True)
  assert probes.shape == (50, 10) and len(np.unique(probes, axis=0)) > 10
  assert np.all(probes[:, 0] == parens.OPEN) and np.all(probes[:, -1] == parens.CLOSE)
  assert np.all(parens.label(probes, "counts") == 1) and np.all(parens.label(probes, "prefix") == 0)
  # At length 4 the probes are ())(, )((), )()( and ))((: none starts with ( and ends with ).
  with pytest.raises(ValueError, match=r"only 0 of 32 probes start with \( and end with \)"):
    parens.sample_probes(np.random.default_rng(0), 2, 4, inner=True)
