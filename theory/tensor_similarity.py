"""Tensor similarity (Cohen et al. 2026, arXiv:2605.15183): the recursion, the Gaussian identities,
the weight-symmetry invariances and when the similarity is 1.

Checks (float64; each prints measured vs predicted and its tolerance; exit 1 if any fails):

1. The Gram recursion equals the inner product of the materialised tensors, for networks with one
   and two bilinear layers (plain, with linear layers between, and a converted residual
   ``BilinearNet`` with biases), node-wise symmetrised and not. Tolerance 1e-5 relative: float64
   round-off is ~1e-15, so anything above 1e-5 is a wrong formula, not rounding.
2. One bilinear layer, ``x ~ N(0, I)``: ``E⟨f_a(x), f_b(x)⟩ = 2⟨B_a^s, B_b^s⟩ + ⟨t_a, t_b⟩`` (and
   the version with linear and constant terms for input ``[1; x]``) against a Monte-Carlo mean,
   within 3 standard errors of that mean.
3. The multilinear identity: on independent copies ``x₁ … x_{2ⁿ}``, ``E⟨T_a(x₁, …), T_b(x₁, …)⟩ =
   ⟨T_a, T_b⟩`` at depths 1 and 2, within 3 standard errors. (At depth 2 the *same-input*
   expectation differs, and is printed for contrast.)
4. Invariances of a residual ``BilinearNet`` (depth 2, biases), to 1e-6: a hidden-unit permutation,
   a per-unit rescaling ``(a·l, b·r, d/(ab))``, an ``L ↔ R`` swap of half the units, and a rotation
   of the residual basis (embedding and head rotated together). Each transformed network computes
   the same function (checked to 1e-9) while its naive weight cosine moves away from 1 (printed).
5. Similarity 1 only for equal functions (up to a positive factor): ``sim(a, a) = sim(a, 3a) = 1``
   to 1e-12; ``1 − sim = ½‖T̂_a − T̂_b‖²`` (normalised materialised tensors) to 1e-8 absolute, so
   the value 1 means equal tensors and hence equal functions; a perturbation of one weight by 1e-2
   gives ``1 − sim > 1e-9``; and no pair of 20 independently drawn networks reaches 0.99.
6. Log-space: a 10-bilinear-layer network with weights ×10 has ``⟨T, T⟩`` far beyond float64's
   range, yet its self-similarity is 1 to 1e-9 and its similarity to a perturbed copy is finite and
   below 1.

    python -m theory.tensor_similarity
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import rng as rng_lib
from mechjax.models import bilinear as bl
from mechjax.similarity import baselines
from mechjax.similarity import reference
from mechjax.similarity import tensor as ts


class Report:
  def __init__(self, verbose: bool = True):
    self.ok = True
    self.results: dict[str, bool] = {}
    self.verbose = verbose

  def check(self, name, measured, predicted, tol, passed=None):
    passed = abs(measured - predicted) <= tol if passed is None else passed
    self.ok &= bool(passed)
    self.results[name] = bool(passed)
    if self.verbose:
      print(
        f"{'PASS' if passed else 'FAIL'}  {name}: measured {measured:.6g}, predicted "
        f"{predicted:.6g}, tolerance {tol:.3g}"
      )


def _net(model, keys, x):
  """``model.init`` for a batch of keys, in one compiled program, as float64."""
  params = jax.jit(jax.vmap(model.init, in_axes=(0, None)))(keys, x)
  return jax.tree.map(lambda v: v.astype(jnp.float64), params)


def recursion_vs_brute_force(report, rng, width):
  d, h, o = width, width + 1, 3
  cases = {
    "1 bilinear": lambda: [reference.random_bilinear(rng, h, d, o)],
    "2 bilinear": lambda: [
      reference.random_bilinear(rng, h, d, d),
      reference.random_bilinear(rng, h - 2, d, o),
    ],
    "linear, 2 bilinear, linear": lambda: [
      reference.random_linear(rng, d, d + 1),
      reference.random_bilinear(rng, h, d, d),
      reference.random_bilinear(rng, h, d, d),
      reference.random_linear(rng, o, d),
    ],
  }
  for name, make in cases.items():
    a, b = make(), make()
    for sym in (True, False):
      r, bf = (
        float(ts.tensor_inner(a, b, symmetrize=sym)),
        float(reference.brute_force_inner(a, b, symmetrize=sym)),
      )
      report.check(
        f"recursion = brute force, {name}, {'node-wise symmetrised' if sym else 'unsymmetrised'} "
        "(relative error)",
        abs(r - bf) / abs(bf),
        0.0,
        1e-5,
      )
  model = bl.BilinearNet(o, d_model=d - 1, hidden=h, depth=2, use_bias=True)
  keys = jax.random.split(jax.random.PRNGKey(int(rng.integers(1 << 30))))
  both = _net(model, keys, jnp.zeros((1, d)))  # two networks, one compiled init
  a, b = (bl.to_layers(model, jax.tree.map(lambda v, i=i: v[i], both)) for i in range(2))
  r, bf = float(ts.tensor_inner(a, b)), float(reference.brute_force_inner(a, b))
  report.check(
    "recursion = brute force, residual BilinearNet with biases (homogeneous form, relative error)",
    abs(r - bf) / abs(bf),
    0.0,
    1e-5,
  )


def gaussian_single_layer(report, rng, key, width, samples):
  d, o = width, 3
  a = [reference.random_bilinear(rng, width + 2, d, o)]
  b = reference.perturbed(rng, a)
  for i, constant in enumerate((False, True)):
    exact = float(ts.gaussian_inner(a, b, constant=constant))
    mean, se = reference.monte_carlo_inner(
      a, b, jax.random.fold_in(key, i), samples, constant=constant
    )
    label = "input [1; x]" if constant else "input x"
    report.check(
      f"one layer, {label}: E<f_a, f_b> (Monte Carlo, {samples} draws, s.e. {se:.3g}) vs "
      "2<B_a^s, B_b^s> + <t_a, t_b> (+ linear, constant terms)",
      mean,
      exact,
      3 * se,
    )
    if not constant:  # the check has the power to reject the formula without Isserlis' factor 2
      wrong = exact - float(ts.tensor_inner(a, b))
      report.check(
        "  ... and rejects <B_a^s, B_b^s> + <t_a, t_b> (the factor 2 dropped): |MC - wrong| > 3 "
        "s.e.",
        abs(mean - wrong),
        0.0,
        3 * se,
        passed=abs(mean - wrong) > 3 * se,
      )


def multilinear_identity(report, rng, key, width, samples):
  d, h, o = width, width + 1, 3
  nets = {
    1: lambda: [reference.random_bilinear(rng, h, d, o)],
    2: lambda: [reference.random_bilinear(rng, h, d, d), reference.random_bilinear(rng, h, d, o)],
  }
  for depth, make in nets.items():
    a = make()
    b = reference.perturbed(rng, a)
    exact = float(ts.tensor_inner(a, b))
    mean, se = reference.monte_carlo_inner(
      a, b, jax.random.fold_in(key, depth), samples, independent_copies=True
    )
    report.check(
      f"depth {depth}: E<T_a(x_1..x_{2**depth}), T_b(x_1..)> over independent copies vs <T_a, T_b> "
      f"(s.e. {se:.3g})",
      mean,
      exact,
      3 * se,
    )
    if depth == 2:
      same, se_same = reference.monte_carlo_inner(a, b, rng_lib.fold(key, "same-input"), samples)
      print(
        f"      (same input in every slot at depth 2: E<f_a, f_b> = {same:.4g} ± {se_same:.2g}, "
        "not <T_a, T_b> = "
        f"{exact:.4g}; it is not a Frobenius product)"
      )


def invariances(report, key, width):
  model = bl.BilinearNet(4, d_model=width, hidden=width + 2, depth=2, use_bias=True)
  k_init, k_x, k_perm, k_scale, k_swap, k_q = jax.random.split(key, 6)
  x = jax.random.normal(k_x, (64, 5))
  params = jax.tree.map(lambda v: v[0], _net(model, k_init[None], x))
  base = bl.to_layers(model, params)
  apply = jax.jit(model.apply)
  y = apply(params, x)
  h = model.hidden
  p = params["params"]

  def with_mlp(fn):
    q = {**p}
    for i in range(model.depth):
      q[f"block_{i}"] = {"mlp": {**fn(i, p[f"block_{i}"]["mlp"])}}
    return {"params": q}

  perm = lambda i, m: bl.permute_hidden(m, jax.random.permutation(jax.random.fold_in(k_perm, i), h))
  scale = lambda i, m: bl.rescale_hidden(
    m,
    jnp.exp(jax.random.normal(rng_lib.fold(k_scale, "left", i), (h,))),
    jnp.exp(jax.random.normal(rng_lib.fold(k_scale, "right", i), (h,))),
  )
  swap = lambda i, m: bl.swap_left_right(
    m, jax.random.bernoulli(jax.random.fold_in(k_swap, i), 0.5, (h,))
  )
  q = jnp.linalg.qr(jax.random.normal(k_q, (width, width), jnp.float64))[0]
  transformed = {
    "hidden-unit permutation": with_mlp(perm),
    "per-unit rescaling (a l, b r, d/(ab))": with_mlp(scale),
    "L<->R swap of a random half of the units": with_mlp(swap),
    "rotation of the residual basis (embedding and head with it)": bl.rotate_residual(
      model, params, q
    )[1],
  }
  for name, tp in transformed.items():
    other = bl.to_layers(model, tp)
    same_fn = float(jnp.max(jnp.abs(apply(tp, x) - y)) / jnp.max(jnp.abs(y)))
    sim = float(ts.tensor_similarity(base, other))
    inner_rel = float(abs(ts.tensor_inner(base, other) / ts.tensor_inner(base, base) - 1))
    wc = float(baselines.weight_cosine(base, other))
    report.check(
      f"{name}: the function is unchanged (max relative output difference)", same_fn, 0.0, 1e-9
    )
    report.check(f"{name}: 1 - tensor similarity (weight cosine {wc:.3f})", 1 - sim, 0.0, 1e-6)
    report.check(f"{name}: <T_a, T_b> / <T_a, T_a> - 1", inner_rel, 0.0, 1e-6)
  # The swap invariance needs the symmetrisation: without it the similarity moves.
  other = bl.to_layers(model, transformed["L<->R swap of a random half of the units"])
  unsym = float(ts.tensor_similarity(base, other, symmetrize=False))
  report.check(
    "without symmetrisation the L<->R swap is visible (1 - similarity > 1e-3)",
    1 - unsym,
    0.0,
    0.0,
    passed=1 - unsym > 1e-3,
  )


def one_only_for_equal_functions(report, rng, width, pairs=20):
  d, h, o = width, width + 1, 3
  make = lambda: [reference.random_bilinear(rng, h, d, d), reference.random_bilinear(rng, h, d, o)]
  a = make()
  scaled = a[:-1] + [{**a[-1], "out": 3.0 * a[-1]["out"]}]
  report.check("sim(a, a) = 1", float(ts.tensor_similarity(a, a)), 1.0, 1e-12)
  report.check(
    "sim(a, 3a) = 1 (cosine ignores a positive factor)",
    float(ts.tensor_similarity(a, scaled)),
    1.0,
    1e-12,
  )
  b = make()
  ta, tb = np.asarray(reference.materialize(a)), np.asarray(reference.materialize(b))
  dist = 0.5 * np.sum((ta / np.linalg.norm(ta) - tb / np.linalg.norm(tb)) ** 2)
  sim = float(ts.tensor_similarity(a, b))
  report.check(
    "1 - sim(a, b) = 1/2 ||T_a/|T_a| - T_b/|T_b| ||^2 (so sim = 1 iff the tensors, hence the "
    "functions, are proportional)",
    1 - sim,
    dist,
    1e-8,
  )
  nudged = [dict(layer) for layer in a]
  nudged[0]["left"] = nudged[0]["left"].copy()
  nudged[0]["left"][0, 0] += 1e-2
  gap = 1 - float(ts.tensor_similarity(a, nudged))
  report.check("one weight moved by 1e-2: 1 - sim > 1e-9", gap, 0.0, 0.0, passed=gap > 1e-9)
  best = max(float(ts.tensor_similarity(make(), make())) for _ in range(pairs))
  report.check(
    f"largest similarity over {pairs} pairs of independent networks < 0.99",
    best,
    0.0,
    0.99,
    passed=best < 0.99,
  )


def log_space(report, rng, width, depth=10):
  net = [reference.random_bilinear(rng, width, width, width) for _ in range(depth)]
  net = [{k: 10.0 * v for k, v in layer.items()} for layer in net]
  c, _ = ts.log_gram(net, net)
  nudged = [dict(layer) for layer in net]
  nudged[-1] = {
    **nudged[-1],
    "out": nudged[-1]["out"] + 0.01 * rng.normal(size=nudged[-1]["out"].shape),
  }
  self_sim = float(ts.tensor_similarity(net, net))
  other = float(ts.tensor_similarity(net, nudged))
  print(
    f"      depth {depth}: log <T, T> = {float(c):.4g} (float64 overflows above 709.8); "
    f"naive inner product = {float(ts.tensor_inner(net, net))}"
  )
  report.check(f"depth {depth}, weights x10: self-similarity in log space", self_sim, 1.0, 1e-9)
  report.check(
    f"depth {depth}: similarity to a perturbed copy is finite and < 1",
    other,
    0.5,
    0.5,
    passed=bool(np.isfinite(other) and other < 1),
  )


def run_checks(
  *, seed: int = 0, width: int = 5, samples: int = 400_000, verbose: bool = True
) -> Report:
  """All checks in float64 (inside ``jax.enable_x64``, so importing this module changes nothing)."""
  report = Report(verbose)
  rng = np.random.default_rng(seed)
  with jax.enable_x64(True):
    recursion_vs_brute_force(report, rng, width)
    gaussian_single_layer(report, rng, rng_lib.key(seed, "gaussian"), width, samples)
    multilinear_identity(report, rng, rng_lib.key(seed, "multilinear"), width, samples)
    invariances(report, rng_lib.key(seed, "invariances"), width + 3)
    one_only_for_equal_functions(report, rng, width)
    log_space(report, rng, width)
  return report


def main(argv):
  del argv
  report = run_checks(seed=FLAGS.seed, width=FLAGS.width, samples=FLAGS.samples)
  print("PASS" if report.ok else "FAIL")
  sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
  from absl import flags

  from mechjax import cli

  flags.DEFINE_integer("seed", 0, "Seed of the random networks and the Monte-Carlo draws.")
  flags.DEFINE_integer(
    "width", 5, "Input width of the brute-force cases (their tensors have width^5 entries)."
  )
  flags.DEFINE_integer("samples", 400_000, "Monte-Carlo draws per Gaussian check.")
  cli.positive_int("seed", minimum=0)
  cli.positive_int("width", minimum=2)
  cli.positive_int("samples", minimum=100)
  FLAGS = flags.FLAGS
  cli.execute(main)
