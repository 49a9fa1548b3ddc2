"""Patterning on parenthesis balancing: which of two algorithms a transformer learns, and whether a data
re-weighting computed from susceptibilities (Wang & Murfet 2026, arXiv:2601.13548) changes it.

The task (:mod:`mechjax.data.parens`): classify strings of ``(`` and ``)`` as balanced. Training holds
balanced strings and strings with unequal counts, so two algorithms are perfect on it: **counts** (equal
numbers of each) and **prefix** (equal numbers and no negative prefix). Probes are equal-count strings with
a negative prefix that start with ``(`` and end with ``)`` (so neither end gives the answer away); counts
calls them balanced and prefix does not. A trained model's **counts rate**, the fraction of probes it calls
balanced, tells which algorithm it runs; a seed is counted as one algorithm when it is perfect in
distribution (held-out accuracy ≥ ``perfect_accuracy``) and its counts rate is above (counts) or below
(prefix) one half.

The study:

1. **Reference solutions.** One model per algorithm, trained on the training set plus ``disagreement``
   strings labelled by that algorithm, so that each is forced. Both are perfect on the training set; the
   LLC of each is estimated on the training set (Lau et al. 2023, arXiv:2308.12108).
2. **The unweighted run:** ``num_seeds`` seeds on the training distribution.
3. **Susceptibilities** at the unweighted seed 0's checkpoint ``chi_step``: SGLD on the localized
   posterior (:func:`mechjax.slt.susceptibility.estimate_susceptibilities`) with per-sample probes drawn
   from every *group* of training strings (grouped by label, first token, depth of the most negative prefix
   and count difference; :func:`groups`), and two observables: ``φ_counts``, the probe loss under counts
   labels (low for a counts model), and ``φ_test``, the held-out in-distribution loss.
4. **Patterning.** The group responses ``J_g = dE[φ]/dh`` (exact averages of the per-probe columns,
   :func:`mechjax.slt.patterning.group_response`) are inverted on the simplex
   (:func:`mechjax.slt.patterning.patterning_weights`), once toward each algorithm ``A``, for ``Δφ_test = 0``
   (keep the in-distribution fit) and a change of ``φ_counts`` that is, with ``target="gap"`` (default),
   the whole distance between the two reference solutions, ``∓(φ_counts(w_prefix) − φ_counts(w_counts))``,
   in A's direction: the same size both ways. With ``target="reference"`` it is ``φ_counts(w_A) −
   E[φ_counts]``, which moves the posterior mean onto reference ``A``; from a posterior that already sits
   near one solution this asks for almost nothing in that direction.
5. **Retraining** ``num_seeds`` seeds from scratch on each re-weighted distribution, with the unweighted
   run's seed keys, and counting which algorithm each seed learns.

Outputs in the workdir: ``metrics.jsonl`` (every run), ``patterning.json`` (susceptibilities, group
responses and weights; reused on resume), ``summary.json`` and ``figures/patterning_parens.png``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from mechjax import plotting
from mechjax.data import parens
from mechjax.models.transformer import Transformer
from mechjax.slt import llc as llc_lib
from mechjax.slt import patterning
from mechjax.slt import sgld
from mechjax.slt import susceptibility as sus
from mechjax.train import loop
from mechjax.train import metrics as metrics_lib

CONDITIONS = ("unweighted", "toward_counts", "toward_prefix")
TARGETS = ("gap", "reference")
CHI_STREAM = 2**31 - 11
LLC_STREAM = 2**31 - 12


@dataclasses.dataclass(frozen=True)
class Config:
  length: int = 20
  n: int = 4000
  balanced_fraction: float = 0.5
  num_probes: int = 512
  num_test: int = 1000
  disagreement: int = 1000
  d_model: int = 32
  num_layers: int = 2
  num_heads: int = 2
  d_mlp: int = 64
  learning_rate: float = 1e-3
  batch_size: int = 64
  steps: int = 1000
  num_seeds: int = 8
  seed: int = 0
  log_every: int = 50
  checkpoint_every: int = 250
  chi_step: int = 250
  per_group: int = 64
  chains: int = 4
  draws: int = 500
  burnin: int = 100
  sgld_step_size: float = 1e-4
  localization: float = 100.0
  sgld_batch_size: int = 64
  eval_size: int = 512
  llc_draws: int = 1000
  ridge: float = 0.0
  target: str = "gap"
  perfect_accuracy: float = 0.99

  def __post_init__(self):
    if self.length < 6 or self.length % 2:
      raise ValueError(f"length must be an even integer >= 6 (probes need room for a negative prefix); "
                       f"got {self.length}")
    if not 0 < self.chi_step <= self.steps:
      raise ValueError(f"chi_step must be in [1, steps={self.steps}]; got {self.chi_step}")
    if self.chi_step % self.checkpoint_every:
      raise ValueError(f"chi_step={self.chi_step} must be a multiple of checkpoint_every={self.checkpoint_every} "
                       "(it is a checkpoint of the unweighted run)")
    if max(self.batch_size, self.sgld_batch_size) > self.n:
      raise ValueError(f"batch sizes ({self.batch_size}, {self.sgld_batch_size}) must not exceed n={self.n}")
    if self.target not in TARGETS:
      raise ValueError(f"target must be one of {TARGETS}; got {self.target!r}")
    if not 0.5 < self.perfect_accuracy <= 1:
      raise ValueError(f"perfect_accuracy must be in (0.5, 1]; got {self.perfect_accuracy}")

  @property
  def nbeta(self) -> float:
    return sgld.default_nbeta(self.n)


def make_data(cfg: Config) -> dict[str, dict[str, np.ndarray]]:
  """Training set, held-out test set (same distribution), probes and the disagreement pool; all from ``seed``."""
  train = parens.make_dataset(cfg.seed, cfg.n, cfg.length, cfg.balanced_fraction)
  test = parens.make_dataset(cfg.seed + 1_000_003, cfg.num_test, cfg.length, cfg.balanced_fraction)
  rng = np.random.default_rng(cfg.seed + 2_000_003)
  pool = parens.sample_probes(rng, 16 * cfg.num_probes, cfg.length)
  inner = pool[(pool[:, 0] == parens.OPEN) & (pool[:, -1] == parens.CLOSE)]
  if len(inner) < cfg.num_probes:
    raise ValueError(f"only {len(inner)} probes start with ( and end with ); lower num_probes or raise length")
  disagree = parens.sample_probes(rng, cfg.disagreement, cfg.length)
  return {"train": train, "test": test, "probes": {"tokens": inner[: cfg.num_probes]},
          "disagreement": {"tokens": disagree}}


def groups(tokens: np.ndarray) -> tuple[np.ndarray, list[str]]:
  """Each training string's group: (label, first token, depth of its most negative prefix clipped at 3,
  |count difference| // 2 clipped at 3). Returns the group ids and one name per group."""
  f = parens.features(tokens)
  lab = parens.label(tokens, "prefix")
  keys = np.stack([lab, f["first_close"], np.minimum(-f["min_prefix"], 3),
                   np.minimum(np.abs(f["count_difference"]) // 2, 3)], 1)
  uniq, ids = np.unique(keys, axis=0, return_inverse=True)
  names = [f"{'bal' if b else 'uneq'} {')' if c else '('}… min{-m} Δ{2 * d}" + ("+" if d == 3 else "")
           for b, c, m, d in uniq]
  return ids.reshape(-1), names


class Model:
  """The classifier: a transformer read out at the last position (``label`` head, 2 classes)."""

  def __init__(self, cfg: Config):
    self.net = Transformer(vocab_size=2, heads=(("label", 2),), d_model=cfg.d_model, num_layers=cfg.num_layers,
                           num_heads=cfg.num_heads, d_mlp=cfg.d_mlp, max_len=cfg.length)
    self.length = cfg.length

  def init(self, key):
    return self.net.init(key, jnp.zeros((1, self.length), jnp.int32))

  def logits(self, params, tokens):
    return self.net.apply(params, tokens)["label"][:, -1]

  def per_sample_loss(self, params, batch):
    return optax.softmax_cross_entropy_with_integer_labels(self.logits(params, batch["tokens"]), batch["label"])

  def counts_rate(self, params, tokens):
    return jnp.mean(jnp.argmax(self.logits(params, tokens), -1) == 1)

  def accuracy(self, params, batch):
    return jnp.mean(jnp.argmax(self.logits(params, batch["tokens"]), -1) == batch["label"])


def _jnp(tree):
  return jax.tree.map(jnp.asarray, tree)


def make_evaluate(model: Model, data: dict):
  train, test, probes = _jnp(data["train"]), _jnp(data["test"]), jnp.asarray(data["probes"]["tokens"])

  def evaluate(params, key):
    del key
    return {"counts_rate": model.counts_rate(params, probes), "test_accuracy": model.accuracy(params, test),
            "train_accuracy": model.accuracy(params, train)}
  return evaluate


def _train(cfg, model, data, weights, run, workdir, *, num_seeds, steps, checkpoint_every, progress):
  evaluate = make_evaluate(model, data)
  problem = patterning.weighted_problem(model.init, model.per_sample_loss, _jnp(data["train_like"]), weights,
                                        cfg.batch_size, evaluate)
  summarize = lambda row: (f"counts rate {np.round(row['counts_rate'], 2).tolist()} | test acc "
                           f"{np.round(np.min(row['test_accuracy']), 3)} (worst seed)")
  return loop.train(problem, optax.adam(cfg.learning_rate), keys=loop.seed_keys(cfg.seed, num_seeds), steps=steps,
                    workdir=workdir, run=run, log_every=cfg.log_every, checkpoint_every=checkpoint_every,
                    progress=progress, summarize=summarize, keep_checkpoints=None)


def reference_solutions(cfg: Config, model: Model, data: dict, workdir: str, progress: bool) -> dict:
  """Trains one model per algorithm on training + disagreement strings labelled by it, and estimates each
  one's LLC on the training set alone (where both are perfect)."""
  out = {}
  train_j = _jnp(data["train"])
  for algorithm in parens.ALGORITHMS:
    extra = data["disagreement"]["tokens"]
    forced = {"tokens": np.concatenate([data["train"]["tokens"], extra]),
              "label": np.concatenate([data["train"]["label"], parens.label(extra, algorithm)])}
    result = _train(cfg, model, {**data, "train_like": forced}, np.ones(len(forced["label"])),
                    f"reference_{algorithm}", workdir, num_seeds=1, steps=cfg.steps, checkpoint_every=cfg.steps,
                    progress=progress)
    params = jax.tree.map(lambda a: a[0], result.state["params"])
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), LLC_STREAM)
    loss = lambda w, b: jnp.mean(model.per_sample_loss(w, b))
    est = llc_lib.estimate_llc(loss, params, train_j, key=key, num_chains=cfg.chains, num_draws=cfg.llc_draws,
                               num_burnin=cfg.burnin, step_size=cfg.sgld_step_size, nbeta=cfg.nbeta,
                               localization=cfg.localization, batch_size=cfg.sgld_batch_size)
    probes = jnp.asarray(data["probes"]["tokens"])
    out[algorithm] = {
        "params": params, "llc_mean": est.llc_mean, "llc_sd_over_chains": float(np.std(est.llc_per_chain)),
        "train_accuracy": float(model.accuracy(params, train_j)),
        "test_accuracy": float(model.accuracy(params, _jnp(data["test"]))),
        "counts_rate": float(model.counts_rate(params, probes)),
        "phi_counts": float(jnp.mean(model.per_sample_loss(params, {"tokens": probes,
                                                                     "label": jnp.ones(len(probes), jnp.int32)})))}
  return out


def compute_patterning(cfg: Config, model: Model, data: dict, w_star, references: dict) -> dict:
  """Susceptibilities at ``w_star`` over group-stratified training probes, group responses, and the
  simplex re-weighting toward each reference solution."""
  ids, names = groups(data["train"]["tokens"])
  num_groups = len(names)
  rng = np.random.default_rng(cfg.seed + 3_000_017)
  chosen = np.concatenate([rng.permutation(np.nonzero(ids == g)[0])[: cfg.per_group] for g in range(num_groups)])
  probe_data = _jnp({k: v[chosen] for k, v in data["train"].items()})
  probes = jnp.asarray(data["probes"]["tokens"])
  test = _jnp(data["test"])
  counts_labels = jnp.ones(len(probes), jnp.int32)

  def observable(w, od):
    phi_counts = jnp.mean(model.per_sample_loss(w, {"tokens": od["probes"], "label": od["counts_labels"]}))
    phi_test = jnp.mean(model.per_sample_loss(w, od["test"]))
    return jnp.stack([phi_counts, phi_test])

  t0 = time.perf_counter()
  res = sus.estimate_susceptibilities(
      model.per_sample_loss, w_star, _jnp(data["train"]), probe_data, key=jax.random.fold_in(
          jax.random.PRNGKey(cfg.seed), CHI_STREAM), num_chains=cfg.chains, num_draws=cfg.draws,
      num_burnin=cfg.burnin, step_size=cfg.sgld_step_size, nbeta=cfg.nbeta, localization=cfg.localization,
      batch_size=cfg.sgld_batch_size, eval_size=cfg.eval_size, observable=observable,
      observable_data={"probes": probes, "counts_labels": counts_labels, "test": test})
  seconds = time.perf_counter() - t0
  response = res.response[0, 1:]  # (2 observables, probes): φ_counts, φ_test
  se = cfg.nbeta * res.standard_error[0, 1:]
  sub_ids = ids[chosen]
  j_g = patterning.group_response(response, sub_ids, num_groups)
  se_g = np.sqrt(patterning.group_response(se**2, sub_ids, num_groups) / np.bincount(sub_ids, minlength=num_groups))
  base = np.bincount(ids, minlength=num_groups) / len(ids)
  mean_phi = res.observable_means[0, 1:]
  out = {"group_names": names, "group_sizes": np.bincount(ids, minlength=num_groups).tolist(), "base": base.tolist(),
         "group_response": j_g.tolist(), "group_response_se": se_g.tolist(), "llc_at_w_star": float(res.llc[0]),
         "posterior_mean_phi": mean_phi.tolist(), "seconds": seconds, "probes_per_group":
         np.bincount(sub_ids, minlength=num_groups).tolist(), "targets": {}}
  gap = references["prefix"]["phi_counts"] - references["counts"]["phi_counts"]
  for algorithm in parens.ALGORITHMS:
    if cfg.target == "gap":
      delta = gap if algorithm == "prefix" else -gap
    else:
      delta = references[algorithm]["phi_counts"] - mean_phi[0]
    target = np.array([delta, 0.0])
    dh = patterning.patterning_weights(j_g, target, ridge=cfg.ridge, simplex=True, base=base)
    out["targets"][algorithm] = {"target_delta": target.tolist(), "group_distribution": (base + dh).tolist(),
                                 "predicted_delta": (j_g @ dh).tolist(),
                                 "total_variation": float(0.5 * np.abs(dh).sum())}
  return out


def _seed_outcomes(cfg: Config, row: dict) -> dict:
  rate = np.asarray(row["counts_rate"], float)
  perfect = np.asarray(row["test_accuracy"], float) >= cfg.perfect_accuracy
  learned = np.where(~perfect, "not perfect", np.where(rate > 0.5, "counts", "prefix"))
  return {"counts_rate": rate.tolist(), "test_accuracy": np.asarray(row["test_accuracy"], float).tolist(),
          "train_accuracy": np.asarray(row["train_accuracy"], float).tolist(), "learned": learned.tolist(),
          "selected": {a: int(np.sum(learned == a)) for a in (*parens.ALGORITHMS, "not perfect")},
          "counts_rate_mean": float(rate.mean()), "counts_rate_sd": float(rate.std(ddof=1)) if rate.size > 1 else 0.0}


def run(cfg: Config, workdir: str, progress: bool = True) -> dict:
  """Runs every stage (each resumes from what ``workdir`` holds) and writes summary.json and the figure."""
  t_start = time.perf_counter()
  model = Model(cfg)
  data = make_data(cfg)
  refs = reference_solutions(cfg, model, data, workdir, progress)
  t_refs = time.perf_counter() - t_start
  ones = np.ones(cfg.n)
  histories = {"unweighted": _train(cfg, model, {**data, "train_like": data["train"]}, ones, "unweighted", workdir,
                                    num_seeds=cfg.num_seeds, steps=cfg.steps, checkpoint_every=cfg.checkpoint_every,
                                    progress=progress).history}
  path = os.path.join(workdir, "patterning.json")
  if os.path.exists(path):
    with open(path) as f:
      pat = json.load(f)
  else:
    problem = patterning.weighted_problem(model.init, model.per_sample_loss, _jnp(data["train"]), ones, cfg.batch_size)
    saved = loop.checkpoint_params(problem, optax.adam(cfg.learning_rate), keys=loop.seed_keys(cfg.seed, cfg.num_seeds),
                                   workdir=workdir, run="unweighted", steps=[cfg.chi_step])
    w_star = jax.tree.map(lambda a: a[0], saved[cfg.chi_step])
    pat = compute_patterning(cfg, model, data, w_star, refs)
    if metrics_lib.is_writer():
      metrics_lib.write_json(path, pat)
  ids, _ = groups(data["train"]["tokens"])
  for algorithm in parens.ALGORITHMS:
    weights = patterning.sample_weights(pat["targets"][algorithm]["group_distribution"], ids)
    histories[f"toward_{algorithm}"] = _train(cfg, model, {**data, "train_like": data["train"]}, weights,
                                              f"toward_{algorithm}", workdir, num_seeds=cfg.num_seeds,
                                              steps=cfg.steps, checkpoint_every=cfg.steps, progress=progress).history
  outcomes = {c: _seed_outcomes(cfg, histories[c][-1]) for c in CONDITIONS}
  summary = {
      "nbeta": cfg.nbeta, "chi_step": cfg.chi_step,
      "reference_solutions": {a: {k: v for k, v in r.items() if k != "params"} for a, r in refs.items()},
      "patterning": {k: pat[k] for k in ("llc_at_w_star", "posterior_mean_phi", "targets", "seconds")},
      "conditions": outcomes,
      # Paired by seed (the same keys in every condition): Wilcoxon signed-rank on the counts rates.
      "wilcoxon_p_vs_unweighted": {c: _wilcoxon(outcomes[c]["counts_rate"], outcomes["unweighted"]["counts_rate"])
                                   for c in CONDITIONS[1:]},
      "seconds": {"references": t_refs, "total": time.perf_counter() - t_start},
  }
  if metrics_lib.is_writer():
    figures = os.path.join(workdir, "figures")
    os.makedirs(figures, exist_ok=True)
    summary["figures"] = [os.path.basename(plot(cfg, pat, histories, refs, os.path.join(figures,
                                                                                         "patterning_parens.png")))]
    metrics_lib.write_json(os.path.join(workdir, "summary.json"), summary)
  return summary


def _wilcoxon(a, b) -> float | None:
  d = np.asarray(a) - np.asarray(b)
  if d.size < 2 or np.all(d == 0):
    return None
  return float(scipy.stats.wilcoxon(a, b).pvalue)


def plot(cfg: Config, pat: dict, histories: dict, refs: dict, path: str) -> str:
  """Group responses of φ_counts (±2 s.e.), the group distributions, and the counts rate over training."""
  plt = plotting.plt
  fig, axes = plt.subplots(1, 3, figsize=(17, 4.6), gridspec_kw={"width_ratios": [1.3, 1.3, 1]})
  names = pat["group_names"]
  j = np.asarray(pat["group_response"])[0]
  se = np.asarray(pat["group_response_se"])[0]
  order = np.argsort(j)
  x = np.arange(len(names))
  ax = axes[0]
  ax.bar(x, j[order], yerr=2 * se[order], color=np.where(j[order] < 0, "C2", "C3"), alpha=0.8, capsize=2)
  ax.set_xticks(x, [names[i] for i in order], rotation=90, fontsize=6)
  ax.set_ylabel("dE[φ_counts]/dh  (< 0: toward counts)")
  ax.set_title(f"group responses at step {cfg.chi_step} (nβ = {cfg.nbeta:.0f}, ±2 s.e.)", fontsize=10)
  ax.grid(alpha=0.3, axis="y")
  ax = axes[1]
  width = 0.4
  base = np.asarray(pat["base"])
  for i, a in enumerate(parens.ALGORITHMS):
    tv = pat["targets"][a]["total_variation"]
    change = np.asarray(pat["targets"][a]["group_distribution"]) - base
    ax.bar(x + (i - 0.5) * width, change[order], width, label=f"toward {a} (TV {tv:.3f})",
           color=f"C{2 if a == 'counts' else 3}")
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
    ax.axhline(refs[a]["counts_rate"], color="black", ls=style, lw=0.8,
               label=f"reference {a} (LLC {refs[a]['llc_mean']:.1f})")
  ax.set_xlabel("training step")
  ax.set_ylabel("counts rate on probes")
  ax.set_ylim(-0.03, 1.03)
  ax.set_title(f"{cfg.num_seeds} seeds per condition (thin: each seed)", fontsize=10)
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def config_from_flags(values: dict) -> Config:
  fields = [f.name for f in dataclasses.fields(Config)]
  return Config(**{name: values[name] for name in fields})
