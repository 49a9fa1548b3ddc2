"""What tests/conftest.py sets up: the tests compile for speed of compiling, and a compute_bound
test (and every process it starts) with XLA's optimizations."""

import os

import jax
import pytest


def test_a_test_compiles_as_the_environment_its_subprocesses_inherit_says():
  # Set by tests/conftest.py ("1") unless the user set it, or left at JAX's default with
  # MECHJAX_TEST_COMPILE=defaults; JAX read it at import.
  setting = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
  assert jax.config.read("jax_disable_most_optimizations") is (setting == "1")
  if os.environ.get("MECHJAX_TEST_COMPILE", "fast") == "fast":
    assert setting == "1" or "JAX_DISABLE_MOST_OPTIMIZATIONS" in os.environ
    assert "xla_cpu_use_fusion_emitters" in os.environ["XLA_FLAGS"]
  else:
    assert "xla_cpu_use_fusion_emitters=false" not in os.environ.get("XLA_FLAGS", "")


@pytest.mark.compute_bound
@pytest.mark.slow
def test_a_compute_bound_test_and_its_subprocesses_compile_with_the_optimizations():
  assert jax.config.read("jax_disable_most_optimizations") is False
  assert os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] == "0"
