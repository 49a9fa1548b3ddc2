"""Singular learning theory: SGLD on a localised, tempered posterior, the local learning coefficient
(LLC), susceptibilities, patterning, and exact learning coefficients.

Example::

    from mechjax import slt
    result = slt.estimate_llc(loss_fn, params, (x, y), key=jax.random.key(0))
    print(result.llc_mean, result.llc_std)

``susceptibility`` (χ from stored draws) stays in its module, ``mechjax.slt.susceptibility``, whose
name it shares.
"""

from mechjax.slt import closed_forms
from mechjax.slt import gaussian
from mechjax.slt import mixing
from mechjax.slt import toy_models
from mechjax.slt.chain import sample_chain
from mechjax.slt.inputs import Streamed
from mechjax.slt.langevin import MeanLoss
from mechjax.slt.llc import ChainDivergedError
from mechjax.slt.llc import ChainsNotMixedWarning
from mechjax.slt.llc import LLCResult
from mechjax.slt.llc import estimate_llc
from mechjax.slt.llc import estimate_llc_batch
from mechjax.slt.llc import star_loss_path
from mechjax.slt.moments import Moments
from mechjax.slt.moments import StreamedMoments
from mechjax.slt.patterning import group_response
from mechjax.slt.patterning import group_response_se
from mechjax.slt.patterning import patterning_weights
from mechjax.slt.patterning import project_simplex
from mechjax.slt.patterning import sample_weights
from mechjax.slt.patterning import weighted_problem
from mechjax.slt.placement import per_sample_star_losses
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from mechjax.slt.sgld import sample_chains
from mechjax.slt.sgld import sample_points
from mechjax.slt.susceptibility import SusceptibilityResult
from mechjax.slt.susceptibility import batch_means_error
from mechjax.slt.susceptibility import bif
from mechjax.slt.susceptibility import covariance
from mechjax.slt.susceptibility import estimate_susceptibilities
from mechjax.slt.susceptibility import linear_response
from mechjax.slt.susceptibility import llc_response
from mechjax.slt.susceptibility import principal_directions
from mechjax.slt.susceptibility import standard_error

__all__ = [
  "ChainDivergedError",
  "ChainsNotMixedWarning",
  "LLCResult",
  "MeanLoss",
  "Moments",
  "SGLDSettings",
  "Streamed",
  "StreamedMoments",
  "SusceptibilityResult",
  "batch_means_error",
  "bif",
  "closed_forms",
  "covariance",
  "default_nbeta",
  "estimate_llc",
  "estimate_llc_batch",
  "estimate_susceptibilities",
  "gaussian",
  "group_response",
  "group_response_se",
  "linear_response",
  "mixing",
  "llc_response",
  "patterning_weights",
  "per_sample_star_losses",
  "principal_directions",
  "project_simplex",
  "sample_chain",
  "sample_chains",
  "sample_points",
  "sample_weights",
  "standard_error",
  "star_loss_path",
  "toy_models",
  "weighted_problem",
]
