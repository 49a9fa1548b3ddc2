"""Similarity of networks: the symmetry-invariant tensor similarity of bilinear (multilinear)
networks, computed layer by layer, and the usual output and representational baselines.

Example::

    from mechjax import similarity
    from mechjax.models import bilinear
    s = similarity.tensor_similarity(
        bilinear.to_layers(net, params_a), bilinear.to_layers(net, params_b)
    )
    mats = similarity.checkpoints.matrices(net, [params_a, params_b, params_c], x)  # (3, 3) each
"""

from mechjax.similarity import checkpoints
from mechjax.similarity.baselines import cka_matrix
from mechjax.similarity.baselines import cosine_matrix
from mechjax.similarity.baselines import output_cosine
from mechjax.similarity.baselines import weight_cosine
from mechjax.similarity.depth_one import fold_single_bilinear
from mechjax.similarity.reference import brute_force_inner
from mechjax.similarity.reference import materialize
from mechjax.similarity.reference import monte_carlo_inner
from mechjax.similarity.reference import multilinear_apply
from mechjax.similarity.representational import linear_cka
from mechjax.similarity.representational import mean_cca
from mechjax.similarity.representational import participation_ratio
from mechjax.similarity.representational import procrustes_distance
from mechjax.similarity.tensor import gaussian_inner
from mechjax.similarity.tensor import log_gram
from mechjax.similarity.tensor import similarity_matrix
from mechjax.similarity.tensor import slice_similarity
from mechjax.similarity.tensor import tensor_inner
from mechjax.similarity.tensor import tensor_similarity

__all__ = [
  "brute_force_inner",
  "checkpoints",
  "cka_matrix",
  "cosine_matrix",
  "fold_single_bilinear",
  "gaussian_inner",
  "linear_cka",
  "log_gram",
  "materialize",
  "mean_cca",
  "monte_carlo_inner",
  "multilinear_apply",
  "output_cosine",
  "participation_ratio",
  "procrustes_distance",
  "similarity_matrix",
  "slice_similarity",
  "tensor_inner",
  "tensor_similarity",
  "weight_cosine",
]
