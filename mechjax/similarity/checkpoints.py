"""Tensor similarity and its baselines between many networks of one architecture: the checkpoints
of a training run, or its seeds.

Cohen et al. (2026, arXiv:2605.15183) follow a run through its checkpoints by tensor similarity
next to three baselines, each a ``(K, K)`` matrix over the ``K`` networks:

* ``tensor``: tensor similarity (:func:`mechjax.similarity.tensor.similarity_matrix`), invariant to
  the network's symmetries;
* ``logit_cosine``: the cosine between two networks' outputs on the same inputs, flattened
  (behaviour);
* ``weight_cosine``: the cosine between their flattened parameters (naive, basis-dependent);
* ``cka``: linear CKA (:func:`mechjax.similarity.baselines.cka_matrix`) of the hidden products
  ``(Lx) ⊙ (Rx)`` of the first (bilinear) layer on those inputs.

:func:`upper_pearson` then says how closely two measures agree over all pairs.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import bilinear as bl
from mechjax.similarity import baselines
from mechjax.similarity import tensor as ts

MEASURES = ("tensor", "logit_cosine", "weight_cosine", "cka")
LABELS = {  # each measure's name in a figure
  "tensor": "tensor similarity",
  "logit_cosine": "logit cosine",
  "weight_cosine": "weight cosine",
  "cka": "CKA of hidden products",
}


def stack(params: Sequence[dict]) -> dict:
  """The networks' params stacked along a new leading axis (the layout :func:`jax.vmap` reads)."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *params)


def of_seed(params_by_step: dict[int, dict], seed: int, steps: Sequence[int]) -> list[dict]:
  """Seed ``seed``'s params at each of ``steps``, from checkpoints ``{step: params}`` with a leading
  seed axis (what :meth:`mechjax.train.loop.TrainResult.params_at` returns)."""
  return [jax.tree.map(lambda a: a[seed], params_by_step[t]) for t in steps]


def hidden_products(model: nn.Sequential, params: dict, x: jax.Array) -> jax.Array:
  """``(L x̃) ⊙ (R x̃)`` of ``model``'s first layer, a :class:`~mechjax.models.bilinear.Bilinear`,
  on inputs ``x``, ``(N, hidden)``."""
  first = model.layers[0] if isinstance(model, nn.Sequential) else None
  if not isinstance(first, bl.Bilinear):
    raise ValueError(
      f"model must be an nn.Sequential whose first layer is a bilinear.Bilinear; got {model!r}"
    )
  variables = {"params": params["params"]["layers_0"]}
  return first.apply(variables, x, method=bl.Bilinear.hidden_activations)


def flat_weights(params: dict) -> jax.Array:
  """All the leaves of ``params`` flattened into one vector (in the pytree's order)."""
  return jnp.concatenate([jnp.ravel(v) for v in jax.tree.leaves(params)])


def matrices(
  model: nn.Sequential, params: Sequence[dict], x: jax.Array, *, slice_index: int | None = None
) -> dict[str, np.ndarray]:
  """Each of :data:`MEASURES` between every pair of the networks ``params`` of ``model``, ``(K,
  K)``, the outputs and hidden products taken on the inputs ``x``.

  Args:
    model: an ``nn.Sequential`` of :mod:`mechjax.models.bilinear` layers whose first layer is a
      ``Bilinear`` (its params under ``layers_0``), convertible by
      :func:`~mechjax.models.bilinear.to_layers`.
    params: ``K ≥ 1`` params of ``model`` (one network each, no seed axis).
    x: inputs ``(N, in)`` for the logit cosine and the CKA.
    slice_index: also return ``"tensor_slice"``: the tensor similarity of output ``k``'s slice only
      (:func:`~mechjax.similarity.tensor.similarity_matrix` with ``slice_index``).

  Returns:
    ``{measure: (K, K) array}``, symmetric with ones on the diagonal.
  """
  if not params:
    raise ValueError("matrices needs at least one network's params")
  stacked = stack(params)
  logits = jax.jit(jax.vmap(lambda p: model.apply(p, x)))(stacked)
  hidden = jax.jit(jax.vmap(lambda p: hidden_products(model, p, x)))(stacked)
  nets = [bl.to_layers(model, p) for p in params]
  out = {
    "tensor": ts.similarity_matrix(nets),
    "logit_cosine": baselines.cosine_matrix(logits),
    "weight_cosine": baselines.cosine_matrix(jnp.stack([flat_weights(p) for p in params])),
    "cka": baselines.cka_matrix(hidden),
  }
  if slice_index is not None:
    out["tensor_slice"] = ts.similarity_matrix(nets, slice_index=slice_index)
  return out


def logit_cosine(model: nn.Module, params: Sequence[dict], x: jax.Array) -> np.ndarray:
  """The cosine between every pair of the networks' outputs on the inputs ``x``, flattened, ``(K,
  K)``: the ``logit_cosine`` of :func:`matrices` alone, for inputs other than those of the rest."""
  return baselines.cosine_matrix(jax.vmap(lambda p: model.apply(p, x))(stack(params)))


def upper_pearson(a: np.ndarray, b: np.ndarray) -> float:
  """Pearson r between the entries above the diagonal of two ``(K, K)`` similarity matrices: how
  alike two measures find the ``K(K−1)/2`` pairs (representational similarity analysis, Kriegeskorte
  et al. 2008, over networks instead of stimuli)."""
  if a.shape != b.shape or a.ndim != 2 or a.shape[0] != a.shape[1]:
    raise ValueError(f"need two (K, K) matrices of one shape; got {a.shape} and {b.shape}")
  i, j = np.triu_indices(a.shape[0], k=1)
  return np.corrcoef(a[i, j], b[i, j])[0, 1]
