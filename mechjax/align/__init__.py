"""Rotation alignment: orthogonal Procrustes between two models' activations, transfer of SAE
dictionaries and steering vectors through the fitted rotation, and tests of whether a rotation looks
Haar-random or privileged.

Example::

    from mechjax import align
    fit = align.procrustes_fit(acts_a, acts_b)  # acts: (samples, d); fit.R is (d, d)
    tests = align.haar_test(fit.R, jax.random.key(0))
"""

from mechjax.align.haar import HaarReference
from mechjax.align.haar import eigenangle_density
from mechjax.align.haar import eigenangles
from mechjax.align.haar import haar_orthogonal
from mechjax.align.haar import haar_reference
from mechjax.align.haar import haar_test
from mechjax.align.haar import nearest_signed_permutation
from mechjax.align.haar import privileged_basis_test
from mechjax.align.haar import signed_permutation_distance
from mechjax.align.procrustes import ProcrustesFit
from mechjax.align.procrustes import generalized_procrustes
from mechjax.align.procrustes import orthogonal_procrustes
from mechjax.align.procrustes import procrustes_fit
from mechjax.align.procrustes import split_half_agreement
from mechjax.align.transfer import diff_of_means
from mechjax.align.transfer import explained_variance
from mechjax.align.transfer import measure_alignment
from mechjax.align.transfer import rotate_vector
from mechjax.align.transfer import sae_transfer
from mechjax.align.transfer import steering_transfer
from mechjax.align.transfer import transfer_reconstruct
from mechjax.models.sites import residual_sites
from mechjax.models.sites import steer_at

__all__ = [
  "ProcrustesFit",
  "diff_of_means",
  "eigenangle_density",
  "eigenangles",
  "explained_variance",
  "generalized_procrustes",
  "HaarReference",
  "haar_orthogonal",
  "haar_reference",
  "haar_test",
  "measure_alignment",
  "nearest_signed_permutation",
  "orthogonal_procrustes",
  "privileged_basis_test",
  "procrustes_fit",
  "residual_sites",
  "rotate_vector",
  "sae_transfer",
  "signed_permutation_distance",
  "split_half_agreement",
  "steer_at",
  "steering_transfer",
  "transfer_reconstruct",
]
