"""Polymorphism as rotation: do independently trained transformers differ by a Haar-random rotation?

The claim under test (McCann 2026, arXiv:2605.24577): seeds of one architecture compute the same
function in residual bases related by a rotation ``x_j ≈ x_i R``, the rotation is Haar-random, and
one orthogonal Procrustes fit transfers SAE dictionaries and steering vectors between seeds, while
the usual SAE-universality metric (max cosine between decoder rows) says the dictionaries already
match.

For each optimizer, ``num_seeds`` Dyck-3 transformers are trained together with the core (next
token, nesting depth and prefix validity, one linear head each). Then, at every residual site and
for every ordered pair of seeds (source ``i``, target ``j``), ``s · x_i R ≈ x_j`` is fitted on a
*fit* batch and everything is measured on a *held-out* batch of fresh sequences (the same tokens
through every seed). The scale is part of the symmetry: every reader of a pre-norm stream sits
behind an RMSNorm, so multiplying all writers by ``s`` leaves the function unchanged
(:func:`mechjax.models.transformer.rotate_residual`); ``R`` does not depend on it. Measured: the
map's explained variance and how far the data determine ``R``
(:func:`mechjax.align.transfer.measure_alignment`), CKA, the Procrustes distance and mean CCA; a
TopK SAE per seed and site moved through the map (its within-seed EV is the ceiling) and the
decoder-row max-cosine score; whether the activations have a privileged basis and whether ``R``
looks Haar-random or like a signed permutation (:mod:`mechjax.align.haar`; where ``XᵀY`` is
rank-deficient, ``R`` is arbitrary on its null space and its Haar test is not reported); and the
transfer of the valid-minus-invalid steering vector by its effect on the target's validity logit
margin (:func:`mechjax.align.transfer.steering_transfer`).

Adam updates are not rotation-equivariant, SGD (with momentum) updates are, so the answer can depend
on the optimizer; ``optimizers=("adam", "sgd")`` runs both. The measurements are in
:mod:`mechjax.studies.rotation.polymorphism_analysis`, the table and figures in
:mod:`mechjax.studies.rotation.polymorphism_report`.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax.config import ConfigError
from mechjax.data import dyck
from mechjax.models.transformer import Transformer
from mechjax.studies import frame
from mechjax.studies.rotation import polymorphism_analysis
from mechjax.studies.rotation import polymorphism_report as report_lib
from mechjax.train import loop
from mechjax.train.metrics import finite_mean

NAME = "polymorphism"
OPTIMIZERS = ("adam", "sgd")
HEADS = ("token", "depth", "valid")


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=1500, num_seeds=4, log_every=250, checkpoint_every=500)
  )
  optimizers: tuple[str, ...] = config.setting(
    OPTIMIZERS,
    "Optimizers to train and compare: adam, sgd, or both.",
    flag="optimizer",
    choices=OPTIMIZERS,
    check=config.all_of(config.non_empty, config.distinct),
  )
  # Data: Dyck-k with corrupted sequences, so prefix validity is a non-trivial target.
  k: int = config.setting(3, "Bracket types of the Dyck-k language.", check=config.at_least(1))
  length: int = config.setting(32, "Sequence length (BOS + brackets).", check=config.at_least(2))
  max_depth: int = config.setting(8, "Largest nesting depth.", check=config.at_least(1))
  p_corrupt: float = config.setting(
    0.5,
    "Probability that a sequence has one bracket replaced (validity target).",
    check=config.within(0, 1, low_open=False, high_open=False),
  )
  # Model.
  d_model: int = config.setting(64, "Residual-stream width.", check=config.at_least(2))
  num_layers: int = config.setting(2, "Transformer blocks.", check=config.at_least(1))
  num_heads: int = config.setting(4, "Attention heads per block.", check=config.at_least(1))
  d_mlp: int = config.setting(256, "MLP hidden width.", check=config.at_least(1))
  attn_only: bool = config.setting(False, "Drop the MLPs.")
  # Training.
  batch_size: int = config.setting(64, "Sequences per optimizer step.", check=config.at_least(1))
  adam_learning_rate: float = config.setting(3e-3, "Adam step size.", check=config.positive)
  sgd_learning_rate: float = config.setting(0.05, "SGD step size.", check=config.positive)
  sgd_momentum: float = config.setting(
    0.9, "SGD (heavy-ball) momentum; 0 for plain SGD.", check=config.within(0, 1, low_open=False)
  )
  # Analysis.
  fit_sequences: int = config.setting(
    256,
    "Sequences whose activations fit R, the SAEs and the steering vectors.",
    check=config.at_least(2),
  )
  eval_sequences: int = config.setting(
    256, "Held-out sequences on which everything is measured.", check=config.at_least(1)
  )
  sae_latents: int = config.setting(256, "SAE dictionary size.", check=config.at_least(1))
  sae_top_k: int = config.setting(8, "Active latents per TopK SAE input.", check=config.at_least(1))
  sae_steps: int = config.setting(1000, "SAE training steps.", check=config.at_least(1))
  sae_batch_size: int = config.setting(256, "Activations per SAE step.", check=config.at_least(1))
  sae_learning_rate: float = config.setting(1e-3, "SAE Adam step size.", check=config.positive)
  num_null: int = config.setting(
    199,
    "Haar samples in each test's Monte-Carlo null (>= 59, so that a p-value "
    "combined over the three basis statistics can reach 0.05).",
    check=config.at_least(59),
  )
  steer_scale: float = config.setting(
    1.0, "Multiple of the difference-of-means vector added when steering.", check=config.positive
  )

  def validate(self):
    if self.run.num_seeds < 2:
      raise ConfigError(
        "run.num_seeds", "must be >= 2: rotations are fitted between seeds", self.run.num_seeds
      )
    if self.d_model % self.num_heads:
      raise ConfigError(
        ("d_model", "num_heads"), f"num_heads={self.num_heads} must divide d_model={self.d_model}"
      )
    if self.sae_top_k > self.sae_latents:
      raise ConfigError(
        ("sae_top_k", "sae_latents"),
        f"sae_top_k={self.sae_top_k} must be <= sae_latents={self.sae_latents}",
      )


def model_of(cfg: Config) -> Transformer:
  heads = (("token", dyck.vocab_size(cfg.k)), ("depth", cfg.max_depth + 1), ("valid", 2))
  return Transformer(
    vocab_size=dyck.vocab_size(cfg.k),
    heads=heads,
    d_model=cfg.d_model,
    num_layers=cfg.num_layers,
    num_heads=cfg.num_heads,
    d_mlp=cfg.d_mlp,
    max_len=cfg.length,
    attn_only=cfg.attn_only,
  )


def sample(cfg: Config, key: jax.Array, n: int) -> dict[str, jax.Array]:
  return dyck.sample_dyck(
    key, n, length=cfg.length, k=cfg.k, max_depth=cfg.max_depth, p_corrupt=cfg.p_corrupt
  )


def make_problem(cfg: Config) -> loop.Problem:
  model = model_of(cfg)

  def loss(params, key):
    batch = sample(cfg, key, cfg.batch_size)
    m = dyck.losses(model.apply(params, batch["tokens"]), batch)
    return sum(m[f"{h}_loss"] for h in HEADS), {k: v for k, v in m.items() if k.endswith("_acc")}

  def evaluate(params, key):
    batch = sample(cfg, key, 512)
    m = dyck.losses(model.apply(params, batch["tokens"]), batch)
    return {f"test_{k}": v for k, v in m.items()}

  init = lambda key: model.init(key, jnp.zeros((1, cfg.length), jnp.int32))
  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def make_optimizer(cfg: Config, name: str) -> optax.GradientTransformation:
  """Adam, or SGD with heavy-ball momentum, both on the same schedule: linear warm-up over the first
  5% of the steps, then cosine decay to 1% of the peak, so every seed ends at a settled point."""
  if name not in OPTIMIZERS:
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {name!r}")
  peak = cfg.adam_learning_rate if name == "adam" else cfg.sgd_learning_rate
  warmup, steps = max(1, cfg.run.steps // 20), cfg.run.steps
  schedule = optax.warmup_cosine_decay_schedule(0.0, peak, warmup, steps, end_value=0.01 * peak)
  if name == "adam":
    return optax.adam(schedule)
  return optax.sgd(schedule, momentum=cfg.sgd_momentum or None)


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains every optimizer's seeds (resuming interrupted runs), analyses them (each optimizer's
  analysis is a cached stage, ``analysis_<optimizer>.json``), and writes ``summary.json``,
  ``pairs.json`` (every pair's numbers), ``rotations.npz`` (every fitted ``R``), ``table.md`` and
  figures."""
  model = model_of(cfg)
  summary = {
    "sites": polymorphism_analysis.analysis_sites(model),
    "optimizers": {},
    "d_model": cfg.d_model,
  }
  histories, details, all_rotations = {}, {}, {}
  ctx.plan(len(cfg.optimizers), "optimizer")
  for name in cfg.optimizers:
    result = ctx.train(
      f"transformer_{name}", make_problem(cfg), make_optimizer(cfg, name), summarize=_progress_text
    )
    histories[name] = result.history

    done = ctx.stage(  # {"sites": {site: {"seeds", "pairs", "summary"}}, "rotations"}
      f"analysis_{name}",
      lambda: polymorphism_analysis.analyze(
        cfg, model, functools.partial(sample, cfg), result.state["params"], progress=ctx.progress
      ),
    )
    details[name] = {
      site: {"seeds": a["seeds"], "pairs": a["pairs"]} for site, a in done["sites"].items()
    }
    all_rotations.update(
      {f"{name}/{k}": np.asarray(v, np.float32) for k, v in done["rotations"].items()}
    )
    sites = {site: a["summary"] for site, a in done["sites"].items()}
    ranks = [m["min_cross_covariance_rank"] for m in sites.values()]
    agreement = [m["rotation_split_half_agreement"] for m in sites.values()]
    summary["optimizers"][name] = {
      "final_test_acc": {h: np.mean(result.history[-1][f"test_{h}_acc"]) for h in HEADS},
      "privileged_basis_seeds": finite_mean([m["privileged_basis_seeds"] for m in sites.values()]),
      "haar_applicable_sites": [site for site, m in sites.items() if m["haar_applicable"]],
      "haar_basis_rejections": finite_mean([m["haar_basis_rejections"] for m in sites.values()]),
      "min_cross_covariance_rank": min(ranks),
      "max_cross_covariance_rank": max(ranks),
      "split_half_agreement_range": [min(agreement), max(agreement)],
      "sites": sites,
    }
  return frame.Outputs(
    summary,
    figures=lambda folder: report_lib.plot_all(cfg, summary, histories, all_rotations, folder),
    files={
      "table.md": report_lib.tables_markdown(summary),
      "rotations.npz": all_rotations,
      "pairs.json": details,
    },
    captions=report_lib.captions(cfg),
  )


def report(summary: dict) -> list[str]:
  """Per optimizer: test accuracy, how often a basis is privileged and R rejects Haar, and the
  per-site table."""
  lines = []
  for name, s in summary["optimizers"].items():
    acc = ", ".join(f"{h} {a:.3f}" for h, a in s["final_test_acc"].items())
    lo, hi = s["split_half_agreement_range"]
    lines += [
      f"\n{name}: test accuracy {acc}",
      "  seeds x sites with a privileged basis (kurtosis test, p <= 0.05): "
      f"{s['privileged_basis_seeds']:.2f}",
      f"  seed pairs whose R rejects Haar on basis statistics: {s['haar_basis_rejections']:.2f} "
      f"(rank of XᵀY {s['min_cross_covariance_rank']}-{s['max_cross_covariance_rank']} of "
      f"{summary.get('d_model', '?')}; R from two halves of the fit batch agree {lo:.2f}-{hi:.2f}, "
      "1 = identical)",
      report_lib.table_markdown(s),
    ]
  return lines


def _progress_text(row: dict) -> str:
  acc = ", ".join(f"{h} {np.mean(row[f'test_{h}_acc']):.3f}" for h in HEADS)
  return f"loss {np.mean(row['train_loss']):.3f} | test acc: {acc}"


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
