import jax
import pytest


@pytest.fixture(autouse=True, params=["float32", "float64"])
def precision(request):
  """Every alignment test runs twice: as JAX defaults (float32) and with ``jax_enable_x64`` on,
  where JAX arrays reach NumPy as float64 read-only views."""
  with jax.enable_x64(request.param == "float64"):
    yield request.param
