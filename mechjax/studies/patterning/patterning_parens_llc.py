"""The LLC analysis of :mod:`mechjax.studies.patterning.patterning_parens`, before any retraining:

1. **The LLC's response.** At each reference solution ``w*_A`` (a model forced to algorithm ``A``)
   SGLD samples the localised posterior of the training set
   (:func:`mechjax.slt.susceptibility.estimate_susceptibilities`), with per-sample probes drawn from
   every group of training strings. The observable ``φ = L(w) − L(w*_A)`` has ``nβ·E[φ] = λ_A``,
   and it depends on the data distribution itself, so ``dλ_A/dh`` has an implicit term (the
   posterior moves) and an explicit one (the observable moves), both reported
   (:func:`mechjax.slt.susceptibility.llc_response`). The held-out loss is a second observable.
2. **Patterning.** On the simplex of group weights, the minimum-norm re-weighting ``dp``
   (:func:`mechjax.slt.patterning.patterning_weights`) that lowers ``λ_T − λ_O`` (target ``T``,
   other ``O``) by ``llc_margin`` to first order, while the held-out loss at both references stays
   put; and a random control, toward a Dirichlet draw with the same total variation.
3. **The prediction, checked.** Both references' LLCs are estimated again on the re-weighted data
   with the same chains as the unweighted estimate (:func:`measure_llcs`), and the measured ``Δλ``
   is set beside the predicted one (docs/design.md says what each outcome would mean).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from mechjax import rng
from mechjax.data import parens
from mechjax.slt import langevin
from mechjax.slt import llc as llc_lib
from mechjax.slt import patterning
from mechjax.slt import susceptibility as sus
from mechjax.studies.patterning import patterning_parens_base

REWEIGHTINGS = ("toward_counts", "toward_prefix", "random")


def analysis(cfg, model, data: dict, references: dict, ids: np.ndarray, names: list) -> dict:
  """The whole analysis at the chosen share (``data``, its strings' group ``ids`` and group
  ``names``), at the forced ``references`` (``{algorithm: {"params": w*, ...}}``): the responses
  (:func:`llc_responses`), the re-weightings (:func:`targets`, and :func:`random_reweighting` with
  the larger total variation of the two), each reference's LLC re-measured under each
  (:func:`measure_llcs`) and the comparison (:func:`compare`). The study keeps it as
  ``patterning.json``."""
  num_groups = len(names)
  base = np.bincount(ids, minlength=num_groups) / len(ids)
  chosen = patterning_parens_base.group_probes(cfg, ids, num_groups)
  responses = llc_responses(cfg, model, data, references, ids[chosen], chosen, num_groups)
  reweightings = targets(responses, base, cfg.llc_margin, cfg.ridge)
  tv = max(r["total_variation"] for r in reweightings.values())
  reweightings["random"] = random_reweighting(cfg.run.seed, base, tv, responses)
  distributions = {k: r["group_distribution"] for k, r in reweightings.items()}
  mixing = {}
  measured = measure_llcs(cfg, model, data, references, ids, distributions, mixing)
  return {
    "group_names": names,
    "base": base,
    "probes_per_group": np.bincount(ids[chosen], minlength=num_groups),
    "responses": responses,
    "reweightings": reweightings,
    "measured_llc_per_chain": measured,
    "llc_mixing": mixing,
    "comparison": compare(reweightings, measured),
  }


def llc_responses(
  cfg, model, data: dict, references: dict, sub_ids, chosen, num_groups, held_out=True
) -> dict:
  """Per reference solution (``{algorithm: {"params": w*}}``): its LLC, the group response of its
  LLC (total, implicit, explicit) and (with ``held_out``) of its held-out loss, with standard
  errors over chains, from the training strings ``chosen`` as probes (of groups ``sub_ids``).

  Returns:
    ``{algorithm: {...}}``: ``llc``, ``dllc_total``, ``dllc_implicit`` (± ``dllc_implicit_se``),
    ``dllc_explicit``, ``dtest`` (± ``dtest_se``) by group, ``test_loss_mean``, and the split-R̂
    and batch-means ESS of each probe's entry of the LLC's χ row, ``chi_rhat`` and ``chi_ess``.
  """
  train, test = jax.tree.map(jnp.asarray, (data["train"], data["test"]))

  def by_group(columns):
    return patterning.group_response(columns, sub_ids, num_groups)[0]

  def se_by_group(se):
    return patterning.group_response_se(se, sub_ids, num_groups)[0]

  out = {}
  for i, algorithm in enumerate(parens.ALGORITHMS):
    res = sus.estimate_susceptibilities(
      model.per_sample_loss,
      references[algorithm]["params"],
      train,
      jax.tree.map(lambda v: v[chosen], train),
      key=rng.key(cfg.run.seed, "llc-susceptibility", i),
      settings=cfg.sgld,
      eval_size=cfg.eval_size,
      observable=model.test_loss if held_out else None,
      observable_data=test if held_out else None,
    )
    parts = sus.llc_response(res)
    # The LLC's implicit term is nβ times the response of φ, so its error is nβ² times χ's.
    implicit_se = res.nbeta * res.nbeta * res.standard_error[0, 0]
    out[algorithm] = {
      "llc": res.llc[0],
      "dllc_total": by_group(parts["total"][0]),
      "dllc_implicit": by_group(parts["implicit"][0]),
      "dllc_explicit": by_group(parts["explicit"][0]),
      "dllc_implicit_se": se_by_group(implicit_se),
      "chi_rhat": res.chi_rhat[0, 0],
      "chi_ess": res.chi_ess[0, 0],
    }
    if held_out:
      out[algorithm]["dtest"] = by_group(res.response[0, 1])
      out[algorithm]["dtest_se"] = se_by_group(res.nbeta * res.standard_error[0, 1])
      out[algorithm]["test_loss_mean"] = res.observable_means[0, 1]
  return out


def targets(responses: dict, base: np.ndarray, margin: float, ridge: float = 0.0) -> dict:
  """The simplex re-weighting (from the training distribution over groups ``base``, with the
  inverse's ``ridge``) toward each algorithm: ``Δ(λ_T − λ_O) = −margin`` and no change of either
  reference's held-out loss, to first order, from :func:`llc_responses`; with each reference's
  predicted ``Δλ``."""
  d = {a: np.asarray(responses[a]["dllc_total"]) for a in parens.ALGORITHMS}
  g = {a: np.asarray(responses[a]["dtest"]) for a in parens.ALGORITHMS}
  out = {}
  for target in parens.ALGORITHMS:
    other = next(a for a in parens.ALGORITHMS if a != target)
    rows = np.stack([d[target] - d[other], g["counts"], g["prefix"]])
    goal = np.array([-margin, 0.0, 0.0])
    dp = patterning.patterning_weights(rows, goal, ridge=ridge, simplex=True, base=base)
    out[f"toward_{target}"] = _predicted(responses, base, dp, goal=goal)
  return out


def random_reweighting(seed: int, base: np.ndarray, total_variation: float, responses) -> dict:
  """The control: ``(1 − t)·base + t·r`` with ``r`` a Dirichlet(1) draw over the groups (the stream
  ``"random-reweighting"``) and ``t`` chosen for the given total variation (``t ≤ 1``: a total
  variation beyond ``r``'s own distance from ``base`` is not reached, and the one reached is
  reported)."""
  r = rng.numpy(seed, "random-reweighting").dirichlet(np.ones(len(base)))
  tv_r = 0.5 * np.abs(r - base).sum()
  t = min(1.0, total_variation / tv_r)
  return _predicted(responses, base, t * (r - base), goal=None)


def _predicted(responses: dict, base, dp, goal) -> dict:
  pred = {f"dllc_{a}": np.asarray(responses[a]["dllc_total"]) @ dp for a in parens.ALGORITHMS}
  pred["dllc_counts_minus_prefix"] = pred["dllc_counts"] - pred["dllc_prefix"]
  held_out = [a for a in parens.ALGORITHMS if "dtest" in responses[a]]
  pred.update({f"dtest_{a}": np.asarray(responses[a]["dtest"]) @ dp for a in held_out})
  return {
    "goal": goal,
    "group_distribution": base + dp,
    "total_variation": 0.5 * np.abs(dp).sum(),
    "predicted": pred,
  }


def measure_llcs(
  cfg, model, data: dict, references: dict, ids, distributions: dict, mixing=None
) -> dict:
  """Each reference's LLC (``{algorithm: {"params": w*}}``) on the training data and on every
  re-weighting of it (``{name: distribution over the groups ids}``), from the same chains (the key
  of the stream ``("llc-check", reference)``), per chain so that the differences are paired:
  ``{algorithm: {"unweighted" or name: LLC per chain}}``. The weighted loss is the mean of
  ``weight · ℓ`` with weights of mean 1 (``model.weighted_loss``). A dict ``mixing`` is filled
  with each estimate's ``{algorithm: {name: {"rhat", "ess_bulk"}}}``."""
  # No MALA diagnostic here: it costs a gradient per step and these estimates only feed differences.
  settings = dataclasses.replace(cfg.sgld, num_draws=cfg.llc_draws, mala=False).resolved(cfg.n)
  weights = {"unweighted": np.ones(cfg.n)}
  for name, dist in distributions.items():
    weights[name] = cfg.n * patterning.sample_weights(dist, ids)  # mean 1 over the training set
  train = jax.tree.map(jnp.asarray, data["train"])
  out = {}
  for i, algorithm in enumerate(parens.ALGORITHMS):
    out[algorithm] = {}
    for name, w in weights.items():
      est = llc_lib.estimate_llc(
        langevin.MeanLoss(model.weighted_loss),
        references[algorithm]["params"],
        {**train, "weight": jnp.asarray(w, jnp.float32)},
        key=rng.key(cfg.run.seed, "llc-check", i),
        settings=settings,
      )
      out[algorithm][name] = np.asarray(est.llc_per_chain, float)  # float64: differences follow
      if mixing is not None:
        mixing.setdefault(algorithm, {})[name] = {
          k: float(est.diagnostics[k]) for k in ("rhat", "ess_bulk")
        }
  return out


def reexamine(cfg, model, data: dict, references: dict, ids, names: list, ctx) -> dict:
  """The prediction re-examined at the sampler settings ``cfg.sgld``: the re-weightings (toward
  each algorithm by ``llc_margin``, and the random control) are those of the study's own settings
  (:func:`study_sgld`), so every setting is asked about the same ones; each is scaled to every
  total variation of ``cfg.total_variations``; the predicted ``Δλ`` is ``nβ·χ`` at ``cfg.sgld``
  times the scaled ``dp``, and the measured one is both LLCs re-estimated under it with
  ``cfg.sgld`` (:func:`measure_llcs`, paired chains). A scaled re-weighting that leaves the
  simplex is clipped to it and renormalised, and its prediction is that of the ``dp`` measured."""
  num_groups = len(names)
  base = np.bincount(ids, minlength=num_groups) / len(ids)
  chosen = patterning_parens_base.group_probes(cfg, ids, num_groups)
  own = dataclasses.replace(cfg, sgld=study_sgld(cfg))
  respond = lambda c, held_out: llc_responses(  # noqa: E731
    c, model, data, references, ids[chosen], chosen, num_groups, held_out
  )
  direction = ctx.stage("direction_responses", lambda: respond(own, True))
  here = direction if cfg.sgld == own.sgld else ctx.stage("responses", lambda: respond(cfg, False))
  reweightings = targets(direction, base, cfg.llc_margin, cfg.ridge)
  tv = max(r["total_variation"] for r in reweightings.values())
  reweightings["random"] = random_reweighting(cfg.run.seed, base, tv, direction)
  scaled, clipped = {}, []
  for name, r in reweightings.items():
    for target_tv in cfg.total_variations:
      dp = (np.asarray(r["group_distribution"]) - base) * target_tv / r["total_variation"]
      key = f"{name}@{target_tv:g}"
      if np.min(base + dp) < 0:
        clipped.append(key)
        dist = np.clip(base + dp, 0, None)
        dp = dist / dist.sum() - base
      scaled[key] = _predicted(here, base, dp, goal=None)
  mixing = {}
  distributions = {k: r["group_distribution"] for k, r in scaled.items()}
  measure_cfg = dataclasses.replace(cfg, llc_draws=cfg.sgld.num_draws)
  measured = measure_llcs(measure_cfg, model, data, references, ids, distributions, mixing)
  return {
    "responses": here,
    "reweightings": scaled,
    "clipped_to_the_simplex": clipped,
    "measured_llc_per_chain": measured,
    "llc_mixing": mixing,
    "comparison": compare(scaled, measured),
  }


def study_sgld(cfg):
  """The study's own SGLD settings (its defaults; the batch at most ``cfg.n``)."""
  own = type(cfg)().sgld
  return dataclasses.replace(own, batch_size=min(own.batch_size, cfg.n))


def compare(reweightings: dict, measured: dict) -> dict:
  """Predicted against measured ``Δλ`` for every re-weighting: the measured difference of the
  paired chains' means, with its standard error over chains (NaN with one chain)."""
  out = {}
  for name, rw in reweightings.items():
    diffs = {
      f"dllc_{a}": np.asarray(measured[a][name]) - np.asarray(measured[a]["unweighted"])
      for a in parens.ALGORITHMS
    }
    diffs["dllc_counts_minus_prefix"] = diffs["dllc_counts"] - diffs["dllc_prefix"]
    out[name] = {
      key: {
        "predicted": rw["predicted"][key],
        "measured": diff.mean(),
        "se": diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan"),
      }
      for key, diff in diffs.items()
    }
  return out


def fisher_p(condition: dict, unweighted: dict, algorithm: str) -> float:
  """Fisher's exact test (two-sided) of ``algorithm``'s share of seeds in a condition against the
  unweighted one: the 2 × 2 table of seeds that learned it and seeds that did not."""
  n = sum(condition["selected"].values())
  m = sum(unweighted["selected"].values())
  a, b = condition["selected"][algorithm], unweighted["selected"][algorithm]
  return scipy.stats.fisher_exact([[a, n - a], [b, m - b]]).pvalue
