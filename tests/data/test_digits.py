"""The 8×8 digits: pixels in [0, 1], a fixed disjoint split, and the corner trigger."""

import jax.numpy as jnp
import numpy as np

from mechjax.data import digits


def test_split_is_fixed_by_the_seed_and_disjoint():
  x, y = digits.load()
  assert x.shape == (1797, 64) and x.dtype == np.float32 and 0 <= x.min() and x.max() == 1
  assert set(np.unique(y)) == set(range(10))
  x_tr, y_tr, x_te, y_te = digits.load_split(0)
  assert len(y_tr) == 1258 and len(y_tr) + len(y_te) == 1797
  again = digits.load_split(0)
  np.testing.assert_array_equal(again[0], x_tr)
  assert not np.array_equal(digits.load_split(1)[1], y_tr)
  rows = {r.tobytes() for r in x_tr}
  assert sum(r.tobytes() in rows for r in x_te) < 5  # the few duplicate images of the data set


def test_trigger_stamps_the_bottom_right_corner_only():
  t = np.asarray(digits.trigger(jnp.zeros((2, 64)), 2)).reshape(2, 8, 8)
  assert t[:, 6:, 6:].min() == 1 and t.sum() == 2 * 4
