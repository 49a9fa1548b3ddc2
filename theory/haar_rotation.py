"""Haar rotations: closed forms, the Weyl eigen-angle density, and which tests can see a privileged
basis.

Checks (each prints measured vs predicted and its tolerance; exit 1 if any fails):

1. ``E‖R − I‖²_F = 2d`` for Haar ``R`` in O(d): ``‖R − I‖² = 2d − 2 tr R`` with ``E tr R = 0`` and
   ``Var tr R = 1`` (d ≥ 2). Tolerance: 4 Monte-Carlo standard errors, ``4 · 2/√M``.
2. ``‖R − I‖_F`` concentrates at ``√(2d)`` with sd ``≈ 1/√(2d)`` (delta method). Tolerance on the
   sd: 4 standard errors of a sample sd, ``4/√(2M)`` relative, plus the ``O(1/d)`` delta-method
   term.
3. Weyl's one-point eigen-angle density for SO(d), odd and even d, against a Monte-Carlo histogram.
   Tolerance: the largest bin deviation within 5 binomial standard errors (angles of one matrix
   repel, so the binomial error over-states the real one).
4. Power. The two tests used to call fitted rotations "Haar" (``‖R − I‖_F`` near ``√(2d)``, and an
   i.i.d. KS test of the eigen-angles against a pool) both accept a random signed permutation; the
   calibrated signed-permutation distance of :func:`mechjax.align.haar.haar_test` rejects it (p ≤
   0.01), while Haar samples are rejected at about the nominal 5% rate.

    python -m theory.haar_rotation
"""

import sys

import jax
import numpy as np
from absl import flags
from scipy import integrate
from scipy import stats

from mechjax import cli
from mechjax import rng as rng_lib
from mechjax.align import haar as H

flags.DEFINE_list("dims", ["8", "64", "512"], "Dimensions d for the closed-form checks.")
flags.DEFINE_integer(
  "samples", 2000, "Haar samples per dimension (fewer at d = 512, see --max_elements)."
)
flags.DEFINE_integer(
  "max_elements", 200_000_000, "Cap on samples * d^2 per dimension, to bound memory and time."
)
flags.DEFINE_integer("power_dim", 32, "Dimension of the power check.")
flags.DEFINE_integer(
  "power_draws", 40, "Haar draws whose rejection rate is measured in the power check."
)
flags.DEFINE_integer("seed", 0, "Base seed.")
flags.register_validator(
  "dims",
  lambda v: bool(v) and all(s.isdigit() and int(s) >= 2 for s in v),
  message="must be a list of integers >= 2",
)
for _name in ("samples", "max_elements", "power_dim", "power_draws"):
  cli.positive_int(_name, minimum=2)
cli.positive_int("seed", minimum=0)
FLAGS = flags.FLAGS


class Report:
  def __init__(self):
    self.ok = True

  def check(self, name, measured, predicted, tol, passed=None):
    passed = abs(measured - predicted) <= tol if passed is None else passed
    self.ok &= bool(passed)
    print(
      f"{'PASS' if passed else 'FAIL'}  {name}: measured {measured:.4g}, predicted "
      f"{predicted:.4g}, tolerance {tol:.3g}"
    )


def closed_forms(report, key, d, m):
  qs = np.asarray(H.haar_orthogonal(key, d, shape=(m,)), np.float64)
  tr = np.trace(qs, axis1=1, axis2=2)
  frob2 = 2 * d - 2 * tr
  report.check(f"d={d}: E||R-I||^2 (M={m})", frob2.mean(), 2 * d, 4 * 2 / np.sqrt(m))
  report.check(f"d={d}: Var tr R", tr.var(), 1.0, 4 * np.sqrt(2 / m) + 0.0)
  frob = np.sqrt(frob2)
  report.check(
    f"d={d}: mean ||R-I||",
    frob.mean(),
    np.sqrt(2 * d),
    4 / np.sqrt(2 * d) / np.sqrt(m) + 1 / (2 * d) ** 1.5,
  )
  sd_pred = 1 / np.sqrt(2 * d)
  report.check(f"d={d}: sd ||R-I||", frob.std(), sd_pred, sd_pred * (4 / np.sqrt(2 * m) + 2 / d))


def weyl(report, key, d, m=4000):
  qs = np.asarray(H.haar_orthogonal(key, d, special=True, shape=(m,)), np.float64)
  angles = np.concatenate([H.eigenangles(q) for q in qs])
  edges = np.linspace(0, np.pi, 13)
  expected = np.array(
    [
      integrate.quad(lambda t: H.eigenangle_density(t, d), lo, hi)[0]
      for lo, hi in zip(edges[:-1], edges[1:])
    ]
  ) * len(angles)
  z = np.max(np.abs(np.histogram(angles, edges)[0] - expected) / np.sqrt(expected))
  report.check(
    f"SO({d}) Weyl density: max |count - expected| / sqrt(expected) over 12 bins", z, 0.0, 5.0
  )


def power(report, key, d, draws):
  rng = np.random.default_rng(FLAGS.seed)
  perm = np.eye(d)[rng.permutation(d)] * rng.choice([-1.0, 1.0], d)[:, None]
  k_pool, k_test, k_draws = jax.random.split(key, 3)
  pool = np.concatenate(
    [
      H.eigenangles(q)
      for q in np.asarray(H.haar_orthogonal(k_pool, d, special=True, shape=(500,)), np.float64)
    ]
  )
  if np.linalg.det(perm) < 0:
    perm[:, 0] *= -1  # compare within SO(d), the coset of the pool
  ks_p = stats.ks_2samp(H.eigenangles(perm), pool).pvalue
  frob = np.linalg.norm(perm - np.eye(d))
  res = H.haar_test(perm, k_test, num_null=199)
  print(
    f"signed permutation, d={d}: ||R-I|| = {frob:.3f} (sqrt(2d) = {np.sqrt(2 * d):.3f}), i.i.d. KS "
    f"p = {ks_p:.3f}, calibrated p: " + ", ".join(f"{k} {v['p_value']:.3f}" for k, v in res.items())
  )
  report.check(
    "signed permutation passes ||R-I|| within 3 null sd of sqrt(2d)",
    abs(frob - np.sqrt(2 * d)),
    0.0,
    3 * res["frobenius_to_identity"]["null_sd"],
  )
  report.check(
    "signed permutation passes the i.i.d. eigen-angle KS (p > 0.05)",
    ks_p,
    1.0,
    0.95,
    passed=ks_p > 0.05,
  )
  p_perm = res["signed_permutation_distance"]["p_value"]
  report.check(
    "signed permutation rejected by the signed-permutation distance (p <= 0.01)",
    p_perm,
    0.005,
    0.005,
    passed=p_perm <= 0.01,
  )
  rejected = 0
  for i, k in enumerate(jax.random.split(k_draws, draws)):
    q = np.asarray(H.haar_orthogonal(rng_lib.fold(k, "haar-sample"), d, special=True), np.float64)
    rejected += H.haar_test(q, k, num_null=99)["signed_permutation_distance"]["p_value"] <= 0.05
  rate = rejected / draws
  # Under the null the rate is Binomial(draws, 0.05)/draws: allow up to the 99.9th percentile.
  limit = stats.binom.ppf(0.999, draws, 0.05) / draws
  report.check(
    f"Haar samples rejected at 5% (rate over {draws} draws)",
    rate,
    0.05,
    limit - 0.05,
    passed=rate <= limit,
  )


def main(argv):
  del argv
  report = Report()
  for d in (int(s) for s in FLAGS.dims):
    m = int(min(FLAGS.samples, FLAGS.max_elements // d**2))
    closed_forms(report, rng_lib.key(FLAGS.seed, "closed-forms", d), d, m)
  for d in (8, 9):
    weyl(report, rng_lib.key(FLAGS.seed, "weyl", d), d)
  power(report, rng_lib.key(FLAGS.seed, "power"), FLAGS.power_dim, FLAGS.power_draws)
  print("PASS" if report.ok else "FAIL")
  sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
  cli.execute(main)
