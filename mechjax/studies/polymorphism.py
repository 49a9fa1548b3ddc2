"""Polymorphism as rotation: do independently trained transformers differ by a Haar-random rotation?

The claim under test (McCann 2026, arXiv:2605.24577): seeds of one architecture compute the same function
in residual bases related by a rotation ``x_j ≈ x_i R``, the rotation is Haar-random, and one orthogonal
Procrustes fit transfers SAE dictionaries and steering vectors between seeds, while the usual
SAE-universality metric (max cosine between decoder rows) says the dictionaries already match.

For each optimizer, ``num_seeds`` Dyck-3 transformers are trained together with the core (next token,
nesting depth and prefix validity, one linear head each). Then, for every residual site and every ordered
pair of seeds (source ``i``, target ``j``):

* ``s`` and ``R`` are fitted by orthogonal Procrustes with an isotropic scale, ``s · x_i R ≈ x_j``, on a *fit*
  batch, and everything is measured on a *held-out* batch of fresh sequences (the same tokens through every
  seed). The scale is part of the symmetry: every reader of a pre-norm stream sits behind an RMSNorm, so
  multiplying all writers by ``s`` leaves the function unchanged (see
  :func:`mechjax.models.transformer.rotate_residual`). ``R`` itself does not depend on whether ``s`` is fitted;
* a TopK SAE per (seed, site), trained with the core on the fit batch, gives the within-seed EV (the
  ceiling), the cross-seed EV without the map and through it (into the source frame, encode and decode,
  back), and the decoder-row max-cosine "universality" score;
* :func:`mechjax.align.haar.privileged_basis_test` asks of each seed's activations whether the coordinate
  axes are special at all, and :func:`mechjax.align.haar.haar_test` whether ``R`` looks Haar-random or close
  to a signed permutation. The rank of the cross-covariance, the stream's effective dimension and the
  agreement of ``R`` fitted on two halves of the fit batch say how much of ``R`` the data determine: where
  ``XᵀY`` is rank-deficient, ``R`` is arbitrary on its null space and the Haar test of ``R`` is not reported;
* linear CKA, the angular Procrustes distance and mean CCA compare the two seeds' activations;
* a steering vector (valid-minus-invalid difference of means of the source seed) is added to the target
  model's stream at the same site, with and without the map, and its effect on the target's validity
  logit margin is compared with that of the target's own vector and of a random vector of the same norm.

Adam updates are not rotation-equivariant, SGD (with momentum) updates are, so the answer can depend on the
optimizer; ``optimizers=("adam", "sgd")`` runs both.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import plotting
from mechjax.align import haar
from mechjax.align import procrustes
from mechjax.align import transfer
from mechjax.data import dyck
from mechjax.models import sae as sae_lib
from mechjax.models.transformer import Transformer, site_names
from mechjax.similarity import representational as rep
from mechjax.train import loop
from mechjax.train import metrics as metrics_lib

OPTIMIZERS = ("adam", "sgd")
HAAR_STATS = ("frobenius_to_identity", "trace", "eigenangle_ks", "signed_permutation_distance",
              "max_abs_entry_per_row", "entry_kurtosis")
BASIS_STATS = ("signed_permutation_distance", "max_abs_entry_per_row", "entry_kurtosis")


@dataclasses.dataclass(frozen=True)
class Config:
  optimizers: tuple[str, ...] = OPTIMIZERS
  # Data: Dyck-k with corrupted sequences, so prefix validity is a non-trivial target.
  k: int = 3
  max_depth: int = 8
  length: int = 32
  p_corrupt: float = 0.5
  # Model.
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  d_mlp: int = 256
  attn_only: bool = False
  # Training.
  batch_size: int = 64
  adam_learning_rate: float = 3e-3
  sgd_learning_rate: float = 0.05
  sgd_momentum: float = 0.9
  # Analysis.
  fit_sequences: int = 256
  eval_sequences: int = 256
  sae_latents: int = 256
  sae_top_k: int = 8
  sae_steps: int = 1000
  sae_batch_size: int = 256
  sae_learning_rate: float = 1e-3
  num_null: int = 199
  steer_scale: float = 1.0
  # Shared.
  seed: int = 0
  num_seeds: int = 4
  steps: int = 1500
  log_every: int = 250
  checkpoint_every: int = 500


def model_of(cfg: Config) -> Transformer:
  heads = (("token", dyck.vocab_size(cfg.k)), ("depth", cfg.max_depth + 1), ("valid", 2))
  return Transformer(vocab_size=dyck.vocab_size(cfg.k), heads=heads, d_model=cfg.d_model, num_layers=cfg.num_layers,
                     num_heads=cfg.num_heads, d_mlp=cfg.d_mlp, max_len=cfg.length, attn_only=cfg.attn_only)


def sample(cfg: Config, key: jax.Array, n: int) -> dict[str, jax.Array]:
  return dyck.sample_dyck(key, n, length=cfg.length, k=cfg.k, max_depth=cfg.max_depth, p_corrupt=cfg.p_corrupt)


def task_losses(outputs: dict[str, jax.Array], batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """Per-head mean cross-entropy and accuracy; the next-token head is masked at the last position."""
  ce = optax.softmax_cross_entropy_with_integer_labels
  mask = batch["mask"].astype(jnp.float32)
  out = {}
  for head, target, weight in (("token", batch["next_token"], mask), ("depth", batch["depth"], None),
                               ("valid", batch["valid"].astype(jnp.int32), None)):
    logits = outputs[head]
    w = jnp.ones(target.shape, jnp.float32) if weight is None else weight
    out[f"{head}_loss"] = jnp.sum(ce(logits, target) * w) / jnp.sum(w)
    out[f"{head}_acc"] = jnp.sum((jnp.argmax(logits, -1) == target) * w) / jnp.sum(w)
  return out


def make_problem(cfg: Config) -> loop.Problem:
  model = model_of(cfg)

  def init(key):
    return model.init(key, jnp.zeros((1, cfg.length), jnp.int32))

  def loss(params, key):
    batch = sample(cfg, key, cfg.batch_size)
    m = task_losses(model.apply(params, batch["tokens"]), batch)
    total = m["token_loss"] + m["depth_loss"] + m["valid_loss"]
    return total, {k: v for k, v in m.items() if k.endswith("_acc")}

  def evaluate(params, key):
    batch = sample(cfg, key, 512)
    return {f"test_{k}": v for k, v in task_losses(model.apply(params, batch["tokens"]), batch).items()}

  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def make_optimizer(cfg: Config, name: str) -> optax.GradientTransformation:
  """Adam, or SGD with heavy-ball momentum, both on the same schedule: linear warm-up over the first 5% of
  the steps, then cosine decay to 1% of the peak, so every seed ends at a settled point."""
  if name not in OPTIMIZERS:
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {name!r}")
  peak = cfg.adam_learning_rate if name == "adam" else cfg.sgd_learning_rate
  schedule = optax.warmup_cosine_decay_schedule(0.0, peak, warmup_steps=max(1, cfg.steps // 20),
                                                decay_steps=cfg.steps, end_value=0.01 * peak)
  if name == "adam":
    return optax.adam(schedule)
  return optax.sgd(schedule, momentum=cfg.sgd_momentum or None)


# ---------------------------------------------------------------------------------------------------------
# Analysis of trained seeds.

FIT_STREAM, EVAL_STREAM, SAE_STREAM, HAAR_STREAM, STEER_STREAM = (2**31 - 1 - i for i in range(5))


def analysis_sites(num_layers: int) -> list[str]:
  """The distinct residual sites: ``resid_pre_{l+1}`` is ``resid_post_{l}`` and is not repeated."""
  return [s for s in site_names(num_layers) if not (s.startswith("resid_pre_") and s != "resid_pre_0")]


def stream_key(seed: int, stream: int) -> jax.Array:
  """A key of its own for each analysis step, never equal to a training seed's key (those use small indices)."""
  return jax.random.fold_in(jax.random.PRNGKey(seed), stream)


def collect_sites(cfg: Config, params_S, *token_batches: jax.Array) -> list[dict[str, jax.Array]]:
  """For each ``tokens_NxT``, ``{site: (S, N·T, d)}``: every seed's residual activations on the same tokens,
  positions flattened (one compiled program for all batches of one shape)."""
  model = model_of(cfg)
  run = jax.jit(jax.vmap(lambda p, tokens: model.apply(p, tokens, return_sites=True)[1], in_axes=(0, None)))
  out = []
  for tokens in token_batches:
    sites = run(params_S, tokens)
    out.append({s: sites[s].reshape(sites[s].shape[0], -1, cfg.d_model) for s in analysis_sites(cfg.num_layers)})
  return out


def rms_scale(x_SxNxD: jax.Array) -> jax.Array:
  """Per-seed scale ``sqrt(mean ‖x‖² / d)``: SAEs see ``x / scale`` so one learning rate suits every site."""
  return jnp.sqrt(jnp.mean(x_SxNxD**2, axis=(-2, -1)))


def train_saes(cfg: Config, buffers_MxNxD: jax.Array, key: jax.Array):
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
    state, per_step = loop.scan_steps(loop.make_train_step(problem, optimizer), state, cfg.sae_steps)
    return state["params"], jnp.mean(per_step["mse"][-max(cfg.sae_steps // 10, 1):])

  keys = jax.random.split(key, buffers_MxNxD.shape[0])
  return jax.jit(jax.vmap(one))(buffers_MxNxD, keys)


def _pairs(num_seeds: int) -> list[tuple[int, int]]:
  return list(itertools.combinations(range(num_seeds), 2))


def _mean(xs):
  xs = [x for x in xs if x is not None and np.isfinite(x)]
  return float(np.mean(xs)) if xs else None


def _pair_numbers(xa_fit, xb_fit, xa_held, xb_held):
  """Everything about a seed pair (a, b) at one site that needs only activations; jitted by the caller."""
  fit_ab = procrustes.procrustes_fit(xa_fit, xb_fit, scale=True)
  fit_ba = procrustes.procrustes_fit(xb_fit, xa_fit, scale=True)  # R_ba = R_abᵀ; the scale differs
  half = xa_fit.shape[0] // 2  # rows are sequence-major: the halves hold different sequences
  r_first = procrustes.procrustes_fit(xa_fit[:half], xb_fit[:half]).R
  r_second = procrustes.procrustes_fit(xa_fit[half:], xb_fit[half:]).R
  ev = transfer.explained_variance
  directions = []
  for fit, (x_fit, y_fit, x_held, y_held) in ((fit_ab, (xa_fit, xb_fit, xa_held, xb_held)),
                                             (fit_ba, (xb_fit, xa_fit, xb_held, xa_held))):
    directions.append({
        "R": fit.R, "scale": fit.scale,
        "aligned_ev_fit_batch": ev(y_fit, fit.scale * x_fit @ fit.R),
        "aligned_ev_held_out": ev(y_held, fit.scale * x_held @ fit.R),
        "rotation_only_ev_held_out": ev(y_held, x_held @ fit.R),
        "identity_ev_held_out": ev(y_held, x_held),
    })
  pair = {
      "rank": fit_ab.rank, "condition": fit_ab.singular_values[-1] / fit_ab.singular_values[0],
      "split_half": jnp.trace(r_first.T @ r_second) / xa_fit.shape[1],
      "cka": rep.linear_cka(xa_held, xb_held), "procrustes_distance": rep.procrustes_distance(xa_held, xb_held),
      "mean_cca": rep.mean_cca(xa_held, xb_held),
  }
  return pair, directions


def _max_cos(dec_a, dec_b, live_a, live_b):
  """Mean over the live rows of ``dec_a`` of the largest ``|cos|`` with any live row of ``dec_b`` (unit rows).

  Dead latents (never active on the held-out batch) keep their random initial decoder rows, which would
  pull the score towards the random-vector baseline, so they are left out on both sides.
  """
  cos = jnp.where(live_b[None, :], jnp.abs(dec_a @ dec_b.T), -1.0)
  best = jnp.max(cos, axis=1)
  return jnp.sum(jnp.where(live_a, best, 0.0)) / jnp.maximum(jnp.sum(live_a), 1)


def _cos(u, v):
  return jnp.dot(u, v) / (jnp.linalg.norm(u) * jnp.linalg.norm(v))


def analyze(cfg: Config, params_S, progress: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
  """Every per-site measurement for one optimizer's trained seeds (see the module docstring).

  Returns ``({site: {"seeds": {...}, "pairs": [...], "summary": {...}}}, {"<site>/<a>_<b>": R})``. The
  numerical work is a few jitted functions whose shapes do not change between sites, seeds and pairs, so
  each compiles once.
  """
  model = model_of(cfg)
  num_seeds, d = cfg.num_seeds, cfg.d_model
  sites = analysis_sites(cfg.num_layers)
  pairs = _pairs(num_seeds)
  draw = jax.jit(functools.partial(sample, cfg), static_argnums=1)
  fit_batch = draw(stream_key(cfg.seed, FIT_STREAM), cfg.fit_sequences)
  eval_batch = draw(stream_key(cfg.seed, EVAL_STREAM), cfg.eval_sequences)
  fit, held = collect_sites(cfg, params_S, fit_batch["tokens"], eval_batch["tokens"])
  valid_fit = fit_batch["valid"].reshape(-1)

  # SAEs: one per (site, seed), on the fit activations scaled to unit RMS entry.
  norms = {s: rms_scale(fit[s]) for s in sites}
  buffers = jnp.concatenate([fit[s] / norms[s][:, None, None] for s in sites])
  sae_params, sae_mse = train_saes(cfg, buffers, stream_key(cfg.seed, SAE_STREAM))
  sae_model = sae_lib.SAE(cfg.sae_latents, top_k=cfg.sae_top_k or None)
  sae_of = lambda si, seed: (jax.tree.map(lambda a: a[si * num_seeds + seed], sae_params), norms[sites[si]][seed])

  @jax.jit
  def sae_numbers(sae_i, sae_j, x_i, x_j, r, scale, q_random):
    """Within-seed EV and live latents of SAE i on x_i; SAE i on x_j raw and through (s, R); decoder
    max-cosines between the live latents of SAE i and SAE j, raw, through R, and through a Haar rotation."""
    recon = lambda sae, x: sae_model.apply(sae[0], x / sae[1])[0] * sae[1]
    live = lambda sae, x: jnp.any(sae_model.apply(sae[0], x / sae[1])[1] > 0, axis=0)
    ev = transfer.explained_variance
    dec_i, dec_j = sae_lib.decoder(sae_i[0]), sae_lib.decoder(sae_j[0])
    live_i, live_j = live(sae_i, x_i), live(sae_j, x_j)
    return {"within": ev(x_i, recon(sae_i, x_i)), "live_fraction": jnp.mean(live_i),
            "sae_ev_raw": ev(x_j, recon(sae_i, x_j)),
            "sae_ev_aligned": ev(x_j, transfer.transfer_reconstruct(lambda z: recon(sae_i, z), x_j, r, scale)),
            "decoder_max_cos_raw": _max_cos(dec_i, dec_j, live_i, live_j),
            "decoder_max_cos_aligned": _max_cos(dec_i @ r, dec_j, live_i, live_j),
            "decoder_max_cos_random_rotation": _max_cos(dec_i @ q_random, dec_j, live_i, live_j)}

  # Steering: a vector added at one site of a target model; always the same pytree, so one compilation.
  @jax.jit
  def margin(params, site_index, vec):
    steer = {s: jnp.where(i == site_index, 1.0, 0.0) * vec for i, s in enumerate(sites)}
    out = model.apply(params, eval_batch["tokens"], steer=steer)["valid"]
    return jnp.mean(out[..., 1] - out[..., 0])

  params_list = [jax.tree.map(lambda a: a[s], params_S) for s in range(num_seeds)]
  clean = [float(margin(p, 0, jnp.zeros(d))) for p in params_list]
  effect = lambda j, si, vec: float(margin(params_list[j], si, cfg.steer_scale * vec)) - clean[j]
  pair_fn = jax.jit(_pair_numbers)
  steer_keys = jax.random.split(stream_key(cfg.seed, STEER_STREAM), len(sites))
  test_keys = iter(jax.random.split(stream_key(cfg.seed, HAAR_STREAM), len(sites) * (len(pairs) + num_seeds)))

  out, rotations = {}, {}
  for si, site in enumerate(sites):
    if progress:
      print(f"  analysing {site}", flush=True)
    x_fit, x_held = fit[site], held[site]
    v = [transfer.diff_of_means(x_fit[s], valid_fit) for s in range(num_seeds)]
    native = [effect(s, si, v[s]) for s in range(num_seeds)]
    random_dirs = jax.random.normal(steer_keys[si], (num_seeds, d))
    q_random = haar.haar_orthogonal(steer_keys[si], d)
    own = [jax.device_get(sae_numbers(sae_of(si, s), sae_of(si, s), x_held[s], x_held[s], jnp.eye(d), 1.0, q_random))
           for s in range(num_seeds)]
    basis = [haar.privileged_basis_test(x_held[s], next(test_keys), num_null=cfg.num_null) for s in range(num_seeds)]
    pair_rows = []
    for a, b in pairs:
      numbers, directions = jax.device_get(pair_fn(x_fit[a], x_fit[b], x_held[a], x_held[b]))
      r_ab = directions[0]["R"]
      haar_result = haar.haar_test(r_ab, next(test_keys), num_null=cfg.num_null)
      row = {
          "seeds": [a, b],
          "cross_covariance_rank": int(numbers["rank"]),
          "cross_covariance_condition": float(numbers["condition"]),
          "rotation_split_half_agreement": float(numbers["split_half"]),
          "cka": float(numbers["cka"]),
          "procrustes_distance": float(numbers["procrustes_distance"]),
          "mean_cca": float(numbers["mean_cca"]),
          "haar": {k: {"value": h["value"], "null_mean": h["null_mean"], "null_sd": h["null_sd"],
                       "p_value": h["p_value"]} for k, h in haar_result.items()},
          "directions": [],
      }
      for (i, j), direction in zip(((a, b), (b, a)), directions):
        r, scale = jnp.asarray(direction.pop("R")), float(direction.pop("scale"))
        sae = jax.device_get(sae_numbers(sae_of(si, i), sae_of(si, j), x_held[i], x_held[j], r, scale, q_random))
        random_v = random_dirs[i] * jnp.linalg.norm(v[j]) / jnp.linalg.norm(random_dirs[i])
        row["directions"].append({
            "source": i, "target": j, "scale": scale, **{k: float(val) for k, val in direction.items()},
            **{k: float(val) for k, val in sae.items() if k not in ("within", "live_fraction")},
            "steer_effect_native": native[j],
            "steer_effect_aligned": effect(j, si, scale * transfer.rotate_vector(v[i], r)),
            "steer_effect_raw": effect(j, si, v[i]),
            "steer_effect_random": effect(j, si, random_v),
            "steer_cos_aligned": float(_cos(v[i] @ r, v[j])),
            "steer_cos_raw": float(_cos(v[i], v[j])),
        })
      pair_rows.append(row)
      rotations[f"{site}/{a}_{b}"] = np.asarray(r_ab)
    seeds = {"sae_ev_within": [float(o["within"]) for o in own],
             "sae_live_fraction": [float(o["live_fraction"]) for o in own], "sae_mse": [float(m) for m in sae_mse[si * num_seeds:(si + 1) * num_seeds]],
             "steer_effect_native": native,
             "effective_dimension": [participation_ratio(x_held[s]) for s in range(num_seeds)],
             "privileged_basis_test": basis}
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

  * ``privileged_basis_seeds``: the fraction of seeds whose activations reject "the coordinate axes are
    not special" (:func:`mechjax.align.haar.privileged_basis_test`) at ``level``.
  * ``haar_basis_rejections``: the fraction of seed pairs whose fitted ``R`` rejects Haar at ``level`` on the
    basis-alignment statistics (Bonferroni over the three). Read it with ``min_cross_covariance_rank``
    (``haar_applicable`` is True only at full rank) and ``rotation_split_half_agreement``: where ``XᵀY`` is
    numerically rank-deficient, part of ``R`` is fixed by directions that carry almost no activation
    variance, or by nothing at all, and the Haar statistics of ``R`` partly describe that.
  * ``steer_ratio_*``: effect of a transferred vector / effect of the target's own vector, in the target model.
  """
  dirs = [x for p in pairs for x in p["directions"]]
  mean_over = lambda rows, key: _mean([r[key] for r in rows])
  ratio = lambda key: _mean([x[key] / x["steer_effect_native"] for x in dirs if abs(x["steer_effect_native"]) > 1e-6])
  out = {"sae_ev_within": _mean(seeds["sae_ev_within"]), "sae_live_fraction": _mean(seeds["sae_live_fraction"]),
         "effective_dimension": _mean(seeds["effective_dimension"])}
  for key in ("aligned_ev_fit_batch", "aligned_ev_held_out", "rotation_only_ev_held_out", "identity_ev_held_out",
              "sae_ev_raw", "sae_ev_aligned", "decoder_max_cos_raw", "decoder_max_cos_aligned",
              "decoder_max_cos_random_rotation", "steer_cos_raw",
              "steer_cos_aligned"):
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
  out["basis_kurtosis"] = _mean([b["value"] for b in basis])
  out["basis_kurtosis_null"] = _mean([b["null_mean"] for b in basis])
  out["basis_p_median"] = float(np.median([b["p_value"] for b in basis]))
  out["min_cross_covariance_rank"] = int(min(p["cross_covariance_rank"] for p in pairs))
  out["haar_applicable"] = out["min_cross_covariance_rank"] == d
  out["haar"] = {}
  for stat in HAAR_STATS:
    ps = np.array([p["haar"][stat]["p_value"] for p in pairs])
    out["haar"][stat] = {"value_mean": mean_over([p["haar"][stat] for p in pairs], "value"),
                         "null_mean": mean_over([p["haar"][stat] for p in pairs], "null_mean"),
                         "p_median": float(np.median(ps)), "fraction_rejected": float(np.mean(ps <= level))}
  basis_p = np.array([min(1.0, len(BASIS_STATS) * min(p["haar"][s]["p_value"] for s in BASIS_STATS)) for p in pairs])
  out["haar_basis_rejections"] = float(np.mean(basis_p <= level))
  return out


# ---------------------------------------------------------------------------------------------------------
# The whole study: train, analyse, write.

TABLE_COLUMNS = (
    ("sae_ev_within", "SAE EV within", "{:.3f}"),
    ("sae_ev_raw", "SAE EV cross, raw", "{:.3f}"),
    ("sae_ev_aligned", "SAE EV cross, via sR", "{:.3f}"),
    ("decoder_max_cos_raw", "decoder max cos, raw", "{:.3f}"),
    ("decoder_max_cos_aligned", "decoder max cos, via R", "{:.3f}"),
    ("decoder_max_cos_random_rotation", "decoder max cos, random Q", "{:.3f}"),
    ("aligned_ev_held_out", "EV of s·x·R", "{:.3f}"),
    ("rotation_only_ev_held_out", "EV of x·R", "{:.3f}"),
    ("rotation_split_half_agreement", "R split-half tr/d", "{:.3f}"),
    ("cka", "CKA", "{:.3f}"),
    ("procrustes_distance", "Procrustes dist.", "{:.3f}"),
    ("steer_ratio_aligned", "steer ratio, sR", "{:.2f}"),
    ("steer_ratio_raw", "steer ratio, none", "{:.2f}"),
    ("steer_ratio_random", "steer ratio, random", "{:.2f}"),
    ("effective_dimension", "eff. dim", "{:.1f}"),
    ("min_cross_covariance_rank", "rank XᵀY", "{}"),
    ("privileged_basis_seeds", "seeds w/ privileged basis", "{:.2f}"),
    ("haar_basis_rejections", "pairs rejecting Haar", "{:.2f}"),
)


def table_markdown(opt_summary: dict) -> str:
  """The per-site table of one optimizer as markdown (means over seed pairs and transfer directions)."""
  head = "| site | " + " | ".join(c[1] for c in TABLE_COLUMNS) + " |"
  rule = "|" + "---|" * (len(TABLE_COLUMNS) + 1)
  rows = []
  for site, m in opt_summary["sites"].items():
    cells = [("n/a" if m[key] is None else fmt.format(m[key])) for key, _, fmt in TABLE_COLUMNS]
    rows.append(f"| {site} | " + " | ".join(cells) + " |")
  return "\n".join([head, rule, *rows])


def _progress_text(row: dict) -> str:
  return (f"loss {np.mean(row['train_loss']):.3f} | test acc: token {np.mean(row['test_token_acc']):.3f}, "
          f"depth {np.mean(row['test_depth_acc']):.3f}, valid {np.mean(row['test_valid_acc']):.3f}")


def run(cfg: Config, workdir: str, progress: bool = True) -> dict:
  """Trains every optimizer's seeds (resuming interrupted runs), analyses them, and writes ``summary.json``,
  ``pairs.json`` (every pair's numbers), ``rotations.npz`` (every fitted ``R``), ``table.md`` and figures."""
  keys = loop.seed_keys(cfg.seed, cfg.num_seeds)
  summary = {"sites": analysis_sites(cfg.num_layers), "optimizers": {}}
  histories, details, all_rotations = {}, {}, {}
  for name in cfg.optimizers:
    result = loop.train(make_problem(cfg), make_optimizer(cfg, name), keys=keys, steps=cfg.steps, workdir=workdir,
                        run=f"transformer_{name}", log_every=cfg.log_every, checkpoint_every=cfg.checkpoint_every,
                        progress=progress, summarize=_progress_text)
    histories[name] = result.history
    if progress:
      print(f"{name}: fitting rotations, SAEs and steering vectors", flush=True)
    analysis, rotations = analyze(cfg, result.state["params"], progress=progress)
    details[name] = {site: {"seeds": a["seeds"], "pairs": a["pairs"]} for site, a in analysis.items()}
    all_rotations.update({f"{name}/{k}": v for k, v in rotations.items()})
    final = result.history[-1]
    sites = {site: a["summary"] for site, a in analysis.items()}
    summary["optimizers"][name] = {
        "final_test_acc": {head: float(np.mean(final[f"test_{head}_acc"])) for head in ("token", "depth", "valid")},
        "privileged_basis_seeds": _mean([m["privileged_basis_seeds"] for m in sites.values()]),
        "haar_applicable_sites": [site for site, m in sites.items() if m["haar_applicable"]],
        "haar_basis_rejections": _mean([m["haar_basis_rejections"] for m in sites.values()]),
        "min_cross_covariance_rank": min(m["min_cross_covariance_rank"] for m in sites.values()),
        "max_cross_covariance_rank": max(m["min_cross_covariance_rank"] for m in sites.values()),
        "split_half_agreement_range": [min(m["rotation_split_half_agreement"] for m in sites.values()),
                                       max(m["rotation_split_half_agreement"] for m in sites.values())],
        "sites": sites,
    }
  if metrics_lib.is_writer():
    figures = os.path.join(workdir, "figures")
    os.makedirs(figures, exist_ok=True)
    summary["figures"] = plot_all(cfg, summary, histories, all_rotations, figures)
    tables = "\n\n".join(f"### {name}\n\n{table_markdown(s)}" for name, s in summary["optimizers"].items())
    with open(os.path.join(workdir, "table.md"), "w") as f:
      f.write(tables + "\n")
    np.savez(os.path.join(workdir, "rotations.npz"), **all_rotations)
    metrics_lib.write_json(os.path.join(workdir, "pairs.json"), details)
    metrics_lib.write_json(os.path.join(workdir, "summary.json"), summary)
  return summary


def _assignment_order(r: np.ndarray) -> np.ndarray:
  """Column order that puts each row's matched column (linear assignment on ``|R|``) on the diagonal."""
  from scipy import optimize  # local: only the figures need it

  rows, cols = optimize.linear_sum_assignment(-np.abs(r))
  return cols[np.argsort(rows)]


def plot_all(cfg: Config, summary: dict, histories: dict, rotations: dict, figures: str) -> list[str]:
  written = []
  opts = list(summary["optimizers"])
  sites = summary["sites"]

  # 1. Training curves: every head's test accuracy, one curve per optimizer.
  panels = []
  for head in ("token", "depth", "valid"):
    curves = [plotting.Curve(np.array([r["step"] for r in histories[o]]),
                             np.array([r[f"test_{head}_acc"] for r in histories[o]], dtype=float), o) for o in opts]
    panels.append((f"{head} head", curves))
  written.append(plotting.curves_figure(panels, os.path.join(figures, "training.png"), ylabel="test accuracy",
                                        xlabel="steps"))

  # 2. Dictionary transfer: within-seed, raw cross-seed and rotated cross-seed EV on held-out data.
  ev = [(o, sites, {label: [summary["optimizers"][o]["sites"][s][key] for s in sites]
                    for key, label in (("sae_ev_within", "within seed (ceiling)"), ("sae_ev_raw", "cross-seed, raw"),
                                       ("sae_ev_aligned", "cross-seed, through sR"),
                                       ("decoder_max_cos_raw", "decoder max |cos| (raw)"))}) for o in opts]
  written.append(plotting.bars_figure(ev, os.path.join(figures, "dictionary_transfer.png"),
                                      ylabel="held-out explained variance / cosine", hlines=(0.0, 1.0)))

  # 3. Haar tests: p-values of every seed pair, per statistic, at each site.
  pv = []
  for o in opts:
    pairs_at = lambda s: summary["optimizers"][o]["sites"][s]["haar"]
    series = {"privileged basis of activations (kurtosis)": [summary["optimizers"][o]["sites"][s]["basis_p_median"]
                                                            for s in sites]}
    series.update({f"R: {stat}": [pairs_at(s)[stat]["p_median"] for s in sites] for stat in HAAR_STATS})
    pv.append((f"{o}: p-values (median over seeds / pairs)", sites, series))
  written.append(plotting.bars_figure(pv, os.path.join(figures, "haar_tests.png"), ylabel="p-value",
                                      hlines=(0.0, 0.05)))

  # 4. Steering transfer: effect in the target model relative to the target's own vector.
  st = [(o, sites, {label: [summary["optimizers"][o]["sites"][s][key] for s in sites]
                    for key, label in (("steer_ratio_aligned", "source vector through sR"),
                                       ("steer_ratio_raw", "source vector, no R"),
                                       ("steer_ratio_random", "random vector, same norm"))}) for o in opts]
  written.append(plotting.bars_figure(st, os.path.join(figures, "steering_transfer.png"),
                                      ylabel="effect / target's own vector", hlines=(0.0, 1.0)))

  # 5. The fitted rotation between seeds 0 and 1 at the last site, columns matched to rows: a privileged basis
  #    shows up as a bright (signed) diagonal; a Haar rotation as noise. A Haar sample is shown for reference.
  site = sites[-1]
  mats = []
  for o in opts:
    r = rotations.get(f"{o}/{site}/0_1")
    if r is not None:
      mats.append((f"{o}: R (seeds 0→1, {site})", r[:, _assignment_order(r)]))
  q = np.asarray(haar.haar_orthogonal(jax.random.PRNGKey(cfg.seed), cfg.d_model))
  mats.append(("Haar sample, same matching", q[:, _assignment_order(q)]))
  written.append(plotting.matrices_figure(mats, os.path.join(figures, "rotation_matrices.png")))
  return [os.path.basename(w) for w in written]


def config_from_flags(values: dict) -> Config:
  """A Config from parsed flag values: the same names, except ``--optimizer`` (→ ``optimizers``)."""
  values = {**values, "optimizers": tuple(values["optimizer"])}
  return Config(**{f.name: values[f.name] for f in dataclasses.fields(Config)})
