"""Deep linear networks ``f(x) = x W_1 ⋯ W_L`` and the low-rank linear teachers they learn.

From a small initialisation such a network learns a teacher ``M = V diag(s) Uᵀ`` one singular mode
at a time, strongest first: the loss falls in steps, with plateaus at saddles between them (Saxe,
McClelland & Ganguli 2014, arXiv:1312.6120). At a true parameter of rank ``r`` its learning
coefficient is known in closed form (Aoyagi 2024;
:func:`mechjax.slt.closed_forms.deep_linear_network`).

Params are ``{"W1": (H_0, H_1), …, "WL": (H_{L−1}, H_L)}`` for layer widths ``(H_0, …, H_L)``, input
first.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def init(key: jax.Array, widths: Sequence[int], scale: float) -> dict[str, jax.Array]:
  """Independent ``N(0, scale²)`` weights for layer widths ``widths``, one key split per layer."""
  shapes = list(zip(widths[:-1], widths[1:]))
  keys = jax.random.split(key, len(shapes))
  return {
    f"W{i + 1}": scale * jax.random.normal(k, s) for i, (k, s) in enumerate(zip(keys, shapes))
  }


def forward(params: dict, x: jax.Array) -> jax.Array:
  """``x W_1 ⋯ W_L``, multiplied from the left."""
  out = x
  for i in range(len(params)):
    out = out @ params[f"W{i + 1}"]
  return out


def product(params: dict) -> jax.Array:
  """The end-to-end matrix ``W_1 ⋯ W_L`` (``H_0 × H_L``), as :func:`forward` of the identity."""
  return forward(params, jnp.eye(params["W1"].shape[0]))


def half_mse(params: dict, batch: dict) -> jax.Array:
  """``½·mean_i ‖y_i − f(x_i)‖²`` over ``batch = {"x": (B, H_0), "y": (B, H_L)}``."""
  return 0.5 * jnp.mean(jnp.sum((forward(params, batch["x"]) - batch["y"]) ** 2, axis=-1))


def teacher(key: jax.Array, n_in: int, n_out: int, singular_values) -> np.ndarray:
  """``M = V diag(s) Uᵀ`` (``n_in × n_out``, float32) with ``s`` the singular values in descending
  order and ``V``, ``U`` random orthonormal columns (QR of Gaussians from ``key``'s two splits)."""
  kv, ku = jax.random.split(key)
  r = len(singular_values)
  v = np.linalg.qr(np.asarray(jax.random.normal(kv, (n_in, r))))[0]
  u = np.linalg.qr(np.asarray(jax.random.normal(ku, (n_out, r))))[0]
  s = np.sort(np.asarray(singular_values, np.float64))[::-1]
  return ((v * s) @ u.T).astype(np.float32)


def teacher_data(
  key: jax.Array,
  teacher_key: jax.Array,
  n: int,
  widths: Sequence[int],
  singular_values,
  noise: float = 0.0,
) -> dict[str, jax.Array]:
  """``n`` samples ``{"x": (n, H_0), "y": (n, H_L)}`` of ``y = x·M + noise·ε``, with ``x`` and ``ε``
  standard Gaussian (from the two splits of ``key``) and ``M`` the :func:`teacher` of
  ``teacher_key`` with these ``singular_values``, for layer widths ``widths``.

  Args:
    key: PRNG key of the inputs and the noise.
    teacher_key: PRNG key of the teacher's singular vectors.
    n: samples.
    widths: the network's layer widths ``(H_0, …, H_L)``; only the first and last are read.
    singular_values: the teacher's singular values (their number is its rank).
    noise: standard deviation of the Gaussian label noise.
  """
  kx, ke = jax.random.split(key)
  x = jax.random.normal(kx, (n, widths[0]))
  m = teacher(teacher_key, widths[0], widths[-1], singular_values)
  y = x @ jnp.asarray(m) + noise * jax.random.normal(ke, (n, widths[-1]))
  return {"x": x, "y": y}


def learned_modes(product: jax.Array, singular_values) -> jax.Array:
  """How many teacher modes the product ``W_1⋯W_L`` has learned: its ``i``-th singular value
  (descending) counts once it exceeds half of the teacher's ``i``-th."""
  s = jnp.sort(jnp.asarray(singular_values, jnp.float32))[::-1]
  sv = jnp.linalg.svd(product, compute_uv=False)[: s.shape[0]]
  return jnp.sum(sv > 0.5 * s)
