import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.models.mlp import SingleNeuron
from mechjax.models.mlp import TwoLayer

KEY = jax.random.PRNGKey(0)


def test_two_layer_flattens_spatial_axes_and_returns_one_logit():
  model = TwoLayer(width=8, activation="tanh")
  x = jax.random.normal(KEY, (5, 4, 6))
  params = model.init(KEY, x)
  assert params["params"]["hidden"]["kernel"].shape == (24, 8)
  out = model.apply(params, x)
  assert out.shape == (5,)
  np.testing.assert_allclose(out, model.apply(params, x.reshape(5, 24)), atol=1e-6)


def test_spherical_neuron_ignores_the_weight_norm():
  model = SingleNeuron(activation="linear", spherical=True)
  x = jax.random.normal(KEY, (7, 16))
  params = model.init(KEY, x)
  scaled = jax.tree.map(lambda w: 3.0 * w, params)
  np.testing.assert_allclose(model.apply(params, x), model.apply(scaled, x), rtol=1e-5)
  w = params["params"]["w"]
  g = jax.grad(lambda p: jnp.sum(model.apply(p, x) ** 3))(params)["params"]["w"]
  assert abs(float(g @ w)) < 1e-3 * float(
    jnp.linalg.norm(g) * jnp.linalg.norm(w)
  )  # tangent to the sphere
  plain = SingleNeuron(activation="linear")
  assert not np.allclose(plain.apply(params, x), plain.apply(scaled, x))


def test_bad_activation_and_unbatched_input_are_refused():
  with pytest.raises(ValueError, match="activation must be one of"):
    TwoLayer(activation="swish2").init(KEY, jnp.zeros((1, 4)))
  with pytest.raises(ValueError, match=r"expected a batch of inputs of shape \(B, \*spatial\)"):
    TwoLayer().init(KEY, jnp.zeros((4,)))
