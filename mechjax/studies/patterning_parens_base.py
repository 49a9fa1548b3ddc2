"""The machinery both designs of the parenthesis patterning study share
(:mod:`mechjax.studies.patterning_parens`): the data, the groups of training strings, the model,
training on a re-weighted distribution, the forced reference solutions, and counting which algorithm
each seed learned."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from mechjax import rng
from mechjax.data import parens
from mechjax.models.transformer import Transformer
from mechjax.slt import llc as llc_lib
from mechjax.slt import patterning
from mechjax.slt import sgld as sgld_lib
from mechjax.studies import frame
from mechjax.train import loop

OUTCOMES = (*parens.ALGORITHMS, "not perfect")


class NotASolution(RuntimeError):
  """A forced reference stayed below ``perfect_accuracy`` on the training set, even trained for
  ``reference_max_steps``; ``algorithm``, ``train_accuracy`` and ``steps`` say which and how far."""

  def __init__(self, message: str, algorithm: str, train_accuracy: float, steps: int):
    super().__init__(message)
    self.algorithm, self.train_accuracy, self.steps = algorithm, train_accuracy, steps


def make_data(cfg, neg_prefix_fraction: float | None = None) -> dict:
  """Training set, held-out test set (same distribution, with ``neg_prefix_fraction`` of negatives
  carrying the prefix cue; None: uniform negatives), probes and the disagreement pool; each from its
  own stream of ``--seed`` (so every fraction shares its balanced strings and its probes)."""
  seed = cfg.run.seed
  train = parens.make_dataset(
    rng.numpy(seed, "train-strings"),
    cfg.n,
    cfg.length,
    cfg.balanced_fraction,
    neg_prefix_fraction,
  )
  test = parens.make_dataset(
    rng.numpy(seed, "test-strings"),
    cfg.num_test,
    cfg.length,
    cfg.balanced_fraction,
    neg_prefix_fraction,
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

  def __init__(self, cfg):
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

  def weighted_loss(self, params, batch):
    """``weight_i · ℓ_i``: with weights of mean 1, the mean is the re-weighted loss."""
    return batch["weight"] * self.per_sample_loss(params, batch)

  def counts_rate(self, params, tokens):
    return jnp.mean(jnp.argmax(self.logits(params, tokens), -1) == 1)

  def accuracy(self, params, batch):
    return jnp.mean(jnp.argmax(self.logits(params, batch["tokens"]), -1) == batch["label"])

  def test_loss(self, params, test):
    """The held-out loss, as a one-observable vector."""
    return jnp.mean(self.per_sample_loss(params, test))[None]

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


def optimizer(cfg) -> optax.GradientTransformation:
  """AdamW with ``weight_decay`` (plain Adam when it is 0)."""
  if cfg.weight_decay == 0:
    return optax.adam(cfg.learning_rate)
  return optax.adamw(cfg.learning_rate, weight_decay=cfg.weight_decay)


def train_weighted(
  cfg, model, data, weights, run, ctx, *, num_seeds, checkpoint_every, train_like=None, steps=None
):
  """Trains run ``run`` of ``num_seeds`` seeds on ``data["train"]`` with the per-sample loss
  weighted by ``weights`` (:func:`mechjax.slt.patterning.weighted_problem`; ``train_like`` gives the
  samples' format when they differ), evaluated on the held-out splits."""
  evaluate = make_evaluate(model, data)
  train_like = data["train"] if train_like is None else train_like
  problem = patterning.weighted_problem(
    model.init, model.per_sample_loss, _jnp(train_like), weights, cfg.batch_size, evaluate
  )
  summarize = lambda row: (
    f"counts rate {np.round(row['counts_rate'], 2).tolist()} | test acc "
    f"{np.round(np.min(row['test_accuracy']), 3)} (worst seed)"
  )
  return ctx.train(
    run,
    problem,
    optimizer(cfg),
    keys=loop.seed_keys(cfg.run.seed, num_seeds),
    checkpoint_every=checkpoint_every,
    summarize=summarize,
    keep_checkpoints=None,
    **({} if steps is None else {"steps": steps}),
  )


def train_condition(cfg, model, data, weights, run, ctx):
  """``num_seeds`` seeds from scratch on the training strings sampled with ``weights``; the seeds
  are the same keys in every condition (paired)."""
  return train_weighted(
    cfg,
    model,
    data,
    weights,
    run,
    ctx,
    num_seeds=cfg.run.num_seeds,
    checkpoint_every=cfg.run.checkpoint_every,
  )


def reference_solutions(
  cfg,
  model: Model,
  data: dict,
  ctx: frame.Context,
  *,
  estimate_llcs: bool,
  prefix="",
  require_solutions: bool = False,
) -> dict:
  """Trains one model per algorithm on training + disagreement strings labelled by it, for
  ``reference_steps`` steps (``steps`` when unset); with ``estimate_llcs``, estimates each one's LLC
  on the training set alone (where both are perfect).

  With ``require_solutions`` a reference that is not perfect on the training set (accuracy below
  ``perfect_accuracy``) trains on, resuming its run, to ``reference_max_steps`` (when that is more),
  and one still short of it is refused with :class:`NotASolution`: its LLC would not be that of a
  solution. Each reference records ``steps`` (what it trained) and ``train_accuracy_at``, its
  training accuracy after each stretch by step.
  """
  first = cfg.reference_steps or cfg.run.steps
  limit = max(first, cfg.reference_max_steps or 4 * first)
  out = {}
  train_j = _jnp(data["train"])
  probes = jnp.asarray(data["probes"]["tokens"])
  for algorithm in parens.ALGORITHMS:
    extra = data["disagreement"]["tokens"]
    forced = {
      "tokens": np.concatenate([data["train"]["tokens"], extra]),
      "label": np.concatenate([data["train"]["label"], parens.label(extra, algorithm)]),
    }
    accuracy_at = {}
    for steps in (first, limit) if require_solutions and limit > first else (first,):
      result = train_weighted(
        cfg,
        model,
        data,
        np.ones(len(forced["label"])),
        f"{prefix}reference_{algorithm}",
        ctx,
        num_seeds=1,
        checkpoint_every=steps,
        train_like=forced,
        steps=steps,
      )
      params = result.params_of(0)
      steps = int(np.asarray(result.state["step"]).reshape(-1)[0])  # a resumed run may hold more
      accuracy_at[steps] = float(model.accuracy(params, train_j))
      if accuracy_at[steps] >= cfg.perfect_accuracy:
        break
    out[algorithm] = {
      "params": params,
      "steps": steps,
      "train_accuracy_at": {str(s): a for s, a in accuracy_at.items()},
      "train_accuracy": accuracy_at[steps],
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
    accuracy = out[algorithm]["train_accuracy"]
    if require_solutions and accuracy < cfg.perfect_accuracy:
      raise NotASolution(
        f"the forced {algorithm} reference reached training accuracy {accuracy:.3f} < "
        f"perfect_accuracy={cfg.perfect_accuracy:g} after {steps} steps, so it is not a solution "
        "and its LLC means nothing; raise --reference_max_steps (or use another --seed)",
        algorithm,
        accuracy,
        steps,
      )
    if estimate_llcs:
      est = llc_lib.estimate_llc(
        sgld_lib.MeanLoss(model.per_sample_loss),
        params,
        train_j,
        key=rng.key(cfg.run.seed, "reference-llc"),
        settings=cfg.sgld,
        num_draws=cfg.llc_draws,
      )
      out[algorithm]["llc_mean"] = est.llc_mean
      out[algorithm]["llc_sd_over_chains"] = float(np.std(est.llc_per_chain))
  return out


def seed_outcomes(cfg, row: dict) -> dict:
  """Which algorithm each seed of a metrics row learned, and the tallies."""
  rate = np.asarray(row["counts_rate"], float)
  perfect = np.asarray(row["test_accuracy"], float) >= cfg.perfect_accuracy
  learned = np.where(~perfect, "not perfect", np.where(rate > 0.5, "counts", "prefix"))
  return {
    "counts_rate": rate.tolist(),
    "test_accuracy": np.asarray(row["test_accuracy"], float).tolist(),
    "train_accuracy": np.asarray(row["train_accuracy"], float).tolist(),
    "learned": learned.tolist(),
    "selected": {a: int(np.sum(learned == a)) for a in OUTCOMES},
    "counts_rate_mean": float(rate.mean()),
    "counts_rate_sd": float(rate.std(ddof=1)) if rate.size > 1 else 0.0,
  }


def fisher_p(condition: dict, unweighted: dict, algorithm: str) -> float:
  """Fisher's exact test (two-sided) of ``algorithm``'s share of seeds in a condition against the
  unweighted one: the 2 × 2 table of seeds that learned it and seeds that did not."""
  n = sum(condition["selected"].values())
  m = sum(unweighted["selected"].values())
  a, b = condition["selected"][algorithm], unweighted["selected"][algorithm]
  return float(scipy.stats.fisher_exact([[a, n - a], [b, m - b]]).pvalue)


def refs_summary(refs: dict) -> dict:
  """The reference solutions' numbers for summary.json: everything but their params."""
  return {a: {k: v for k, v in r.items() if k != "params"} for a, r in refs.items()}


def paired_wilcoxon_p(a, b) -> float | None:
  """The Wilcoxon signed-rank p-value of paired samples ``a`` and ``b``; None when there are fewer
  than two pairs or no pair differs (the test is undefined)."""
  d = np.asarray(a) - np.asarray(b)
  if d.size < 2 or np.all(d == 0):
    return None
  return float(scipy.stats.wilcoxon(a, b).pvalue)
