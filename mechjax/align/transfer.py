"""Moving dictionaries and steering vectors between models through a fitted rotation.

Conventions: ``R`` maps source activations to target activations, ``x_src @ R ≈ x_tgt`` (as returned
by :func:`mechjax.align.procrustes.orthogonal_procrustes`), so ``x_tgt @ Rᵀ`` expresses target
activations in the source frame.

:func:`measure_alignment` fits such a map between two models' activations and measures it, and
:func:`steering_transfer` gives the vectors and cosines of a steering-transfer test through it (the
recipe of McCann 2026, "Polymorphism Is Rotation", which both polymorphism studies follow).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from mechjax.align import procrustes
from mechjax.models import sae as sae_lib
from mechjax.similarity import representational as rep
from mechjax.similarity.baselines import output_cosine


def explained_variance(x: jax.Array, x_hat: jax.Array) -> jax.Array:
  """Per-column explained variance ``1 − Σ‖x − x̂‖² / Σ‖x − colmean(x)‖²`` over ``(..., n, d)``.

  This is the standard definition: each feature is measured against its own mean. Some published
  work divides by the variance of all entries around one global mean instead, which is larger
  whenever the columns have different means, so it reports a higher EV for the same reconstruction.
  Negative values mean the reconstruction is worse than predicting each column's mean.
  """
  if x.shape != x_hat.shape or x.ndim < 2:
    raise ValueError(
      f"x and x_hat must have the same shape (..., n, d); got {x.shape} and {x_hat.shape}"
    )
  resid = jnp.sum((x - x_hat) ** 2, axis=(-2, -1))
  total = jnp.sum((x - jnp.mean(x, axis=-2, keepdims=True)) ** 2, axis=(-2, -1))
  return 1.0 - resid / total


def transfer_reconstruct(
  reconstruct_src: Callable[[jax.Array], jax.Array], x_tgt: jax.Array, r: jax.Array, scale=1.0
) -> jax.Array:
  """Reconstructs target activations with a source-model dictionary: map into the source frame
  (``x_tgt @ Rᵀ / s``), encode and decode there, and map back (``s · … @ R``).

  ``scale`` is ``s`` of a similarity fit ``s · x_src @ R ≈ x_tgt`` (1 for a pure rotation).

  Args:
    reconstruct_src: the source-frame reconstruction, mapping ``(..., d)`` activations to their
      encoded-and-decoded approximation of the same shape (e.g. an SAE's ``x̂``).
    x_tgt: target-model activations, shape ``(..., d)``.
    r: the ``(d, d)`` rotation with ``x_src @ r ≈ x_tgt`` (a single matrix, not a batch).
    scale: the similarity scale ``s`` (a scalar); 1.0 for a pure rotation.

  Returns:
    The reconstruction of ``x_tgt``, in the target frame and of the same shape.
  """
  return scale * reconstruct_src(x_tgt @ r.T / scale) @ r


def rotate_vector(v_src: jax.Array, r: jax.Array) -> jax.Array:
  """A source-frame direction (a steering vector, a decoder column) expressed in the target frame:
  ``v @ R``."""
  return v_src @ r


def diff_of_means(acts: jax.Array, labels: jax.Array) -> jax.Array:
  """The steering vector ``mean(acts | label = 1) − mean(acts | label = 0)`` for ``acts_NxD`` and
  binary labels."""
  w = labels.astype(acts.dtype)[:, None]
  return jnp.sum(acts * w, axis=0) / jnp.sum(w) - jnp.sum(acts * (1 - w), axis=0) / jnp.sum(1 - w)


def measure_alignment(
  x_fit: jax.Array,
  y_fit: jax.Array,
  x_held: jax.Array,
  y_held: jax.Array,
  *,
  center: bool = False,
  scale: bool = False,
) -> tuple[procrustes.ProcrustesFit, dict[str, jax.Array]]:
  """Fits ``y ≈ s · (x − μ_x) R + μ_y`` on the fit rows (orthogonal Procrustes,
  :func:`~mechjax.align.procrustes.procrustes_fit`) and measures the map.

  Args:
    x_fit: source activations ``(n, d)`` the map is fitted on.
    y_fit: the target's activations on the same inputs.
    x_held: source activations ``(m, d)`` on held-out inputs.
    y_held: the target's activations on those.
    center: fit between centred activations; ``μ`` are the fit rows' column means (else 0).
    scale: fit the isotropic scale ``s`` too (else ``s = 1``).

  Returns:
    ``(fit, numbers)``, ``numbers`` holding

    * ``cross_covariance_rank`` and ``cross_covariance_condition`` (``σ_min / σ_max``) of the
      cross-covariance ``XᵀY``: where it is rank-deficient, ``R`` is arbitrary on its null space;
    * ``rotation_split_half_agreement``:
      :func:`~mechjax.align.procrustes.split_half_agreement` (``center`` as given);
    * ``aligned_ev_fit_batch`` and ``aligned_ev_held_out``: the :func:`explained_variance` of ``y``
      by the map on the fit rows and on the held-out rows (a gap says the map is overfitted);
    * ``identity_ev_held_out``: of ``y_held`` by ``x_held`` as it is (the bases need no map if
      high);
    * with ``scale``, ``rotation_only_ev_held_out``: the map without its scale.
  """
  fit = procrustes.procrustes_fit(x_fit, y_fit, center=center, scale=scale)

  def mapped(x, s):
    if not center:
      return s * x @ fit.R
    mu_x, mu_y = jnp.mean(x_fit, axis=0, keepdims=True), jnp.mean(y_fit, axis=0, keepdims=True)
    return s * (x - mu_x) @ fit.R + mu_y

  numbers = {
    "cross_covariance_rank": fit.rank,
    "cross_covariance_condition": fit.singular_values[-1] / fit.singular_values[0],
    "rotation_split_half_agreement": procrustes.split_half_agreement(x_fit, y_fit, center=center),
    "aligned_ev_fit_batch": explained_variance(y_fit, mapped(x_fit, fit.scale)),
    "aligned_ev_held_out": explained_variance(y_held, mapped(x_held, fit.scale)),
    "identity_ev_held_out": explained_variance(y_held, x_held),
  }
  if scale:
    numbers["rotation_only_ev_held_out"] = explained_variance(y_held, mapped(x_held, 1.0))
  return fit, numbers


def measure_pair(
  xa_fit: jax.Array, xb_fit: jax.Array, xa_held: jax.Array, xb_held: jax.Array, **fit_kwargs
) -> tuple[list[tuple[procrustes.ProcrustesFit, dict]], dict[str, jax.Array]]:
  """Both directions of :func:`measure_alignment` between two models ``a`` and ``b`` (``fit_kwargs``
  go to each), and how alike their held-out activations are whatever the map.

  Args:
    xa_fit: model ``a``'s activations ``(n, d)`` the maps are fitted on.
    xb_fit: model ``b``'s activations on the same inputs.
    xa_held: ``a``'s activations ``(m, d)`` on held-out inputs.
    xb_held: ``b``'s activations on those.

  Returns:
    ``(fits, similarity)``: ``fits`` holds the ``(fit, numbers)`` of ``a → b``, then of ``b → a``;
    ``similarity`` holds ``cka`` (:func:`~mechjax.similarity.representational.linear_cka`),
    ``procrustes_distance`` and ``mean_cca`` of ``xa_held`` and ``xb_held``.
  """
  fits = [
    measure_alignment(xa_fit, xb_fit, xa_held, xb_held, **fit_kwargs),
    measure_alignment(xb_fit, xa_fit, xb_held, xa_held, **fit_kwargs),
  ]
  similarity = {
    "cka": rep.linear_cka(xa_held, xb_held),
    "procrustes_distance": rep.procrustes_distance(xa_held, xb_held),
    "mean_cca": rep.mean_cca(xa_held, xb_held),
  }
  return fits, similarity


def steering_transfer(
  v_src: jax.Array, v_tgt: jax.Array, r: jax.Array, random_direction: jax.Array, scale=1.0
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
  """A steering-transfer test of the map ``s · x_src R ≈ x_tgt``: the vectors to add to the target
  model, each in its frame, and how the source's vector points.

  Args:
    v_src: the source model's steering vector (:func:`diff_of_means`), ``(d,)``.
    v_tgt: the target model's own vector for the same concept.
    r: the fitted ``(d, d)`` rotation.
    random_direction: any ``(d,)`` vector; the baseline is it rescaled to the norm of ``v_tgt``.
    scale: the fitted ``s``.

  Returns:
    ``(vectors, cosines)``: ``vectors`` are ``"native"`` (``v_tgt``), ``"aligned"``
    (``s · v_src R``), ``"raw"`` (``v_src`` as it is) and ``"random"``; ``cosines`` are
    ``steer_cos_aligned`` (of ``v_src R`` with ``v_tgt``) and ``steer_cos_raw`` (of ``v_src``).
  """
  vectors = {
    "native": v_tgt,
    "aligned": scale * rotate_vector(v_src, r),
    "raw": v_src,
    "random": random_direction * jnp.linalg.norm(v_tgt) / jnp.linalg.norm(random_direction),
  }
  cosines = {
    "steer_cos_aligned": output_cosine(rotate_vector(v_src, r), v_tgt),
    "steer_cos_raw": output_cosine(v_src, v_tgt),
  }
  return vectors, cosines


def sae_transfer(
  model: sae_lib.SAE, src: tuple, tgt: tuple, x_src, x_tgt, r, q_random, scale=1.0
) -> dict[str, jax.Array]:
  """How a source model's SAE dictionary serves a target model, raw and through the map
  ``s · x_src R ≈ x_tgt``.

  Args:
    model: the :class:`~mechjax.models.sae.SAE` module of both dictionaries.
    src: ``(params, norm)`` of the source's SAE, trained on activations divided by ``norm``.
    tgt: the same for the target's SAE.
    x_src: source activations ``(n, d)``.
    x_tgt: the target's activations on the same inputs.
    r: the fitted ``(d, d)`` rotation.
    q_random: a ``(d, d)`` rotation, the random baseline of the decoder score (e.g. Haar).
    scale: the fitted ``s``.

  Returns:
    ``within`` (the source SAE's :func:`explained_variance` of ``x_src``, the ceiling),
    ``live_fraction`` (of its latents active on ``x_src``), ``sae_ev_raw`` and ``sae_ev_aligned``
    (its explained variance of ``x_tgt`` as it is and through the map,
    :func:`transfer_reconstruct`) and ``decoder_max_cos_raw``, ``_aligned`` (source rows through
    ``R``) and ``_random_rotation`` (through ``q_random``):
    :func:`~mechjax.models.sae.max_cosine` between the two dictionaries' live latents.
  """
  codes = lambda sae, x: model.apply(sae[0], x / sae[1])
  recon = lambda sae, x: codes(sae, x)[0] * sae[1]
  live_src = jnp.any(codes(src, x_src)[1] > 0, axis=0)
  live_tgt = jnp.any(codes(tgt, x_tgt)[1] > 0, axis=0)
  dec_src, dec_tgt = sae_lib.decoder(src[0]), sae_lib.decoder(tgt[0])
  score = lambda dec: sae_lib.max_cosine(dec, dec_tgt, live_src, live_tgt)
  return {
    "within": explained_variance(x_src, recon(src, x_src)),
    "live_fraction": jnp.mean(live_src),
    "sae_ev_raw": explained_variance(x_tgt, recon(src, x_tgt)),
    "sae_ev_aligned": explained_variance(
      x_tgt, transfer_reconstruct(lambda z: recon(src, z), x_tgt, r, scale)
    ),
    "decoder_max_cos_raw": score(dec_src),
    "decoder_max_cos_aligned": score(dec_src @ r),
    "decoder_max_cos_random_rotation": score(dec_src @ q_random),
  }
