"""Do two pretrained language models differ by a rotation of the residual stream?

The recipe of "Polymorphism Is Rotation" (McCann 2026) on two checkpoints ``A`` and ``B`` of the
same width read from disk (two Pythia seeds, say), at every residual site both have
(``resid_pre_0``, each ``resid_mid_l`` where the blocks have one, each ``resid_post_l``; the final
norm's output is not a residual site):

* the centred orthogonal Procrustes fit ``R = argmin_{R ∈ O(d)} ‖(X_A − μ_A) R − (X_B − μ_B)‖_F``
  (Schönemann 1966) on the activations of one batch of token windows, in float64, and the explained
  variance of ``X_B`` on held-out windows by ``X_A``, raw and through ``R``
  (:func:`mechjax.align.transfer.measure_alignment`);
* ``‖R − I‖_F`` beside ``√(2d)``, its value for a Haar-random ``R`` (``E tr R = 0``), and the Haar
  tests of :func:`mechjax.align.haar.haar_test` (is ``R`` random, or close to a signed
  permutation?), every site of a coset against one Haar reference (:func:`haar.haar_reference`:
  its eigen-angle pool and null are drawn once, not at each site);
* steering transfer, measured in ``B`` (:func:`mechjax.align.transfer.steering_transfer`): the
  steering vector of a next-token concept is the difference of means ``v = mean(x | next token =
  t*) − mean(x | next token ≠ t*)`` on the fit windows, for ``t*`` their most frequent next token.
  Added at the site (times ``--steer_scale``), it raises ``B``'s mean ``log p(t*)`` on the held-out
  windows by some effect. The study reports the effect of ``A``'s vector through ``R``, raw and of
  a random vector of ``v_B``'s norm, each over the effect of ``B``'s own ``v_B``.

Outputs: ``summary.json``, ``rotations.npz`` (``R`` per site) and ``figures/alignment.png``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import config
from mechjax import rng
from mechjax.align import haar
from mechjax.align import transfer
from mechjax.data import tokens as tokens_lib
from mechjax.models import pretrained
from mechjax.models import sites as sites_lib
from mechjax.slt import progress
from mechjax.studies import frame
from mechjax.studies.rotation import pretrained_polymorphism_report as report_lib

NAME = "pretrained_polymorphism"
_CHECKPOINT = (
  "a Hugging Face checkpoint directory on disk (config.json and model.safetensors); get one once "
  "where the hub is reachable, e.g. huggingface-cli download EleutherAI/pythia-70m-seed{} "
  "--local-dir pythia-70m-seed{}"
)
REQUIRED = {
  "model_a": _CHECKPOINT.format(1, 1),
  "model_b": _CHECKPOINT.format(2, 2) + " (the same width and tokenizer as --model_a)",
  "corpus": 'a token file (python -c "from mechjax.data import tokens; '
  "tokens.corpus_from_text('texts/', 'pythia-70m-seed1', 'corpus.tokens')\")",
}
HAAR_SHOWN = report_lib.HAAR_SHOWN
TRANSFERRED = report_lib.TRANSFERRED


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  model_a: str = config.setting("", "The source checkpoint directory (its stream is rotated).")
  model_b: str = config.setting("", "The target checkpoint directory (steering is measured here).")
  corpus: str = config.setting("", "The token file (mechjax.data.tokens) the windows come from.")
  seq_len: int = config.setting(64, "Tokens per window.", check=config.at_least(2))
  fit_windows: int = config.setting(
    64, "Windows whose activations fit R (× seq_len ≥ d_model).", check=config.at_least(2)
  )
  held_windows: int = config.setting(
    64, "Further windows every measurement is made on.", check=config.at_least(1)
  )
  batch_windows: int = config.setting(
    8, "Windows per forward pass (bounds the memory of the logits).", check=config.at_least(1)
  )
  steer_scale: float = config.setting(
    1.0, "Multiple of the steering vector added at the site.", check=config.positive
  )
  num_null: int = config.setting(
    199, "Haar rotations in each test's null sample.", check=config.at_least(19)
  )
  seed: int = config.setting(0, "Seed of the windows and the tests.", check=config.at_least(0))
  allow_other_tokenizer: bool = config.setting(
    False,
    "Run on a corpus whose recorded tokenizer differs from a checkpoint's tokenizer.json (refused "
    "otherwise: its ids would be other words).",
  )


def _windows_and_sites(cfg: Config, model_a, model_b):
  """``(fit windows, held-out windows, sites)``: the corpus's seeded windows, checked against both
  models, and the residual sites both models have, in A's stream order."""
  ids = tokens_lib.read_tokens(cfg.corpus)
  for model_dir in (cfg.model_a, cfg.model_b):
    tokens_lib.check_tokenizer(ids, model_dir, allow_mismatch=cfg.allow_other_tokenizer)
  fit_w = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.fit_windows, cfg.seed, "fit-windows")
  held_w = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.held_windows, cfg.seed, "held-windows")
  for model in (model_a, model_b):
    pretrained.check_tokens(model.arch, fit_w)
  in_b = set(pretrained.site_names(model_b))
  sites = [s for s in sites_lib.residual_sites(pretrained.site_names(model_a)) if s in in_b]
  return fit_w, held_w, sites


def fit_sites(cfg: Config, acts: dict, sites: Sequence[str], labels: np.ndarray, ctx) -> dict:
  """Per site, ``(R, the alignment's numbers, the steering vectors, their cosines)``: the centred
  Procrustes fit and the held-out explained variance (:func:`transfer.measure_alignment`), and
  the steering vectors of the concept ``labels`` (one per fit position with a next token) moved
  through ``R`` (:func:`transfer.steering_transfer`), in float64."""
  start, fits = time.perf_counter(), {}
  d = acts["a"]["fit"][sites[0]].shape[1]
  with_next = lambda x: x.reshape(cfg.fit_windows, cfg.seq_len, d)[:, :-1].reshape(-1, d)
  for si, site in enumerate(sites):
    xa, xb = acts["a"]["fit"][site], acts["b"]["fit"][site]
    v_a, v_b = (transfer.diff_of_means(with_next(x), labels) for x in (xa, xb))
    random_v = jax.random.normal(rng.key(cfg.seed, "random-steering", si), (d,))
    with jax.enable_x64(True):  # the fit and the vectors it moves in float64
      fit, numbers = transfer.measure_alignment(
        xa, xb, acts["a"]["held"][site], acts["b"]["held"][site], center=True
      )
      numbers |= held_out_spread(cfg, xa, xb, acts["a"]["held"][site], acts["b"]["held"][site], fit)
      vectors, cosines = transfer.steering_transfer(
        *(np.asarray(x, np.float64) for x in (v_a, v_b, fit.R, random_v))
      )
      fits[site] = jax.device_get((fit.R, numbers, vectors, cosines))
  ctx.log(f"  R fitted at {len(sites)} sites in {progress.duration(time.perf_counter() - start)}")
  return fits


def held_out_spread(cfg: Config, xa, xb, xa_held, xb_held, fit) -> dict:
  """The standard errors of the held-out explained variances over the held-out batches
  (``batch_windows`` windows each): the spread of each batch's EV, raw and through the centred
  ``R``, over ``√batches``; None with one batch."""
  rows = cfg.batch_windows * cfg.seq_len
  xa, xb, xa_held, xb_held, r = (
    np.asarray(x, np.float64) for x in (xa, xb, xa_held, xb_held, fit.R)
  )
  mu_a, mu_b = np.mean(xa, axis=0, keepdims=True), np.mean(xb, axis=0, keepdims=True)
  raw, aligned = [], []
  for i in range(0, len(xa_held), rows):
    a, b = xa_held[i : i + rows], xb_held[i : i + rows]
    raw.append(float(transfer.explained_variance(b, a)))
    aligned.append(float(transfer.explained_variance(b, (a - mu_a) @ r + mu_b)))
  se = lambda v: float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None
  return {"identity_ev_held_out_se": se(raw), "aligned_ev_held_out_se": se(aligned)}


def haar_references(cfg: Config, rotations: dict, log=print) -> dict:
  """The Haar reference (:func:`mechjax.align.haar.haar_reference`) of each coset (``det R < 0``
  or not) that the fitted ``rotations`` fall in, drawn once each and shared by every site of the
  coset; ``log`` gets a line with the time each took."""
  references = {}
  for negative in sorted({bool(np.linalg.det(r) < 0) for r in rotations.values()}):
    d, start = len(next(iter(rotations.values()))), time.perf_counter()
    key = rng.key(cfg.seed, "haar-test", int(negative))
    references[negative] = haar.haar_reference(d, negative, key, cfg.num_null)
    log(
      f"  Haar reference of the det {'−' if negative else '+'}1 coset (d = {d}, {cfg.num_null} "
      f"nulls), for the tests of every site in it: {progress.duration(time.perf_counter() - start)}"
    )
  return references


def plan(cfg: Config, ctx: frame.Context, params: tuple, sites: Sequence[str], d: int, memory):
  """Logs the plan before the measurements: the models, the sites, the forward passes, the Haar
  tests, and the memory (the parameters, the activations kept on the host, and the largest
  program's memory analysis, :func:`steered_log_prob`'s)."""
  sizes = [sum(np.size(x) for x in jax.tree.leaves(p)) for p in params]
  weights = sum(x.nbytes for p in params for x in jax.tree.leaves(p))
  tokens = (cfg.fit_windows + cfg.held_windows) * cfg.seq_len
  held_passes = -(-cfg.held_windows // cfg.batch_windows)
  ctx.log(
    f"plan: A {sizes[0]:,} and B {sizes[1]:,} parameters, d = {d}; {len(sites)} residual sites; "
    f"{cfg.fit_windows} fit and {cfg.held_windows} held-out windows of {cfg.seq_len} tokens"
  )
  ctx.log(
    f"  activations: every site of both models on the {tokens:,} tokens, {cfg.batch_windows} "
    f"windows per forward pass ({2 * -(-tokens // (cfg.batch_windows * cfg.seq_len))} passes)"
  )
  ctx.log(
    f"  per site: a {d} × {d} Procrustes fit in float64, the Haar tests of R (against a "
    f"reference of {cfg.num_null} null rotations drawn once for each coset, det R = ±1, that the "
    f"sites' R fall in), and B steered by 4 vectors ({4 * held_passes} forward passes)"
  )
  host = 2 * len(sites) * tokens * d * 8  # {a, b} × sites × (fit and held-out tokens), float64
  device = weights + memory.temp_size_in_bytes + memory.output_size_in_bytes
  ctx.log(
    f"  memory: {device / 2**30:.2f} GiB on the device (both models' weights "
    f"{weights / 2**30:.2f}, the steered forward pass's temporaries "
    f"{memory.temp_size_in_bytes / 2**30:.2f}, from its memory analysis) and "
    f"{host / 2**30:.2f} GiB of activations on the host (float64)"
  )


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Loads both checkpoints and the corpus, fits ``R`` at every residual site, and measures the
  explained variance, the Haar tests and steering transfer on held-out windows."""
  model_a, params_a = pretrained.load(cfg.model_a)
  model_b, params_b = pretrained.load(cfg.model_b)
  a, b = model_a.arch, model_b.arch
  check_pair(a, b, cfg.seq_len)
  d = a.d_model
  if cfg.fit_windows * cfg.seq_len < d:
    raise config.ConfigError(
      ["fit_windows", "seq_len"],
      f"fit_windows × seq_len = {cfg.fit_windows * cfg.seq_len} tokens must be at least d_model = "
      f"{d}, or the rotation is not determined by the fit",
    )
  fit_w, held_w, sites = _windows_and_sites(cfg, model_a, model_b)
  # B's mean log p(target_token) on the held-out windows, with a vector added at a site.
  target_token = np.bincount(fit_w[:, 1:].ravel()).argmax()
  log_p = steered_log_prob(model_b, params_b, sites, held_w, target_token, cfg.batch_windows)
  plan(cfg, ctx, (params_a, params_b), sites, d, log_p.memory)
  acts = {  # {model: {split: {site: (windows·seq_len, d)}}}, float64, window-major
    name: site_activations(model, params, {"fit": fit_w, "held": held_w}, sites, cfg.batch_windows)
    for name, model, params in (("a", model_a, params_a), ("b", model_b, params_b))
  }
  # The concept: the fit windows' most frequent next token, labelled at every position but the last
  # of each window (which has no next token in the window).
  fits = fit_sites(cfg, acts, sites, (fit_w[:, 1:] == target_token).ravel(), ctx)
  references = haar_references(cfg, {site: fit[0] for site, fit in fits.items()}, ctx.log)
  clean = log_p.batches(0, np.zeros(d))
  rows, rotations = {}, {}
  meter = progress.Meter(len(sites), ctx.log, interval=0, settle=0, unit="sites")
  meter(0)  # the clock of the sites starts here
  for si, (site, (r, numbers, vectors, cosines)) in enumerate(fits.items()):
    meter.label = site
    tests = haar.haar_test(r, reference=references[bool(np.linalg.det(r) < 0)])
    effect, effect_se = steering_effects(log_p, si, cfg.steer_scale, vectors, clean)
    native = effect["native"]
    agreement = float(numbers["rotation_split_half_agreement"])
    clear = report_lib.clearly_positive(native, effect_se["native"])
    rows[site] = {
      **numbers,
      "determined": agreement >= report_lib.DETERMINED,
      "fit_tokens_needed": report_lib.fit_tokens_needed(fit_w.size, agreement),
      "frobenius_to_identity": tests["frobenius_to_identity"]["value"],
      "haar": {k: {q: v for q, v in t.items() if q != "tail"} for k, t in tests.items()},
      "steer_effect": effect,
      "steer_effect_se": effect_se,
      # A ratio over B's own effect only where that effect is clearly positive.
      "steer_ratio": {k: effect[k] / native if clear else None for k in TRANSFERRED},
      **cosines,
    }
    rotations[site] = r
    meter(1)
  summary = {
    "models": {
      name: {"family": m.arch.family, "layers": m.arch.num_layers, "directory": directory}
      for name, m, directory in (("a", model_a, cfg.model_a), ("b", model_b, cfg.model_b))
    },
    "d_model": d,
    "sqrt_2d": np.sqrt(2 * d),
    "seq_len": cfg.seq_len,
    "fit_tokens": fit_w.size,
    "held_out_tokens": held_w.size,
    "steer_token": target_token,
    "steer_token_text": tokens_lib.decoder(cfg.model_b)([int(target_token)]),
    "steer_token_log_p": float(np.average(clean, weights=log_p.weights)),
    "sites": rows,
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [report_lib.plot(summary, f"{folder}/alignment.png")],
    files={"rotations.npz": rotations},
    captions={
      "alignment.png": "Per residual site, row by row: the split-half agreement of R (how far "
      f"the fit tokens determine it; below {report_lib.DETERMINED} it is mostly noise, and such "
      "sites are shaded grey in every panel); the held-out explained variance of B's activations "
      "by A's, raw and through R, ± one standard error over held-out batches; ‖R − I‖_F minus "
      "√(2d), its Haar mean, with the Haar null's mean ± 2 sd (band); and the change of B's mean "
      "log p of the steering token when each vector is added at the site (B's own, A's through R, "
      "A's raw, a random one), ± one standard error over held-out batches."
    },
  )


def check_pair(
  a: pretrained.Arch,
  b: pretrained.Arch,
  seq_len: int,
  names: Sequence[str] = ("model_a", "model_b"),
) -> None:
  """Refuses two checkpoints whose residual streams cannot be compared on the same windows: a
  different ``d_model`` or ``vocab_size`` (a :class:`mechjax.config.ConfigError` naming the settings
  ``names`` that hold them), or windows of ``seq_len`` tokens beyond either one's position limit
  (naming ``seq_len``)."""
  for what in ("d_model", "vocab_size"):
    if getattr(a, what) != getattr(b, what):
      got = f"got {getattr(a, what)} and {getattr(b, what)}"
      raise config.ConfigError(list(names), f"must have the same {what}; {got}")
  limit = min(a.max_positions, b.max_positions)
  if seq_len > limit:
    raise config.ConfigError(
      ["seq_len"], f"must be at most {limit}, the models' position limit (max_position_embeddings)"
    )


def site_activations(
  model: pretrained.DecoderLM, params: dict, windows: dict, sites: Sequence[str], batch: int
) -> dict[str, dict[str, np.ndarray]]:
  """The activations at ``sites`` over each set of token windows (``{name: (B, T) tokens}``),
  ``batch`` windows per call of one compiled program: ``{name: {site: (B·T, d_model) float64}}``,
  window-major."""
  forward = jax.jit(
    lambda p, t: {
      s: x for s, x in model.apply({"params": p}, t, return_sites=True)[1].items() if s in sites
    }
  )
  out = {}
  for name, w in windows.items():
    parts = [jax.device_get(forward(params, w[i : i + batch])) for i in range(0, len(w), batch)]
    out[name] = {
      s: np.concatenate([p[s] for p in parts]).reshape(-1, model.arch.d_model).astype(np.float64)
      for s in sites
    }
  return out


def steered_log_prob(
  model: pretrained.DecoderLM, params: dict, sites: Sequence[str], windows, token: int, batch: int
) -> Callable[[int, np.ndarray], float]:
  """``log_p(site_index, v)``: the model's mean log-probability of the next token being ``token``,
  over every position of the token ``windows`` ``(B, T)``, with ``v`` added to the residual stream
  at ``sites[site_index]`` (:func:`mechjax.models.sites.steer_at`; a zero ``v`` gives the
  unsteered value). The windows go ``batch`` at a time through one program for every site and
  vector, compiled ahead (twice where the last batch is shorter), and the batches' means are
  averaged with their sizes (``log_p.weights``) as weights; ``log_p.batches(site_index, v)`` gives
  the batches' means themselves. ``log_p.memory`` is the full batch's program's memory analysis.

  Args:
    model: the model to steer.
    params: its params (without the ``"params"`` wrapper).
    sites: the sites a vector may be added at, in a fixed order.
    windows: the token windows the mean is taken over.
    token: the token whose log-probability is measured.
    batch: windows per forward pass (bounds the memory of the logits).
  """

  @jax.jit
  def mean_log_p(params, site_index, v, tokens):
    logits = model.apply({"params": params}, tokens, steer=sites_lib.steer_at(sites, site_index, v))
    return jnp.mean(jax.nn.log_softmax(logits.astype(jnp.float32))[..., token])

  chunks = [jnp.asarray(windows[i : i + batch]) for i in range(0, len(windows), batch)]
  v0, index0 = jnp.zeros(model.arch.d_model, jnp.float32), jnp.int32(0)
  programs = {  # compiled once per chunk shape; the first's memory analysis is the plan's
    c.shape: mean_log_p.lower(params, index0, v0, c).compile() for c in chunks[:1] + chunks[-1:]
  }

  def batches(site_index: int, v) -> np.ndarray:
    v, index = jnp.asarray(v, jnp.float32), jnp.int32(site_index)
    return np.asarray([programs[c.shape](params, index, v, c) for c in chunks], np.float64)

  def log_p(site_index: int, v) -> float:
    return float(np.average(batches(site_index, v), weights=log_p.weights))

  log_p.batches, log_p.weights = batches, [len(c) for c in chunks]
  log_p.memory = programs[chunks[0].shape].memory_analysis()
  return log_p


def steering_effects(log_p, site_index: int, scale: float, vectors: dict, clean: np.ndarray):
  """``({kind: Δ log p}, {kind: its standard error})``: each vector's effect on B's mean log p of
  the steering token at the site, against the unsteered ``clean`` per held-out batch: the
  batch-size-weighted mean of the per-batch differences, and their spread over ``√batches`` (None
  with one batch)."""
  effect, se = {}, {}
  for kind, v in vectors.items():
    diff = log_p.batches(site_index, scale * v) - clean
    effect[kind] = float(np.average(diff, weights=log_p.weights))
    se[kind] = float(np.std(diff, ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else None
  return effect, se


report = report_lib.report
STUDY = frame.Study(NAME, Config, science, report, required=REQUIRED, verdict=report_lib.verdict)
run = STUDY.run
