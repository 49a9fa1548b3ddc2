"""The analysis of the polymorphism study (:mod:`mechjax.studies.rotation.polymorphism`): for one
optimizer's
seeds, every site's rotations, SAEs, Haar tests and steering (:func:`analyze`), and the means of the
study's table (:func:`summarize_site`). ``cfg`` is that study's ``Config``.
"""

from __future__ import annotations

import functools
import itertools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import rng
from mechjax.align import haar
from mechjax.align import transfer
from mechjax.models import sae as sae_lib
from mechjax.models import sites as sites_lib
from mechjax.models.transformer import Transformer
from mechjax.models.transformer import seed_activations
from mechjax.models.transformer import site_names
from mechjax.similarity import representational as rep
from mechjax.train import metrics
from mechjax.train import sae as train_sae
from mechjax.train.metrics import finite_mean

HAAR_STATS = tuple(haar.TAILS)  # every statistic of mechjax.align.haar.haar_test
BASIS_STATS = ("signed_permutation_distance", "max_abs_entry_per_row", "entry_kurtosis")
# Numbers of the a -> b fit that describe the pair (how well the data determine R).
PAIR_KEYS = ("cross_covariance_rank", "cross_covariance_condition", "rotation_split_half_agreement")


def analysis_sites(model: Transformer) -> list[str]:
  """The distinct residual sites of ``model`` (:func:`mechjax.models.sites.residual_sites`)."""
  return sites_lib.residual_sites(site_names(model))


@jax.jit
def _pair_numbers(xa_fit, xb_fit, xa_held, xb_held):
  """Everything about a seed pair (a, b) at one site that needs only activations: both directions'
  fits and the pair's similarity (:func:`mechjax.align.transfer.measure_pair`)."""
  fits, pair = transfer.measure_pair(xa_fit, xb_fit, xa_held, xb_held, scale=True)
  directions = [{"R": fit.R, "scale": fit.scale, **numbers} for fit, numbers in fits]
  pair.update({k: directions[0][k] for k in PAIR_KEYS})
  return pair, [{k: v for k, v in x.items() if k not in PAIR_KEYS} for x in directions]


def _seed_numbers(cfg, si: int, x_held, own: dict, sae_mse, native: list) -> dict:
  """Site ``si``'s numbers per seed: its SAE on its own activations, the native steering effect,
  the effective dimension and the privileged-basis test of its held-out activations."""
  num_seeds = cfg.run.num_seeds
  return {
    "sae_ev_within": [own[s]["within"] for s in range(num_seeds)],
    "sae_live_fraction": [own[s]["live_fraction"] for s in range(num_seeds)],
    "sae_mse": sae_mse,
    "steer_effect_native": native,
    "effective_dimension": [rep.participation_ratio(x_held[s]) for s in range(num_seeds)],
    "privileged_basis_test": [
      haar.privileged_basis_test(
        x_held[s], rng.key(cfg.run.seed, "privileged-basis-test", si, s), num_null=cfg.num_null
      )
      for s in range(num_seeds)
    ],
  }


def analyze(
  cfg, model: Transformer, sample: Callable, params_S, progress: bool = True
) -> dict[str, dict]:
  """Every per-site measurement for one optimizer's trained seeds. ``model`` is the seeds'
  transformer and ``sample(key, n)`` draws ``n`` task sequences. Returns ``{"sites": {site:
  {"seeds": {...}, "pairs": [...], "summary": {...}}}, "rotations": {"<site>/<a>_<b>": R}}``.
  Every random choice has a named stream of ``cfg.run.seed`` (a Haar test's key names its site and
  seeds), so adding a test changes no other. The numerical work is a few jitted functions whose
  shapes do not change between sites, seeds and pairs, so each compiles once.
  """
  seed = cfg.run.seed
  num_seeds, d = cfg.run.num_seeds, cfg.d_model
  sites = analysis_sites(model)
  draw = jax.jit(sample, static_argnums=1)
  fit_batch = draw(rng.key(seed, "fit-batch"), cfg.fit_sequences)
  eval_batch = draw(rng.key(seed, "held-out-batch"), cfg.eval_sequences)
  batches = {"fit": fit_batch["tokens"], "held": eval_batch["tokens"]}
  acts = seed_activations(model, params_S, batches, sites)  # every seed's, on the same tokens
  fit, held = acts["fit"], acts["held"]  # {site: (S, N·T, d)}, positions flattened
  valid_fit = fit_batch["valid"].reshape(-1)

  # SAEs: one per (site, seed), on the fit activations scaled to unit RMS entry, so that one
  # learning rate suits every site.
  sae_model = sae_lib.SAE(cfg.sae_latents, top_k=cfg.sae_top_k or None)
  saes, sae_mse = train_sae.train_unit_rms_saes(
    sae_model,
    jnp.concatenate([fit[s] for s in sites]),
    rng.key(seed, "sae"),
    steps=cfg.sae_steps,
    batch_size=cfg.sae_batch_size,
    lr=cfg.sae_learning_rate,
  )
  sae_of = lambda si, seed: saes[si * num_seeds + seed]

  sae_numbers = jax.jit(functools.partial(transfer.sae_transfer, sae_model))

  @jax.jit  # the validity margin with a vector added at one site: one program for every site
  def margin(params, site_index, vec):
    out = model.apply(
      params, eval_batch["tokens"], steer=sites_lib.steer_at(sites, site_index, vec)
    )
    return jnp.mean(out["valid"][..., 1] - out["valid"][..., 0])

  params_list = [jax.tree.map(lambda a: a[s], jax.device_get(params_S)) for s in range(num_seeds)]
  clean = [float(margin(p, 0, jnp.zeros(d))) for p in params_list]
  effect = lambda j, si, vec: float(margin(params_list[j], si, cfg.steer_scale * vec)) - clean[j]

  out, rotations = {}, {}
  for si, site in enumerate(sites):
    if progress:
      print(f"  analysing {site}: rotations, SAEs, Haar tests and steering", flush=True)
    x_fit, x_held = fit[site], held[site]
    v = [transfer.diff_of_means(x_fit[s], valid_fit) for s in range(num_seeds)]
    random_dirs = jax.random.normal(rng.key(seed, "random-steering", si), (num_seeds, d))
    q_random = haar.haar_orthogonal(rng.key(seed, "random-rotation", si), d)
    pair_rows, own = [], {}  # own[i]: SAE i on its own seed
    for a, b in itertools.combinations(range(num_seeds), 2):
      pair, directions = jax.device_get(_pair_numbers(x_fit[a], x_fit[b], x_held[a], x_held[b]))
      r_ab = directions[0]["R"]
      row = {
        "seeds": [a, b],
        **pair,
        "haar": haar.haar_test(r_ab, rng.key(seed, "haar-test", si, a, b), num_null=cfg.num_null),
        "directions": [],
      }
      for (i, j), direction in zip(((a, b), (b, a)), directions):
        r, scale = jnp.asarray(direction.pop("R")), float(direction.pop("scale"))
        sae = jax.device_get(
          sae_numbers(sae_of(si, i), sae_of(si, j), x_held[i], x_held[j], r, q_random, scale)
        )
        own[i] = {k: sae.pop(k) for k in ("within", "live_fraction")}
        vectors, cosines = transfer.steering_transfer(v[i], v[j], r, random_dirs[i], scale)
        row["directions"].append(
          {
            "source": i,
            "target": j,
            "scale": scale,
            **direction,
            **sae,
            **{f"steer_effect_{k}": effect(j, si, vec) for k, vec in vectors.items()},
            **cosines,
          }
        )
      pair_rows.append(row)
      rotations[f"{site}/{a}_{b}"] = r_ab
    native = [effect(s, si, v[s]) for s in range(num_seeds)]
    seeds = _seed_numbers(cfg, si, x_held, own, sae_mse[si * num_seeds :][:num_seeds], native)
    out[site] = {"seeds": seeds, "pairs": pair_rows, "summary": summarize_site(seeds, pair_rows, d)}
  return {"sites": out, "rotations": rotations}


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
  out = {
    k: finite_mean(seeds[k]) for k in ("sae_ev_within", "sae_live_fraction", "effective_dimension")
  }
  # Every number of a transfer direction is averaged, but the effects of the transferred vectors,
  # which become ratios to the native one.
  ratios = ("aligned", "raw", "random")
  skip = {"source", "target", "scale", *(f"steer_effect_{k}" for k in ratios)}
  out.update({k: finite_mean([x[k] for x in dirs]) for k in dirs[0] if k not in skip})
  for key in ("rotation_split_half_agreement", "cka", "procrustes_distance", "mean_cca"):
    out[key] = finite_mean([p[key] for p in pairs])
  scales = [x["scale"] for x in dirs]
  out["scale_range"] = [min(scales), max(scales)]
  steered = [x for x in dirs if abs(x["steer_effect_native"]) > 1e-6]
  for kind in ratios:
    out[f"steer_ratio_{kind}"] = finite_mean(
      [x[f"steer_effect_{kind}"] / x["steer_effect_native"] for x in steered]
    )
  basis = metrics.pool_tests(seeds["privileged_basis_test"], level)
  out["privileged_basis_seeds"] = basis["fraction_rejected"]
  out["basis_p_median"] = basis["p_median"]
  out["basis_kurtosis"], out["basis_kurtosis_null"] = basis["value_mean"], basis["null_mean"]
  out["min_cross_covariance_rank"] = min(p["cross_covariance_rank"] for p in pairs)
  out["haar_applicable"] = out["min_cross_covariance_rank"] == d
  out["haar"] = {s: metrics.pool_tests([p["haar"][s] for p in pairs], level) for s in HAAR_STATS}
  basis_p = [metrics.bonferroni([p["haar"][s]["p_value"] for s in BASIS_STATS]) for p in pairs]
  out["haar_basis_rejections"] = np.mean(np.array(basis_p) <= level)
  return out
