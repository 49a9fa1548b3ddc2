"""Patterning on parenthesis balancing: which of two algorithms a transformer learns, and whether a
data re-weighting computed from susceptibilities (Wang & Murfet 2026, arXiv:2601.13548) changes it.

The task (:mod:`mechjax.data.parens`): classify strings of ``(`` and ``)`` as balanced. Training
holds balanced strings and strings with unequal counts, so two algorithms are perfect on it:
**counts** (equal numbers of each) and **prefix** (equal numbers and no negative prefix). Probes are
equal-count strings with a negative prefix that start with ``(`` and end with ``)`` (so neither end
gives the answer away); counts calls them balanced and prefix does not. A trained model's **counts
rate**, the fraction of probes it calls balanced, tells which algorithm it runs; a seed is counted
as one algorithm when it is perfect in distribution (held-out accuracy ≥ ``perfect_accuracy``) and
its counts rate is above (counts) or below (prefix) one half.

The study:

1. **Reference solutions.** One model per algorithm, trained on the training set plus
   ``disagreement`` strings labelled by that algorithm, so that each is forced. Both are perfect on
   the training set; the LLC of each is estimated on the training set (Lau et al. 2023,
   arXiv:2308.12108).
2. **The unweighted run:** ``num_seeds`` seeds on the training distribution.
3. **Susceptibilities** at the unweighted seed 0's checkpoint ``chi_step``: SGLD on the localized
   posterior (:func:`mechjax.slt.susceptibility.estimate_susceptibilities`) with per-sample probes
   drawn from every *group* of training strings (grouped by label, first token, depth of the most
   negative prefix and count difference; :func:`groups`), and two observables: ``φ_counts``, the
   probe loss under counts labels (low for a counts model), and ``φ_test``, the held-out
   in-distribution loss.
4. **Patterning.** The group responses ``J_g = dE[φ]/dh`` (exact averages of the per-probe columns,
   :func:`mechjax.slt.patterning.group_response`) are inverted on the simplex
   (:func:`mechjax.slt.patterning.patterning_weights`), once toward each algorithm ``A``, for
   ``Δφ_test = 0`` (keep the in-distribution fit) and a change of ``φ_counts`` that is, with
   ``target="gap"`` (default), the whole distance between the two reference solutions,
   ``∓(φ_counts(w_prefix) − φ_counts(w_counts))``, in A's direction: the same size both ways. With
   ``target="reference"`` it is ``φ_counts(w_A) − E[φ_counts]``, which moves the posterior mean onto
   reference ``A``; from a posterior that already sits near one solution this asks for almost
   nothing in that direction.
5. **Retraining** ``num_seeds`` seeds from scratch on each re-weighted distribution, with the
   unweighted run's seed keys, and counting which algorithm each seed learns.

Outputs in the workdir: ``metrics.jsonl`` (every run), ``patterning.json`` (susceptibilities, group
responses and weights; reused on resume), ``summary.json`` and ``figures/patterning_parens.png``.
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.config import ConfigError
from mechjax.data import parens
from mechjax.models.transformer import Transformer
from mechjax.slt import llc as llc_lib
from mechjax.slt import patterning
from mechjax.slt import sgld as sgld_lib
from mechjax.slt import susceptibility as sus
from mechjax.studies import frame
from mechjax.train import loop

NAME = "patterning_parens"
CPU_CORES_AS_DEVICES = True  # the SGLD chains run over every core
CONDITIONS = ("unweighted", "toward_counts", "toward_prefix")
TARGETS = ("gap", "reference")


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=1000, num_seeds=8, log_every=50, checkpoint_every=250)
  )
  length: int = config.setting(
    20, "String length (even).", check=config.all_of(config.at_least(6), config.even)
  )
  n: int = config.setting(
    4000,
    "Training strings; nβ = n / ln n for the susceptibilities and LLCs.",
    check=config.at_least(2),
  )
  balanced_fraction: float = config.setting(
    0.5, "Fraction of balanced training strings.", check=config.within(0, 1)
  )
  num_probes: int = config.setting(
    512,
    "Probe strings (equal counts, a negative prefix, starting ( and ending )).",
    check=config.at_least(1),
  )
  num_test: int = config.setting(
    1000,
    "Held-out in-distribution strings (the 'perfect' check and φ_test).",
    check=config.at_least(1),
  )
  disagreement: int = config.setting(
    1000,
    "Equal-count strings with a negative prefix added to force each reference solution.",
    check=config.at_least(1),
  )
  d_model: int = config.setting(32, "Transformer width.", check=config.at_least(1))
  num_layers: int = config.setting(2, "Transformer layers.", check=config.at_least(1))
  num_heads: int = config.setting(2, "Attention heads per layer.", check=config.at_least(1))
  d_mlp: int = config.setting(64, "MLP width.", check=config.at_least(1))
  learning_rate: float = config.setting(1e-3, "Adam step size.", check=config.positive)
  batch_size: int = config.setting(64, "Training minibatch size.", check=config.at_least(1))
  chi_step: int = config.setting(
    250,
    "Checkpoint of the unweighted seed 0 at which susceptibilities are estimated "
    "(a multiple of --checkpoint_every, at most --steps).",
    check=config.at_least(1),
  )
  per_group: int = config.setting(
    64, "Training probes per group of strings for the susceptibilities.", check=config.at_least(1)
  )
  sgld: sgld_lib.SGLDSettings = sgld_lib.study_group(
    "SGLD for the susceptibilities (and, with --llc_draws draws, the reference solutions' LLCs).",
    num_draws=500,
    num_burnin=100,
  )
  eval_size: int = config.setting(
    512,
    "Training samples in the fixed subset that defines L(w) for the susceptibilities.",
    check=config.at_least(1),
  )
  llc_draws: int = config.setting(
    1000, "SGLD draws per chain for the reference solutions' LLCs.", check=config.at_least(1)
  )
  ridge: float = config.setting(
    0.0, "Ridge ρ of the patterning inverse.", check=config.non_negative
  )
  target: str = config.setting(
    "gap",
    "Size of the φ_counts target: 'gap' moves it by the distance between the "
    "reference solutions (same size both ways); 'reference' moves the posterior mean onto "
    "each reference.",
    choices=TARGETS,
  )
  perfect_accuracy: float = config.setting(
    0.99,
    "Held-out accuracy at which a seed counts as perfect in distribution.",
    check=config.within(0.5, 1.0, high_open=False),
  )

  def validate(self):
    self.run.check_checkpoint("chi_step", self.chi_step)
    if max(self.batch_size, self.sgld.batch_size) > self.n:
      raise ConfigError(
        ("batch_size", "sgld.batch_size", "n"),
        f"batch sizes ({self.batch_size}, {self.sgld.batch_size}) must not exceed n={self.n}",
      )

  @property
  def nbeta(self) -> float:
    return sgld_lib.default_nbeta(self.n)


def make_data(cfg: Config) -> dict[str, dict[str, np.ndarray]]:
  """Training set, held-out test set (same distribution), probes and the disagreement pool; each
  from its own stream of ``--seed``."""
  seed = cfg.run.seed
  train = parens.make_dataset(
    rng.numpy(seed, "train-strings"), cfg.n, cfg.length, cfg.balanced_fraction
  )
  test = parens.make_dataset(
    rng.numpy(seed, "test-strings"), cfg.num_test, cfg.length, cfg.balanced_fraction
  )
  probe_rng = rng.numpy(seed, "probe-strings")
  pool = parens.sample_probes(probe_rng, 16 * cfg.num_probes, cfg.length)
  inner = pool[(pool[:, 0] == parens.OPEN) & (pool[:, -1] == parens.CLOSE)]
  if len(inner) < cfg.num_probes:
    raise ValueError(
      f"only {len(inner)} probes start with ( and end with ); lower num_probes or raise length"
    )
  disagree = parens.sample_probes(probe_rng, cfg.disagreement, cfg.length)
  return {
    "train": train,
    "test": test,
    "probes": {"tokens": inner[: cfg.num_probes]},
    "disagreement": {"tokens": disagree},
  }


def groups(tokens: np.ndarray) -> tuple[np.ndarray, list[str]]:
  """Each training string's group: (label, first token, depth of its most negative prefix clipped at
  3, |count difference| // 2 clipped at 3). Returns the group ids and one name per group."""
  f = parens.features(tokens)
  lab = parens.label(tokens, "prefix")
  keys = np.stack(
    [
      lab,
      f["first_close"],
      np.minimum(-f["min_prefix"], 3),
      np.minimum(np.abs(f["count_difference"]) // 2, 3),
    ],
    1,
  )
  uniq, ids = np.unique(keys, axis=0, return_inverse=True)
  names = [
    f"{'bal' if b else 'uneq'} {')' if c else '('}… min{-m} Δ{2 * d}" + ("+" if d == 3 else "")
    for b, c, m, d in uniq
  ]
  return ids.reshape(-1), names


class Model:
  """The classifier: a transformer read out at the last position (``label`` head, 2 classes)."""

  def __init__(self, cfg: Config):
    self.net = Transformer(
      vocab_size=2,
      heads=(("label", 2),),
      d_model=cfg.d_model,
      num_layers=cfg.num_layers,
      num_heads=cfg.num_heads,
      d_mlp=cfg.d_mlp,
      max_len=cfg.length,
    )
    self.length = cfg.length

  def init(self, key):
    return self.net.init(key, jnp.zeros((1, self.length), jnp.int32))

  def logits(self, params, tokens):
    return self.net.apply(params, tokens)["label"][:, -1]

  def per_sample_loss(self, params, batch):
    return optax.softmax_cross_entropy_with_integer_labels(
      self.logits(params, batch["tokens"]), batch["label"]
    )

  def counts_rate(self, params, tokens):
    return jnp.mean(jnp.argmax(self.logits(params, tokens), -1) == 1)

  def accuracy(self, params, batch):
    return jnp.mean(jnp.argmax(self.logits(params, batch["tokens"]), -1) == batch["label"])

  def probe_observables(self, params, od):
    """``(φ_counts, φ_test)``: the probe loss under counts labels and the held-out loss."""
    phi_counts = jnp.mean(
      self.per_sample_loss(params, {"tokens": od["probes"], "label": od["counts_labels"]})
    )
    return jnp.stack([phi_counts, jnp.mean(self.per_sample_loss(params, od["test"]))])


def _jnp(tree):
  return jax.tree.map(jnp.asarray, tree)


def make_evaluate(model: Model, data: dict):
  train, test, probes = (
    _jnp(data["train"]),
    _jnp(data["test"]),
    jnp.asarray(data["probes"]["tokens"]),
  )

  def evaluate(params, key):
    del key
    return {
      "counts_rate": model.counts_rate(params, probes),
      "test_accuracy": model.accuracy(params, test),
      "train_accuracy": model.accuracy(params, train),
    }

  return evaluate


def _train(cfg, model, data, weights, run, ctx, *, num_seeds, checkpoint_every):
  evaluate = make_evaluate(model, data)
  problem = patterning.weighted_problem(
    model.init, model.per_sample_loss, _jnp(data["train_like"]), weights, cfg.batch_size, evaluate
  )
  summarize = lambda row: (
    f"counts rate {np.round(row['counts_rate'], 2).tolist()} | test acc "
    f"{np.round(np.min(row['test_accuracy']), 3)} (worst seed)"
  )
  return ctx.train(
    run,
    problem,
    optax.adam(cfg.learning_rate),
    keys=loop.seed_keys(cfg.run.seed, num_seeds),
    checkpoint_every=checkpoint_every,
    summarize=summarize,
    keep_checkpoints=None,
  )


def reference_solutions(cfg: Config, model: Model, data: dict, ctx: frame.Context) -> dict:
  """Trains one model per algorithm on training + disagreement strings labelled by it, and estimates
  each one's LLC on the training set alone (where both are perfect)."""
  out = {}
  train_j = _jnp(data["train"])
  for algorithm in parens.ALGORITHMS:
    extra = data["disagreement"]["tokens"]
    forced = {
      "tokens": np.concatenate([data["train"]["tokens"], extra]),
      "label": np.concatenate([data["train"]["label"], parens.label(extra, algorithm)]),
    }
    result = _train(
      cfg,
      model,
      {**data, "train_like": forced},
      np.ones(len(forced["label"])),
      f"reference_{algorithm}",
      ctx,
      num_seeds=1,
      checkpoint_every=cfg.run.steps,
    )
    params = jax.tree.map(lambda a: a[0], result.state["params"])
    est = llc_lib.estimate_llc(
      sgld_lib.MeanLoss(model.per_sample_loss),
      params,
      train_j,
      key=rng.key(cfg.run.seed, "reference-llc"),
      settings=dataclasses.replace(cfg.sgld, num_draws=cfg.llc_draws),
    )
    probes = jnp.asarray(data["probes"]["tokens"])
    out[algorithm] = {
      "params": params,
      "llc_mean": est.llc_mean,
      "llc_sd_over_chains": float(np.std(est.llc_per_chain)),
      "train_accuracy": float(model.accuracy(params, train_j)),
      "test_accuracy": float(model.accuracy(params, _jnp(data["test"]))),
      "counts_rate": float(model.counts_rate(params, probes)),
      "phi_counts": float(
        jnp.mean(
          model.per_sample_loss(
            params, {"tokens": probes, "label": jnp.ones(len(probes), jnp.int32)}
          )
        )
      ),
    }
  return out


def compute_patterning(cfg: Config, model: Model, data: dict, w_star, references: dict) -> dict:
  """Susceptibilities at ``w_star`` over group-stratified training probes, group responses, and the
  simplex re-weighting toward each reference solution."""
  ids, names = groups(data["train"]["tokens"])
  num_groups = len(names)
  choice = rng.numpy(cfg.run.seed, "probe-choice")
  chosen = np.concatenate(
    [choice.permutation(np.nonzero(ids == g)[0])[: cfg.per_group] for g in range(num_groups)]
  )
  probe_data = _jnp({k: v[chosen] for k, v in data["train"].items()})
  probes = jnp.asarray(data["probes"]["tokens"])
  test = _jnp(data["test"])
  counts_labels = jnp.ones(len(probes), jnp.int32)

  t0 = time.perf_counter()
  res = sus.estimate_susceptibilities(
    model.per_sample_loss,
    w_star,
    _jnp(data["train"]),
    probe_data,
    key=rng.key(cfg.run.seed, "susceptibility"),
    settings=cfg.sgld,
    eval_size=cfg.eval_size,
    observable=model.probe_observables,
    observable_data={"probes": probes, "counts_labels": counts_labels, "test": test},
  )
  seconds = time.perf_counter() - t0
  response = res.response[0, 1:]  # (2 observables, probes): φ_counts, φ_test
  se = cfg.nbeta * res.standard_error[0, 1:]
  sub_ids = ids[chosen]
  j_g = patterning.group_response(response, sub_ids, num_groups)
  se_g = np.sqrt(
    patterning.group_response(se**2, sub_ids, num_groups)
    / np.bincount(sub_ids, minlength=num_groups)
  )
  base = np.bincount(ids, minlength=num_groups) / len(ids)
  mean_phi = res.observable_means[0, 1:]
  out = {
    "group_names": names,
    "group_sizes": np.bincount(ids, minlength=num_groups).tolist(),
    "base": base.tolist(),
    "group_response": j_g.tolist(),
    "group_response_se": se_g.tolist(),
    "llc_at_w_star": float(res.llc[0]),
    "posterior_mean_phi": mean_phi.tolist(),
    "seconds": seconds,
    "probes_per_group": np.bincount(sub_ids, minlength=num_groups).tolist(),
    "targets": {},
  }
  gap = references["prefix"]["phi_counts"] - references["counts"]["phi_counts"]
  for algorithm in parens.ALGORITHMS:
    if cfg.target == "gap":
      delta = gap if algorithm == "prefix" else -gap
    else:
      delta = references[algorithm]["phi_counts"] - mean_phi[0]
    target = np.array([delta, 0.0])
    dh = patterning.patterning_weights(j_g, target, ridge=cfg.ridge, simplex=True, base=base)
    out["targets"][algorithm] = {
      "target_delta": target.tolist(),
      "group_distribution": (base + dh).tolist(),
      "predicted_delta": (j_g @ dh).tolist(),
      "total_variation": float(0.5 * np.abs(dh).sum()),
    }
  return out


def _seed_outcomes(cfg: Config, row: dict) -> dict:
  rate = np.asarray(row["counts_rate"], float)
  perfect = np.asarray(row["test_accuracy"], float) >= cfg.perfect_accuracy
  learned = np.where(~perfect, "not perfect", np.where(rate > 0.5, "counts", "prefix"))
  return {
    "counts_rate": rate.tolist(),
    "test_accuracy": np.asarray(row["test_accuracy"], float).tolist(),
    "train_accuracy": np.asarray(row["train_accuracy"], float).tolist(),
    "learned": learned.tolist(),
    "selected": {a: int(np.sum(learned == a)) for a in (*parens.ALGORITHMS, "not perfect")},
    "counts_rate_mean": float(rate.mean()),
    "counts_rate_sd": float(rate.std(ddof=1)) if rate.size > 1 else 0.0,
  }


@frame.study
def run(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Runs every stage (each resumes from what the workdir holds) and writes summary.json and the
  figure."""
  t_start = time.perf_counter()
  model = Model(cfg)
  data = make_data(cfg)
  refs = reference_solutions(cfg, model, data, ctx)
  t_refs = time.perf_counter() - t_start
  unweighted = _train(
    cfg,
    model,
    {**data, "train_like": data["train"]},
    np.ones(cfg.n),
    "unweighted",
    ctx,
    num_seeds=cfg.run.num_seeds,
    checkpoint_every=cfg.run.checkpoint_every,
  )
  histories = {"unweighted": unweighted.history}

  def patterning_stage():
    w_star = jax.tree.map(lambda a: a[0], unweighted.params_at([cfg.chi_step])[cfg.chi_step])
    return compute_patterning(cfg, model, data, w_star, refs)

  pat = ctx.stage("patterning", patterning_stage)
  ids, _ = groups(data["train"]["tokens"])
  for algorithm in parens.ALGORITHMS:
    weights = patterning.sample_weights(pat["targets"][algorithm]["group_distribution"], ids)
    histories[f"toward_{algorithm}"] = _train(
      cfg,
      model,
      {**data, "train_like": data["train"]},
      weights,
      f"toward_{algorithm}",
      ctx,
      num_seeds=cfg.run.num_seeds,
      checkpoint_every=cfg.run.steps,
    ).history
  outcomes = {c: _seed_outcomes(cfg, histories[c][-1]) for c in CONDITIONS}
  summary = {
    "nbeta": cfg.nbeta,
    "chi_step": cfg.chi_step,
    "reference_solutions": {
      a: {k: v for k, v in r.items() if k != "params"} for a, r in refs.items()
    },
    "patterning": {
      k: pat[k] for k in ("llc_at_w_star", "posterior_mean_phi", "targets", "seconds")
    },
    "conditions": outcomes,
    # Paired by seed (the same keys in every condition): Wilcoxon signed-rank on the counts rates.
    "wilcoxon_p_vs_unweighted": {
      c: _wilcoxon(outcomes[c]["counts_rate"], outcomes["unweighted"]["counts_rate"])
      for c in CONDITIONS[1:]
    },
    "seconds": {"references": t_refs, "total": time.perf_counter() - t_start},
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      plot(cfg, pat, histories, refs, os.path.join(folder, "patterning_parens.png"))
    ],
  )


def report(summary: dict) -> list[str]:
  """Each reference solution's LLC, and which algorithm every condition's seeds learned."""
  lines = []
  for a, r in summary["reference_solutions"].items():
    lines.append(
      f"  reference {a}: LLC {r['llc_mean']:.2f} ± {r['llc_sd_over_chains']:.2f} (sd over chains), "
      "train "
      f"accuracy {r['train_accuracy']:.3f}, counts rate {r['counts_rate']:.2f}"
    )
  for c, o in summary["conditions"].items():
    targets = summary["patterning"]["targets"]
    tv = "" if c == "unweighted" else f" (TV {targets[c.split('_', 1)[1]]['total_variation']:.3f})"
    p = summary["wilcoxon_p_vs_unweighted"].get(c)
    lines.append(
      f"  {c}{tv}: selected {o['selected']}; counts rate {o['counts_rate_mean']:.3f} ± "
      f"{o['counts_rate_sd']:.3f} (sd over seeds)"
      + ("" if p is None else f", Wilcoxon p = {p:.3g} vs unweighted")
    )
  return lines


def _wilcoxon(a, b) -> float | None:
  d = np.asarray(a) - np.asarray(b)
  if d.size < 2 or np.all(d == 0):
    return None
  return float(scipy.stats.wilcoxon(a, b).pvalue)


def plot(cfg: Config, pat: dict, histories: dict, refs: dict, path: str) -> str:
  """Group responses of φ_counts (±2 s.e.), the group distributions, and the counts rate over
  training."""
  plt = plotting.plt
  fig, axes = plt.subplots(1, 3, figsize=(17, 4.6), gridspec_kw={"width_ratios": [1.3, 1.3, 1]})
  names = pat["group_names"]
  j = np.asarray(pat["group_response"])[0]
  se = np.asarray(pat["group_response_se"])[0]
  order = np.argsort(j)
  x = np.arange(len(names))
  ax = axes[0]
  ax.bar(
    x, j[order], yerr=2 * se[order], color=np.where(j[order] < 0, "C2", "C3"), alpha=0.8, capsize=2
  )
  ax.set_xticks(x, [names[i] for i in order], rotation=90, fontsize=6)
  ax.set_ylabel("dE[φ_counts]/dh  (< 0: toward counts)")
  ax.set_title(
    f"group responses at step {cfg.chi_step} (nβ = {cfg.nbeta:.0f}, ±2 s.e.)", fontsize=10
  )
  ax.grid(alpha=0.3, axis="y")
  ax = axes[1]
  width = 0.4
  base = np.asarray(pat["base"])
  for i, a in enumerate(parens.ALGORITHMS):
    tv = pat["targets"][a]["total_variation"]
    change = np.asarray(pat["targets"][a]["group_distribution"]) - base
    ax.bar(
      x + (i - 0.5) * width,
      change[order],
      width,
      label=f"toward {a} (TV {tv:.3f})",
      color=f"C{2 if a == 'counts' else 3}",
    )
  ax.axhline(0, color="black", lw=0.6)
  ax.set_xticks(x, [names[i] for i in order], rotation=90, fontsize=6)
  ax.set_ylabel("change of the group's probability")
  ax.set_title("re-weighting (same group order)", fontsize=10)
  ax.legend(fontsize=8)
  ax.grid(alpha=0.3, axis="y")
  ax = axes[2]
  colors = {"unweighted": "gray", "toward_counts": "C2", "toward_prefix": "C3"}
  for c in CONDITIONS:
    steps = np.array([h["step"] for h in histories[c]])
    rate = np.array([h["counts_rate"] for h in histories[c]], float)
    ax.plot(steps, rate, color=colors[c], lw=0.7, alpha=0.5)
    ax.plot(steps, rate.mean(1), color=colors[c], lw=2, label=c.replace("_", " "))
  for a, style in zip(parens.ALGORITHMS, ("--", ":")):
    ax.axhline(
      refs[a]["counts_rate"],
      color="black",
      ls=style,
      lw=0.8,
      label=f"reference {a} (LLC {refs[a]['llc_mean']:.1f})",
    )
  ax.set_xlabel("training step")
  ax.set_ylabel("counts rate on probes")
  ax.set_ylim(-0.03, 1.03)
  ax.set_title(f"{cfg.run.num_seeds} seeds per condition (thin: each seed)", fontsize=10)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path
