"""What the two parenthesis patterning studies share:
:mod:`mechjax.studies.patterning.patterning_parens` (patterning by each solution's LLC) and
:mod:`mechjax.studies.patterning.patterning_parens_probe` (a probe loss targeted at one posterior).

The task, its two algorithms (**counts** and **prefix**, both perfect on the training strings) and
the probes where they disagree: :mod:`mechjax.data.parens`. The probes here also start with ``(``
and end with ``)``, so that neither end gives the answer away. A trained model's **counts rate**,
the fraction of probes it calls balanced, tells which algorithm it runs; a seed is counted as one
algorithm when it is perfect in distribution (held-out accuracy ≥ ``perfect_accuracy``) and its
counts rate is above (counts) or below (prefix) one half.

Here: the settings both studies share, the data, the model, training on a re-weighted
distribution, the forced reference solutions and the tallies.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from mechjax import config
from mechjax import rng
from mechjax.data import parens
from mechjax.models.transformer import Transformer
from mechjax.slt import patterning
from mechjax.slt.settings import SGLDSettings
from mechjax.slt.settings import default_nbeta
from mechjax.studies import sampler_flags
from mechjax.train import loop

OUTCOMES = (*parens.ALGORITHMS, "not perfect")


@dataclasses.dataclass(frozen=True)
class ParensSettings(config.Settings):
  """The settings both parenthesis studies share (the task, the model and its training, the forced
  reference solutions, the sampler); each study's ``Config`` adds its own."""

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
    "Held-out in-distribution strings (the 'perfect' check and the held-out loss).",
    check=config.at_least(1),
  )
  disagreement: int = config.setting(
    1000,
    "Equal-count strings with a negative prefix added to force each reference solution.",
    check=config.at_least(1),
  )
  reference_steps: int | None = config.setting(
    None,
    "Training steps of the forced reference solutions; unset (0): --steps.",
    check=config.at_least(1),
    unset=0,
  )
  d_model: int = config.setting(32, "Transformer width.", check=config.at_least(1))
  num_layers: int = config.setting(2, "Transformer layers.", check=config.at_least(1))
  num_heads: int = config.setting(4, "Attention heads per layer.", check=config.at_least(1))
  d_mlp: int = config.setting(64, "MLP width.", check=config.at_least(1))
  learning_rate: float = config.setting(1e-3, "Adam step size.", check=config.positive)
  weight_decay: float = config.setting(
    1e-3, "Decoupled weight decay (AdamW); 0 trains with plain Adam.", check=config.non_negative
  )
  batch_size: int = config.setting(64, "Training minibatch size.", check=config.at_least(1))
  per_group: int = config.setting(
    64, "Training probes per group of strings for the susceptibilities.", check=config.at_least(1)
  )
  sgld: SGLDSettings = sampler_flags.study_group(
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
  ridge: float = config.setting(0.0, "The patterning inverse's ridge ρ.", check=config.non_negative)
  perfect_accuracy: float = config.setting(
    0.99,
    "Held-out accuracy at which a seed counts as perfect in distribution.",
    check=config.within(0.5, 1.0, high_open=False),
  )

  def validate(self):
    self.check_at_most(("batch_size", "sgld.batch_size"), "n")

  @property
  def nbeta(self) -> float:
    return default_nbeta(self.n)


class NotASolution(RuntimeError):
  """A forced reference stayed below ``perfect_accuracy`` on the training set; ``details``: its
  ``algorithm``, ``train_accuracy`` and ``steps``."""

  def __init__(self, message: str, **details):
    super().__init__(message)
    self.details = details


def make_data(cfg: ParensSettings, neg_prefix_fraction: float | None = None) -> dict:
  """Training set, held-out test set (same distribution, with ``neg_prefix_fraction`` of negatives
  carrying the prefix cue; None: uniform negatives), probes and the disagreement pool; each from its
  own stream of ``--seed`` (so every fraction shares its balanced strings and its probes)."""
  seed, length, balanced = cfg.run.seed, cfg.length, cfg.balanced_fraction
  train_rng, test_rng = rng.numpy(seed, "train-strings"), rng.numpy(seed, "test-strings")
  train = parens.make_dataset(train_rng, cfg.n, length, balanced, neg_prefix_fraction)
  test = parens.make_dataset(test_rng, cfg.num_test, length, balanced, neg_prefix_fraction)
  probe_rng = rng.numpy(seed, "probe-strings")
  return {
    "train": train,
    "test": test,
    "probes": {"tokens": parens.sample_probes(probe_rng, cfg.num_probes, length, inner=True)},
    "disagreement": {"tokens": parens.sample_probes(probe_rng, cfg.disagreement, length)},
  }


def group_probes(cfg: ParensSettings, ids: np.ndarray, num_groups: int) -> np.ndarray:
  """The training strings used as per-sample probes of the susceptibilities: up to ``per_group`` of
  each group, from the stream ``"probe-choice"``."""
  choice = rng.numpy(cfg.run.seed, "probe-choice")
  return np.concatenate(
    [choice.permutation(np.nonzero(ids == g)[0])[: cfg.per_group] for g in range(num_groups)]
  )


# A method of a :class:`Model` compiled as one program, the instance static (hashed by identity):
# called outside a traced function, as the references' checks are, it does not run op by op.
_compiled = functools.partial(jax.jit, static_argnums=0)


class Model:
  """The classifier: a transformer read out at the last position (``label`` head, 2 classes). Its
  losses and accuracies are compiled programs, also when called on concrete arrays."""

  def __init__(self, cfg: ParensSettings):
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

  @_compiled
  def logits(self, params, tokens):
    return self.net.apply(params, tokens)["label"][:, -1]

  @_compiled
  def per_sample_loss(self, params, batch):
    return optax.softmax_cross_entropy_with_integer_labels(
      self.logits(params, batch["tokens"]), batch["label"]
    )

  def weighted_loss(self, params, batch):
    """``weight_i · ℓ_i``: with weights of mean 1, the mean is the re-weighted loss."""
    return batch["weight"] * self.per_sample_loss(params, batch)

  @_compiled
  def counts_rate(self, params, tokens):
    return jnp.mean(jnp.argmax(self.logits(params, tokens), -1) == 1)

  @_compiled
  def accuracy(self, params, batch):
    return jnp.mean(jnp.argmax(self.logits(params, batch["tokens"]), -1) == batch["label"])

  def test_loss(self, params, test):
    """The held-out loss, as a one-observable vector."""
    return jnp.mean(self.per_sample_loss(params, test))[None]

  def probe_observables(self, params, od):
    """``(φ_counts, φ_test)``: the probe loss under counts labels and the held-out loss."""
    counts = {"tokens": od["probes"], "label": jnp.ones(len(od["probes"]), jnp.int32)}
    phi_counts = jnp.mean(self.per_sample_loss(params, counts))
    return jnp.stack([phi_counts, jnp.mean(self.per_sample_loss(params, od["test"]))])


def train_weighted(cfg, model, data, weights, run, ctx, train_like=None, **overrides):
  """Trains run ``run`` from scratch on the training strings sampled with ``weights``
  (:func:`mechjax.slt.patterning.weighted_problem`), evaluated on the held-out splits, with AdamW
  (plain Adam when ``weight_decay`` is 0). ``train_like`` gives the samples when they are not
  ``data["train"]``; ``overrides`` go to ``ctx.train``, whose defaults are the run settings (so the
  seeds of every condition are the same keys, paired)."""
  train, test = jax.tree.map(jnp.asarray, (data["train"], data["test"]))
  probes = jnp.asarray(data["probes"]["tokens"])

  def evaluate(params, key):
    del key
    return {
      "counts_rate": model.counts_rate(params, probes),
      "test_accuracy": model.accuracy(params, test),
      "train_accuracy": model.accuracy(params, train),
    }

  samples = train if train_like is None else jax.tree.map(jnp.asarray, train_like)
  problem = patterning.weighted_problem(
    model.init, model.per_sample_loss, samples, weights, cfg.batch_size, evaluate
  )
  if cfg.weight_decay == 0:
    optimizer = optax.adam(cfg.learning_rate)
  else:
    optimizer = optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)
  summarize = lambda row: (
    f"counts rate {np.round(row['counts_rate'], 2).tolist()} | test acc "
    f"{np.round(np.min(row['test_accuracy']), 3)} (worst seed)"
  )
  return ctx.train(run, problem, optimizer, summarize=summarize, keep_checkpoints=None, **overrides)


def reference_solutions(
  cfg: ParensSettings, model: Model, data: dict, ctx, *, prefix: str = "", max_steps=None
) -> dict:
  """Trains one model per algorithm (run ``{prefix}reference_{algorithm}``, one seed) on training +
  disagreement strings labelled by it, for ``reference_steps`` steps (``steps`` when unset).

  With ``max_steps``, a reference that is not perfect on the training set (accuracy below
  ``perfect_accuracy``) trains on, resuming its run, to ``max_steps`` (when that is more), and one
  still short of it is refused with :class:`NotASolution`: its LLC would not be that of a solution.
  Each reference records ``steps`` (what it trained) and ``train_accuracy_at``, its training
  accuracy after each stretch by step.
  """
  first = cfg.reference_steps or cfg.run.steps
  stretches = (first,) if max_steps is None or max_steps <= first else (first, max_steps)
  train, test = jax.tree.map(jnp.asarray, (data["train"], data["test"]))
  probes = jnp.asarray(data["probes"]["tokens"])
  extra = data["disagreement"]["tokens"]
  key = loop.seed_keys(cfg.run.seed, 1)  # one seed: the first of every condition
  counts_labels = {"tokens": probes, "label": jnp.ones(len(probes), jnp.int32)}
  out = {}
  for algorithm in parens.ALGORITHMS:
    forced = {
      "tokens": np.concatenate([data["train"]["tokens"], extra]),
      "label": np.concatenate([data["train"]["label"], parens.label(extra, algorithm)]),
    }
    run, weights = f"{prefix}reference_{algorithm}", np.ones(len(forced["label"]))
    accuracy_at = {}
    for steps in stretches:
      result = train_weighted(
        cfg, model, data, weights, run, ctx, forced, keys=key, steps=steps, checkpoint_every=steps
      )
      params = result.params_of(0)
      steps = int(result.state["step"][0])  # a resumed run may hold more
      accuracy_at[steps] = float(model.accuracy(params, train))  # a Python float for the bar
      if accuracy_at[steps] >= cfg.perfect_accuracy:
        break
    accuracy = accuracy_at[steps]
    if max_steps is not None and accuracy < cfg.perfect_accuracy:
      raise NotASolution(
        f"the forced {algorithm} reference reached training accuracy {accuracy:.3f} < "
        f"perfect_accuracy={cfg.perfect_accuracy:g} after {steps} steps, so it is not a solution "
        "and its LLC means nothing; raise --reference_max_steps (or use another --seed)",
        algorithm=algorithm,
        train_accuracy=accuracy,
        steps=steps,
      )
    out[algorithm] = {
      "params": params,
      "steps": steps,
      "train_accuracy_at": accuracy_at,
      "train_accuracy": accuracy,
      "test_accuracy": model.accuracy(params, test),
      "counts_rate": model.counts_rate(params, probes),
      # A Python float: the probe study takes differences of these in float64.
      "phi_counts": float(jnp.mean(model.per_sample_loss(params, counts_labels))),
    }
  return out


def refs_summary(refs: dict) -> dict:
  """The reference solutions' numbers for summary.json: everything but their params."""
  return {a: {k: v for k, v in r.items() if k != "params"} for a, r in refs.items()}


def seed_outcomes(cfg: ParensSettings, row: dict) -> dict:
  """Which algorithm each seed of a metrics row learned, and the tallies."""
  rate = np.asarray(row["counts_rate"], float)
  perfect = np.asarray(row["test_accuracy"], float) >= cfg.perfect_accuracy
  learned = np.where(~perfect, "not perfect", np.where(rate > 0.5, "counts", "prefix"))
  return {
    "counts_rate": rate,
    "test_accuracy": np.asarray(row["test_accuracy"], float),
    "train_accuracy": np.asarray(row["train_accuracy"], float),
    "learned": learned,
    "selected": {a: int(np.sum(learned == a)) for a in OUTCOMES},  # ints: the report prints them
    "counts_rate_mean": rate.mean(),
    "counts_rate_sd": rate.std(ddof=1) if rate.size > 1 else 0.0,
  }


def wilcoxon_vs_unweighted(outcomes: dict) -> dict:
  """For every condition but ``"unweighted"``, the Wilcoxon signed-rank p-value of its seeds'
  counts rates against the unweighted ones (paired: the same keys in every condition); None when
  there are fewer than two pairs or no pair differs (the test is undefined)."""
  base = outcomes["unweighted"]["counts_rate"]
  out = {}
  for c, o in outcomes.items():
    d = np.asarray(o["counts_rate"]) - np.asarray(base)
    if c == "unweighted":
      continue
    undefined = d.size < 2 or np.all(d == 0)
    out[c] = None if undefined else scipy.stats.wilcoxon(o["counts_rate"], base).pvalue
  return out


COLORS = {"counts": "C2", "prefix": "C3", "not perfect": "lightgray"}
