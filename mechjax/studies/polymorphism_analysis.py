"""The analysis of the polymorphism study: rotations, SAEs, Haar tests and steering between trained
seeds.

For one optimizer's seeds, at every residual site and every ordered seed pair, :func:`analyze` fits
``s·x_i R ≈ x_j`` on a fit batch and measures everything on a held-out batch; :func:`summarize_site`
reduces a site's numbers to the means that the study's table reports. See
:mod:`mechjax.studies.polymorphism` for the question and :mod:`mechjax.studies.polymorphism_report`
for the table and figures. ``cfg`` is always that study's ``Config`` (not imported here: the study
imports this module).
"""

from __future__ import annotations

import itertools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import rng
from mechjax.align import haar
from mechjax.align import procrustes
from mechjax.align import transfer
from mechjax.models import sae as sae_lib
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import site_names
from mechjax.similarity import representational as rep
from mechjax.train import loop

HAAR_STATS = (
  "frobenius_to_identity",
  "trace",
  "eigenangle_ks",
  "signed_permutation_distance",
  "max_abs_entry_per_row",
  "entry_kurtosis",
)
BASIS_STATS = ("signed_permutation_distance", "max_abs_entry_per_row", "entry_kurtosis")


def analysis_sites(num_layers: int) -> list[str]:
  """The distinct residual sites: ``resid_pre_{l+1}`` is ``resid_post_{l}`` and is not repeated."""
  return [
    s for s in site_names(num_layers) if not (s.startswith("resid_pre_") and s != "resid_pre_0")
  ]


def collect_sites(cfg, model, params_S, *token_batches: jax.Array) -> list[dict[str, jax.Array]]:
  """For each ``tokens_NxT``, ``{site: (S, N·T, d)}``: every seed's residual activations on the same
  tokens, positions flattened (one compiled program for all batches of one shape)."""
  run = jax.jit(
    jax.vmap(lambda p, tokens: model.apply(p, tokens, return_sites=True)[1], in_axes=(0, None))
  )
  out = []
  for tokens in token_batches:
    sites = run(params_S, tokens)
    out.append(
      {
        s: sites[s].reshape(sites[s].shape[0], -1, cfg.d_model)
        for s in analysis_sites(cfg.num_layers)
      }
    )
  return out


def rms_scale(x_SxNxD: jax.Array) -> jax.Array:
  """Per-seed scale ``sqrt(mean ‖x‖² / d)``: SAEs see ``x / scale`` so one learning rate suits every
  site."""
  return jnp.sqrt(jnp.mean(x_SxNxD**2, axis=(-2, -1)))


def train_saes(cfg, buffers_MxNxD: jax.Array, key: jax.Array):
  """One SAE per buffer (a seed at a site), all trained together with the core's step and scan.

  The buffers are normalised to unit RMS entry first. Returns ``(params_M, final_mse_M)``.
  """
  model = sae_lib.SAE(cfg.sae_latents, top_k=cfg.sae_top_k or None)
  optimizer = optax.adam(cfg.sae_learning_rate)

  def one(buffer_NxD, k):
    def loss(params, kk):
      idx = jax.random.randint(kk, (cfg.sae_batch_size,), 0, buffer_NxD.shape[0])
      return sae_lib.sae_loss(model, params, buffer_NxD[idx])

    problem = loop.Problem(init=lambda kk: model.init(kk, buffer_NxD[:1]), loss=loss)
    state = loop.init_state(problem, optimizer, k)
    state, per_step = loop.scan_steps(
      loop.make_train_step(problem, optimizer), state, cfg.sae_steps
    )
    return state["params"], jnp.mean(per_step["mse"][-max(cfg.sae_steps // 10, 1) :])

  keys = jax.random.split(key, buffers_MxNxD.shape[0])
  return jax.jit(jax.vmap(one))(buffers_MxNxD, keys)


def _pairs(num_seeds: int) -> list[tuple[int, int]]:
  return list(itertools.combinations(range(num_seeds), 2))


def mean_of(xs):
  """The mean of the finite values of ``xs`` (None for none)."""
  xs = [x for x in xs if x is not None and np.isfinite(x)]
  return float(np.mean(xs)) if xs else None


def _pair_numbers(xa_fit, xb_fit, xa_held, xb_held):
  """Everything about a seed pair (a, b) at one site that needs only activations; jitted by the
  caller."""
  fit_ab = procrustes.procrustes_fit(xa_fit, xb_fit, scale=True)
  fit_ba = procrustes.procrustes_fit(xb_fit, xa_fit, scale=True)  # R_ba = R_abᵀ; the scale differs
  half = xa_fit.shape[0] // 2  # rows are sequence-major: the halves hold different sequences
  r_first = procrustes.procrustes_fit(xa_fit[:half], xb_fit[:half]).R
  r_second = procrustes.procrustes_fit(xa_fit[half:], xb_fit[half:]).R
  ev = transfer.explained_variance
  directions = []
  for fit, (x_fit, y_fit, x_held, y_held) in (
    (fit_ab, (xa_fit, xb_fit, xa_held, xb_held)),
    (fit_ba, (xb_fit, xa_fit, xb_held, xa_held)),
  ):
    directions.append(
      {
        "R": fit.R,
        "scale": fit.scale,
        "aligned_ev_fit_batch": ev(y_fit, fit.scale * x_fit @ fit.R),
        "aligned_ev_held_out": ev(y_held, fit.scale * x_held @ fit.R),
        "rotation_only_ev_held_out": ev(y_held, x_held @ fit.R),
        "identity_ev_held_out": ev(y_held, x_held),
      }
    )
  pair = {
    "rank": fit_ab.rank,
    "condition": fit_ab.singular_values[-1] / fit_ab.singular_values[0],
    "split_half": jnp.trace(r_first.T @ r_second) / xa_fit.shape[1],
    "cka": rep.linear_cka(xa_held, xb_held),
    "procrustes_distance": rep.procrustes_distance(xa_held, xb_held),
    "mean_cca": rep.mean_cca(xa_held, xb_held),
  }
  return pair, directions


def _max_cos(dec_a, dec_b, live_a, live_b):
  """Mean over the live rows of ``dec_a`` of the largest ``|cos|`` with any live row of ``dec_b``
  (unit rows).

  Dead latents (never active on the held-out batch) keep their random initial decoder rows, which
  would pull the score towards the random-vector baseline, so they are left out on both sides.
  """
  cos = jnp.where(live_b[None, :], jnp.abs(dec_a @ dec_b.T), -1.0)
  best = jnp.max(cos, axis=1)
  return jnp.sum(jnp.where(live_a, best, 0.0)) / jnp.maximum(jnp.sum(live_a), 1)


def _cos(u, v):
  return jnp.dot(u, v) / (jnp.linalg.norm(u) * jnp.linalg.norm(v))


def analyze(
  cfg, model: Transformer, sample: Callable, params_S, progress: bool = True
) -> tuple[dict, dict[str, np.ndarray]]:
  """Every per-site measurement for one optimizer's trained seeds (see
  :mod:`mechjax.studies.polymorphism`).

  ``model`` is the seeds' transformer and ``sample(key, n)`` draws ``n`` task sequences. Returns
  ``({site: {"seeds": {...}, "pairs": [...], "summary": {...}}}, {"<site>/<a>_<b>": R})``. Every
  random choice has a named stream of ``cfg.run.seed`` (a Haar test's key names its site and seeds),
  so adding a test changes no other. The numerical work is a few jitted functions whose shapes do
  not change between sites, seeds and pairs, so each compiles once.
  """
  seed = cfg.run.seed
  num_seeds, d = cfg.run.num_seeds, cfg.d_model
  sites = analysis_sites(cfg.num_layers)
  pairs = _pairs(num_seeds)
  draw = jax.jit(sample, static_argnums=1)
  fit_batch = draw(rng.key(seed, "fit-batch"), cfg.fit_sequences)
  eval_batch = draw(rng.key(seed, "held-out-batch"), cfg.eval_sequences)
  fit, held = collect_sites(cfg, model, params_S, fit_batch["tokens"], eval_batch["tokens"])
  valid_fit = fit_batch["valid"].reshape(-1)

  # SAEs: one per (site, seed), on the fit activations scaled to unit RMS entry.
  norms = {s: rms_scale(fit[s]) for s in sites}
  buffers = jnp.concatenate([fit[s] / norms[s][:, None, None] for s in sites])
  sae_params, sae_mse = train_saes(cfg, buffers, rng.key(seed, "sae"))
  sae_model = sae_lib.SAE(cfg.sae_latents, top_k=cfg.sae_top_k or None)
  sae_of = lambda si, seed: (
    jax.tree.map(lambda a: a[si * num_seeds + seed], sae_params),
    norms[sites[si]][seed],
  )

  @jax.jit
  def sae_numbers(sae_i, sae_j, x_i, x_j, r, scale, q_random):
    """Within-seed EV and live latents of SAE i on x_i; SAE i on x_j raw and through (s, R); decoder
    max-cosines between the live latents of SAE i and SAE j, raw, through R, and through a Haar
    rotation."""
    recon = lambda sae, x: sae_model.apply(sae[0], x / sae[1])[0] * sae[1]
    live = lambda sae, x: jnp.any(sae_model.apply(sae[0], x / sae[1])[1] > 0, axis=0)
    ev = transfer.explained_variance
    dec_i, dec_j = sae_lib.decoder(sae_i[0]), sae_lib.decoder(sae_j[0])
    live_i, live_j = live(sae_i, x_i), live(sae_j, x_j)
    return {
      "within": ev(x_i, recon(sae_i, x_i)),
      "live_fraction": jnp.mean(live_i),
      "sae_ev_raw": ev(x_j, recon(sae_i, x_j)),
      "sae_ev_aligned": ev(
        x_j, transfer.transfer_reconstruct(lambda z: recon(sae_i, z), x_j, r, scale)
      ),
      "decoder_max_cos_raw": _max_cos(dec_i, dec_j, live_i, live_j),
      "decoder_max_cos_aligned": _max_cos(dec_i @ r, dec_j, live_i, live_j),
      "decoder_max_cos_random_rotation": _max_cos(dec_i @ q_random, dec_j, live_i, live_j),
    }

  # Steering: a vector added at one site of a target model; always the same pytree, so one
  # compilation.
  @jax.jit
  def margin(params, site_index, vec):
    steer = {s: jnp.where(i == site_index, 1.0, 0.0) * vec for i, s in enumerate(sites)}
    out = model.apply(params, eval_batch["tokens"], steer=steer)["valid"]
    return jnp.mean(out[..., 1] - out[..., 0])

  params_list = [jax.tree.map(lambda a: a[s], params_S) for s in range(num_seeds)]
  clean = [float(margin(p, 0, jnp.zeros(d))) for p in params_list]
  effect = lambda j, si, vec: float(margin(params_list[j], si, cfg.steer_scale * vec)) - clean[j]
  pair_fn = jax.jit(_pair_numbers)

  out, rotations = {}, {}
  for si, site in enumerate(sites):
    if progress:
      print(f"  analysing {site}", flush=True)
    x_fit, x_held = fit[site], held[site]
    v = [transfer.diff_of_means(x_fit[s], valid_fit) for s in range(num_seeds)]
    native = [effect(s, si, v[s]) for s in range(num_seeds)]
    random_dirs = jax.random.normal(rng.key(seed, "random-steering", si), (num_seeds, d))
    q_random = haar.haar_orthogonal(rng.key(seed, "random-rotation", si), d)
    own = [
      jax.device_get(
        sae_numbers(sae_of(si, s), sae_of(si, s), x_held[s], x_held[s], jnp.eye(d), 1.0, q_random)
      )
      for s in range(num_seeds)
    ]
    basis = [
      haar.privileged_basis_test(
        x_held[s], rng.key(seed, "privileged-basis-test", si, s), num_null=cfg.num_null
      )
      for s in range(num_seeds)
    ]
    pair_rows = []
    for a, b in pairs:
      numbers, directions = jax.device_get(pair_fn(x_fit[a], x_fit[b], x_held[a], x_held[b]))
      r_ab = directions[0]["R"]
      haar_result = haar.haar_test(
        r_ab, rng.key(seed, "haar-test", si, a, b), num_null=cfg.num_null
      )
      row = {
        "seeds": [a, b],
        "cross_covariance_rank": int(numbers["rank"]),
        "cross_covariance_condition": float(numbers["condition"]),
        "rotation_split_half_agreement": float(numbers["split_half"]),
        "cka": float(numbers["cka"]),
        "procrustes_distance": float(numbers["procrustes_distance"]),
        "mean_cca": float(numbers["mean_cca"]),
        "haar": {
          k: {
            "value": h["value"],
            "null_mean": h["null_mean"],
            "null_sd": h["null_sd"],
            "p_value": h["p_value"],
          }
          for k, h in haar_result.items()
        },
        "directions": [],
      }
      for (i, j), direction in zip(((a, b), (b, a)), directions):
        r, scale = jnp.asarray(direction.pop("R")), float(direction.pop("scale"))
        sae = jax.device_get(
          sae_numbers(sae_of(si, i), sae_of(si, j), x_held[i], x_held[j], r, scale, q_random)
        )
        random_v = random_dirs[i] * jnp.linalg.norm(v[j]) / jnp.linalg.norm(random_dirs[i])
        row["directions"].append(
          {
            "source": i,
            "target": j,
            "scale": scale,
            **{k: float(val) for k, val in direction.items()},
            **{k: float(val) for k, val in sae.items() if k not in ("within", "live_fraction")},
            "steer_effect_native": native[j],
            "steer_effect_aligned": effect(j, si, scale * transfer.rotate_vector(v[i], r)),
            "steer_effect_raw": effect(j, si, v[i]),
            "steer_effect_random": effect(j, si, random_v),
            "steer_cos_aligned": float(_cos(v[i] @ r, v[j])),
            "steer_cos_raw": float(_cos(v[i], v[j])),
          }
        )
      pair_rows.append(row)
      rotations[f"{site}/{a}_{b}"] = np.asarray(r_ab)
    seeds = {
      "sae_ev_within": [float(o["within"]) for o in own],
      "sae_live_fraction": [float(o["live_fraction"]) for o in own],
      "sae_mse": [float(m) for m in sae_mse[si * num_seeds : (si + 1) * num_seeds]],
      "steer_effect_native": native,
      "effective_dimension": [participation_ratio(x_held[s]) for s in range(num_seeds)],
      "privileged_basis_test": basis,
    }
    out[site] = {"seeds": seeds, "pairs": pair_rows, "summary": summarize_site(seeds, pair_rows, d)}
  return out, rotations


def participation_ratio(x_NxD) -> float:
  """Effective dimension ``(Σλ)² / Σλ²`` of the covariance eigenvalues ``λ`` of ``x`` (1 to d)."""
  xc = np.asarray(x_NxD, np.float64)
  xc = xc - xc.mean(axis=0)
  lam = np.linalg.eigvalsh(xc.T @ xc)
  return float(lam.sum() ** 2 / np.sum(lam**2))


def summarize_site(seeds: dict, pairs: list[dict], d: int, level: float = 0.05) -> dict:
  """Means over seeds, pairs and both transfer directions of every measurement at one site.

  * ``privileged_basis_seeds``: the fraction of seeds whose activations reject "the coordinate axes
    are not special" (:func:`mechjax.align.haar.privileged_basis_test`) at ``level``.
  * ``haar_basis_rejections``: the fraction of seed pairs whose fitted ``R`` rejects Haar at
    ``level`` on the basis-alignment statistics (Bonferroni over the three). Read it with
    ``min_cross_covariance_rank`` (``haar_applicable`` is True only at full rank) and
    ``rotation_split_half_agreement``: where ``XᵀY`` is numerically rank-deficient, part of ``R`` is
    fixed by directions that carry almost no activation variance, or by nothing at all, and the Haar
    statistics of ``R`` partly describe that.
  * ``steer_ratio_*``: effect of a transferred vector / effect of the target's own vector, in the
    target model.
  """
  dirs = [x for p in pairs for x in p["directions"]]
  mean_over = lambda rows, key: mean_of([r[key] for r in rows])
  ratio = lambda key: mean_of(
    [x[key] / x["steer_effect_native"] for x in dirs if abs(x["steer_effect_native"]) > 1e-6]
  )
  out = {
    "sae_ev_within": mean_of(seeds["sae_ev_within"]),
    "sae_live_fraction": mean_of(seeds["sae_live_fraction"]),
    "effective_dimension": mean_of(seeds["effective_dimension"]),
  }
  for key in (
    "aligned_ev_fit_batch",
    "aligned_ev_held_out",
    "rotation_only_ev_held_out",
    "identity_ev_held_out",
    "sae_ev_raw",
    "sae_ev_aligned",
    "decoder_max_cos_raw",
    "decoder_max_cos_aligned",
    "decoder_max_cos_random_rotation",
    "steer_cos_raw",
    "steer_cos_aligned",
  ):
    out[key] = mean_over(dirs, key)
  scales = [x["scale"] for x in dirs]
  out["scale_range"] = [float(min(scales)), float(max(scales))]
  for key in ("rotation_split_half_agreement", "cka", "procrustes_distance", "mean_cca"):
    out[key] = mean_over(pairs, key)
  out["steer_effect_native"] = mean_over(dirs, "steer_effect_native")
  for kind in ("aligned", "raw", "random"):
    out[f"steer_ratio_{kind}"] = ratio(f"steer_effect_{kind}")
  basis = seeds["privileged_basis_test"]
  out["privileged_basis_seeds"] = float(np.mean([b["p_value"] <= level for b in basis]))
  out["basis_kurtosis"] = mean_of([b["value"] for b in basis])
  out["basis_kurtosis_null"] = mean_of([b["null_mean"] for b in basis])
  out["basis_p_median"] = float(np.median([b["p_value"] for b in basis]))
  out["min_cross_covariance_rank"] = int(min(p["cross_covariance_rank"] for p in pairs))
  out["haar_applicable"] = out["min_cross_covariance_rank"] == d
  out["haar"] = {}
  for stat in HAAR_STATS:
    ps = np.array([p["haar"][stat]["p_value"] for p in pairs])
    out["haar"][stat] = {
      "value_mean": mean_over([p["haar"][stat] for p in pairs], "value"),
      "null_mean": mean_over([p["haar"][stat] for p in pairs], "null_mean"),
      "p_median": float(np.median(ps)),
      "fraction_rejected": float(np.mean(ps <= level)),
    }
  basis_p = np.array(
    [min(1.0, len(BASIS_STATS) * min(p["haar"][s]["p_value"] for s in BASIS_STATS)) for p in pairs]
  )
  out["haar_basis_rejections"] = float(np.mean(basis_p <= level))
  return out
