"""The developmental landscape of a language model: the LLC of every checkpoint of a training run,
whole and per layer (or per head), beside behavioural probes on the same checkpoints.

``--checkpoints`` is a folder of checkpoint directories, one per step (``train_lm``'s
``hf/seed<i>/``, or a model's revisions as Pythia names them, ``step1000/``; any Hugging Face
family the loader reads). Checkpoints with identical weights (:mod:`~mechjax.models.pretrained.
revisions`) are reported and estimated once. For each restriction, one batched SGLD program
(:func:`mechjax.slt.estimate_llc_batch`) samples every checkpoint's localized posterior at once
(Lau et al. 2023, arXiv 2308.12108; the refined LLCs of Wang et al. 2024, arXiv 2410.02984); the
probes (:mod:`~mechjax.studies.language.probes`) are the per-head prefix-matching scores, the loss
drop on repeated random sequences, and the in-context-learning score.

The posterior is tempered at ``nβ = n / ln n`` with ``n`` the windows' predicted tokens
(``--nbeta`` replaces it): the loss is a mean over tokens, so a token is a sample.

Stages are read off as in Hoogland et al. 2024 (arXiv 2402.02364): where the LLC's slope against
log step changes sign. A turn is *resolved* when two slopes of opposite sign, each differing from
zero by more than two standard errors (the LLC's over chains, propagated), follow one another with
only insignificant slopes between them; its step is the highest (or lowest) checkpoint between
them, bracketed by the first slope's start and the second's end (:func:`critical_points`).

    python -m experiments.llc_over_training --checkpoints=runs/train_lm/hf/seed0 \\
        --corpus=runs/train_lm/corpus/train.tokens
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

from mechjax import config
from mechjax import rng
from mechjax import slt
from mechjax.data import tokens as tokens_lib
from mechjax.models import pretrained
from mechjax.models.pretrained import revisions as revisions_lib
from mechjax.slt import progress
from mechjax.slt.settings import SGLDSettings
from mechjax.studies import frame
from mechjax.studies.language import llc_over_training_report as report_lib
from mechjax.studies.language import probes
from mechjax.studies.llc import pretrained_llc

NAME = "llc_over_training"
REQUIRED = {
  "checkpoints": "a folder of checkpoint directories, one per step (python -m experiments.train_lm "
  "writes runs/train_lm/hf/seed0/)",
  "corpus": "the token file the model trained on (runs/train_lm/corpus/train.tokens)",
}
RESTRICTIONS = ("layers", "heads", "none")


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  checkpoints: str = config.setting("", "The folder of checkpoint directories, one per step.")
  corpus: str = config.setting("", "The token file the SGLD windows come from (the training data).")
  text: str = config.setting(
    "",
    "The token file of the in-context-learning score's windows (held-out text); empty: --corpus.",
  )
  seq_len: int = config.setting(64, "Tokens per window.", check=config.at_least(8))
  num_windows: int = config.setting(
    1024, "Windows the posterior is tempered on (n).", check=config.at_least(2)
  )
  restrict: str = config.setting(
    "layers",
    "Refined LLCs besides the whole model: layers (each block's attention and MLP), heads (every "
    "head and MLP), or none.",
    check=config.one_of(RESTRICTIONS),
  )
  probe_sequences: int = config.setting(
    64,
    "Repeated random sequences (and text windows) the probes average over.",
    check=config.at_least(16),
  )
  seed: int = config.setting(
    0, "Seed of the windows, the probes and the chains.", check=config.at_least(0)
  )
  allow_other_tokenizer: bool = config.setting(
    False, "Sample on a corpus whose recorded tokenizer differs from the checkpoints'."
  )
  sgld: SGLDSettings = config.group(
    SGLDSettings(
      step_size=1e-4,
      localization=1000.0,
      batch_size=8,
      num_chains=4,
      num_draws=100,
      num_burnin=20,
    ),
    help="nbeta unset: n / ln n with n the predicted tokens, num_windows × (seq_len − 1), since "
    "the loss is a mean over tokens.",
  )


def nbeta(cfg: Config) -> float:
  """``--nbeta``, or ``n / ln n`` with ``n`` the predicted tokens of the windows: the loss is a
  mean over tokens, so a token is a sample (Watanabe's ``β = 1 / ln n`` at ``n`` samples)."""
  if cfg.sgld.nbeta is not None:
    return cfg.sgld.nbeta
  n = cfg.num_windows * (cfg.seq_len - 1)
  return n / math.log(n)


def layer_spec(model) -> str:
  """The ``restriction_boxes`` spec of each block (its attention and MLP), comma-separated."""
  return ",".join(f"l{l} attn+l{l} mlp" for l in range(model.arch.num_layers))


def load_points(revs: list) -> tuple:
  """``(model, params_P, steps)``: the first checkpoint of each distinct weight hash, stacked;
  refuses checkpoints of different architectures, by name."""
  seen, points = set(), []
  for r in revs:
    if r.weights not in seen:
      seen.add(r.weights)
      points.append(r)
  model, first = pretrained.load(points[0].path)
  stacked = [first]
  for r in points[1:]:
    m, p = pretrained.load(r.path)
    if m.arch != model.arch:
      raise pretrained.CheckpointError(
        f"{r.path} is another architecture than {points[0].path}; a landscape needs one model"
      )
    stacked.append(p)
  params_P = jax.tree.map(lambda *a: np.stack(a), *stacked)
  return model, params_P, [r.step for r in points]


def critical_points(steps, llc, se) -> list[dict]:
  """Where the LLC turns against ``log(step)`` (module docstring). Each segment between neighbouring
  checkpoints has a slope and its standard error; a segment is *significant* when its slope differs
  from zero by more than two. A turn is resolved where two consecutive significant segments (any
  insignificant ones between them) have opposite signs: its step is the checkpoint of the highest
  (a peak) or lowest (a trough) LLC between them, bracketed by the first significant segment's
  start and the second's end. A sign change of neighbouring slopes that no resolved turn brackets
  is listed as unresolved, at the checkpoint between them. Returns ``{"step", "from", "to",
  "kind", "resolved"}`` in step order. Step 0 has no logarithm and is left out, as are checkpoints
  whose LLC is negative beyond two standard errors (not at a minimum: a diagnostic, not a
  learning coefficient)."""
  steps, llc, se = np.asarray(steps, float), np.asarray(llc, float), np.asarray(se, float)
  se = np.nan_to_num(se, nan=np.inf)
  keep = (steps > 0) & ~(llc < -2 * se)
  steps, llc, se = steps[keep], llc[keep], se[keep]
  if len(steps) < 3:
    return []
  dx = np.diff(np.log(steps))
  slope = np.diff(llc) / dx
  significant = np.abs(slope) > 2 * np.sqrt(se[1:] ** 2 + se[:-1] ** 2) / dx
  out, previous = [], None
  for j in np.flatnonzero(significant):
    if previous is not None and np.sign(slope[j]) != np.sign(slope[previous]):
      between = np.arange(previous + 1, j + 1)  # the checkpoints after the rise, up to the fall
      peak = slope[previous] > 0
      k = between[np.argmax(llc[between]) if peak else np.argmin(llc[between])]
      out.append(
        {
          "step": int(steps[k]),
          "from": int(steps[previous]),
          "to": int(steps[j + 1]),
          "kind": "peak" if peak else "trough",
          "resolved": True,
        }
      )
    previous = j
  for k in range(1, len(slope)):
    if slope[k - 1] * slope[k] < 0 and not any(c["from"] < steps[k] < c["to"] for c in out):
      kind = "peak" if slope[k - 1] > 0 else "trough"
      out.append(
        {
          "step": int(steps[k]),
          "from": int(steps[k - 1]),
          "to": int(steps[k + 1]),
          "kind": kind,
          "resolved": False,
        }
      )
  return sorted(out, key=lambda c: c["step"])


def estimate(cfg: Config, ctx: frame.Context, model, params_P, windows, named: dict) -> dict:
  """Each restriction's LLC at every point, one batched program (and one saved stage) each, with a
  line as each starts and ends (the ETA from the restrictions done so far; a restricted chain is
  cheaper than a whole one, so it errs long): ``{name: {"llc": (P,), "llc_per_chain": (P, C),
  "rhat", "ess", "init_loss": (P,), "nbeta"}}``."""
  loss_fn = jax.jit(lambda p, w: pretrained.next_token_losses(model, p, w).mean())
  points = jax.tree.leaves(params_P)[0].shape[0]
  s = cfg.sgld
  out, spent = {}, []
  for i, (name, restriction) in enumerate(named.items()):
    stage = f"llc-{name.replace(' ', '_').replace('+', '-')}"

    def compute(restriction=restriction):
      r = slt.estimate_llc_batch(
        loss_fn,
        params_P,
        windows,
        key=rng.key(cfg.seed, "llc-over-training"),
        settings=cfg.sgld,
        param_mask=restriction,
        nbeta=nbeta(cfg),
      )
      d = r.diagnostics
      return {
        "llc": np.asarray(r.llc_mean),
        "llc_per_chain": np.asarray(r.llc_per_chain),
        "rhat": np.asarray(d["rhat"]),
        "ess": np.asarray(d["ess_bulk"]),
        "init_loss": np.asarray(r.init_loss),
        "nbeta": np.asarray(d["nbeta"]),
      }

    done = ctx.saved(stage, "npz")
    if not done:
      ctx.log(
        f"  restriction {i + 1}/{len(named)} ({name}): {points} checkpoints × {s.num_chains} "
        f"chains × {s.num_steps} steps in one program"
      )
    start = time.perf_counter()
    out[name] = ctx.stage(stage, compute, fmt="npz")
    if not done:
      spent.append(time.perf_counter() - start)
      left = np.mean(spent) * (len(named) - i - 1)
      ctx.log(
        f"  restriction {i + 1}/{len(named)} ({name}) done in {progress.duration(spent[-1])}; "
        f"ETA of the LLCs {progress.duration(left)}"
      )
  return out


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Finds the checkpoints and their duplicates, prints the plan, estimates each restriction's
  LLC at every distinct checkpoint, measures the probes, and finds the LLC's critical points."""
  revs, duplicates = revisions_lib.revisions(cfg.checkpoints)
  model, params_P, steps = load_points(revs)
  if cfg.seq_len > model.arch.max_positions:
    raise config.ConfigError(
      ["seq_len"], f"must be at most {model.arch.max_positions}, the model's position limit"
    )
  ids = tokens_lib.read_tokens(cfg.corpus)
  tokens_lib.check_tokenizer(ids, revs[0].path, allow_mismatch=cfg.allow_other_tokenizer)
  text_ids = tokens_lib.read_tokens(cfg.text) if cfg.text else ids
  windows = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.num_windows, cfg.seed, "sgld-windows")
  first = jax.tree.map(lambda a: a[0], params_P)
  named = {"all": None}
  if cfg.restrict != "none":
    spec = layer_spec(model) if cfg.restrict == "layers" else ""
    named.update(
      (k, v) for k, v in pretrained_llc.restrictions(spec, model, first).items() if k != "all"
    )
  ctx.log(plan_line(cfg, revs, duplicates, steps, named))
  llcs = estimate(cfg, ctx, model, params_P, windows, named)
  half = cfg.seq_len // 2
  seqs = probes.repeated_sequences(model.arch.vocab_size, half, cfg.probe_sequences, cfg.seed)
  text = tokens_lib.sample_windows(
    text_ids, cfg.seq_len, cfg.probe_sequences, cfg.seed, "probe-text"
  )
  found = ctx.stage("probes", lambda: probes.measure(model, params_P, seqs, text), fmt="npz")
  summary = report_lib.summarise(cfg, model, params_P, revs, duplicates, steps, llcs, found)
  summary["critical_points"] = critical_points(
    steps, summary["llc"]["all"]["llc"], summary["llc"]["all"]["se"]
  )
  return frame.Outputs(
    summary,
    figures=lambda folder: [report_lib.plot(summary, f"{folder}/landscape.png")],
    captions={"landscape.png": report_lib.CAPTION},
  )


def plan_line(cfg: Config, revs, duplicates, steps, named) -> str:
  s = cfg.sgld
  dup = sum(len(v) - 1 for v in duplicates.values())
  return (
    f"plan: {len(revs)} checkpoints, steps {revs[0].step} to {revs[-1].step}"
    + (f" ({dup} with the weights of another, estimated once)" if dup else "")
    + f"; {len(named)} restrictions ({', '.join(named)}), each one program over the "
    f"{len(steps)} distinct checkpoints; {s.num_chains} chains × ({s.num_burnin} burn-in + "
    f"{s.num_draws} draws) of {s.batch_size} windows of {cfg.seq_len} tokens, ε = {s.step_size:g}, "
    f"γ = {s.localization:g}, nβ = {nbeta(cfg):,.0f} ({cfg.num_windows} windows); then the probes"
  )


STUDY = frame.Study(
  NAME, Config, science, report_lib.report, required=REQUIRED, verdict=report_lib.verdict
)
run = STUDY.run
