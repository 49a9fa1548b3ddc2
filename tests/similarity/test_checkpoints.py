"""mechjax.similarity.checkpoints: the four measures between many networks of one architecture."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.models import bilinear as bl
from mechjax.similarity import baselines
from mechjax.similarity import checkpoints
from mechjax.similarity import representational as rep
from mechjax.similarity import tensor as ts

MODEL = nn.Sequential([bl.Bilinear(6, project=False), bl.Linear(3)])


def _params(seed):
  return MODEL.init(jax.random.PRNGKey(seed), jnp.zeros((1, 4)))


def _permuted(params, perm):
  """The same function with its hidden units reordered: L, R rows and the readout's columns."""
  p = jax.tree.map(lambda a: a, params)
  first = p["params"]["layers_0"]
  first["left"], first["right"] = first["left"][perm], first["right"][perm]
  p["params"]["layers_1"]["weight"] = p["params"]["layers_1"]["weight"][:, perm]
  return p


@pytest.mark.slow
def test_each_entry_is_the_pairwise_measure():
  params = [_params(s) for s in range(3)]
  x = jax.random.normal(jax.random.PRNGKey(9), (20, 4))
  m = checkpoints.matrices(MODEL, params, x, slice_index=2)
  assert set(m) == {*checkpoints.MEASURES, "tensor_slice"}
  for k, v in m.items():
    assert v.shape == (3, 3), k
    np.testing.assert_allclose(v, v.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(v), 1.0, atol=1e-5)
  a, b = params[0], params[2]
  na, nb = bl.to_layers(MODEL, a), bl.to_layers(MODEL, b)
  hidden = lambda p: checkpoints.hidden_products(MODEL, p, x)  # noqa: E731
  flat = lambda p: checkpoints.flat_weights(p)  # noqa: E731
  expected = {
    "tensor": ts.tensor_similarity(na, nb),
    "tensor_slice": ts.slice_similarity(na, nb)[2],
    "logit_cosine": baselines.output_cosine(MODEL.apply(a, x), MODEL.apply(b, x)),
    "weight_cosine": flat(a) @ flat(b) / (jnp.linalg.norm(flat(a)) * jnp.linalg.norm(flat(b))),
    "cka": rep.linear_cka(hidden(a), hidden(b)),
  }
  for k, v in expected.items():
    np.testing.assert_allclose(m[k][0, 2], v, rtol=1e-5, err_msg=k)
  assert not np.allclose(m["tensor"][0, 2], 1.0)


def test_a_hidden_permutation_moves_only_the_weight_cosine():
  a = _params(0)
  x = jax.random.normal(jax.random.PRNGKey(1), (20, 4))
  m = checkpoints.matrices(MODEL, [a, _permuted(a, jnp.array([5, 4, 3, 2, 1, 0]))], x)
  for k in ("tensor", "logit_cosine", "cka"):
    np.testing.assert_allclose(m[k][0, 1], 1.0, atol=1e-5, err_msg=k)
  assert m["weight_cosine"][0, 1] < 0.99


def test_refusals():
  with pytest.raises(ValueError, match="first layer is a bilinear.Bilinear"):
    checkpoints.hidden_products(nn.Sequential([bl.Linear(3)]), {}, jnp.zeros((1, 4)))
  with pytest.raises(ValueError, match="at least one"):
    checkpoints.matrices(MODEL, [], jnp.zeros((1, 4)))


def test_upper_pearson_reads_only_the_pairs():
  a = np.array([[1.0, 0.2, 0.4], [0.2, 1.0, 0.6], [0.4, 0.6, 1.0]])
  b = a.copy()
  b[np.diag_indices(3)] = 7.0  # the diagonal is ignored
  np.testing.assert_allclose(checkpoints.upper_pearson(a, b), 1.0)
  np.testing.assert_allclose(checkpoints.upper_pearson(a, 1 - a), -1.0)
  with pytest.raises(ValueError, match=r"\(K, K\) matrices of one shape"):
    checkpoints.upper_pearson(a, a[:2, :2])
