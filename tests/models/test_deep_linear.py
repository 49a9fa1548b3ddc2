"""Deep linear networks: the forward product, the loss, the teacher's spectrum and the mode
counter."""

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import deep_linear


def test_forward_is_the_product_of_the_layers_and_half_mse_its_squared_error():
  params = deep_linear.init(jax.random.PRNGKey(0), (3, 4, 2), scale=1.0)
  assert [params[k].shape for k in ("W1", "W2")] == [(3, 4), (4, 2)]
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
  product = np.asarray(params["W1"]) @ np.asarray(params["W2"])
  np.testing.assert_allclose(deep_linear.forward(params, x), np.asarray(x) @ product, rtol=1e-5)
  y = jnp.zeros((5, 2))
  expected = 0.5 * np.mean(np.sum((np.asarray(x) @ product) ** 2, axis=-1))
  np.testing.assert_allclose(deep_linear.half_mse(params, {"x": x, "y": y}), expected, rtol=1e-5)


def test_teacher_has_the_requested_singular_values():
  m = deep_linear.teacher(jax.random.PRNGKey(0), 4, 5, (1.0, 3.0))
  assert m.shape == (4, 5) and m.dtype == np.float32
  np.testing.assert_allclose(np.linalg.svd(m, compute_uv=False)[:3], [3.0, 1.0, 0.0], atol=1e-5)


def test_learned_modes_counts_singular_values_above_half_the_teacher():
  product = jnp.diag(jnp.array([2.9, 1.1, 0.4]))
  assert int(deep_linear.learned_modes(product, (3.0, 2.0, 1.0))) == 2  # 1.1 > 1.0 but 0.4 < 0.5
  assert int(deep_linear.learned_modes(product, (3.0, 2.0, 0.7))) == 3
