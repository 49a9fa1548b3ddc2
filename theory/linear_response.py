"""Linear response of a posterior to data re-weighting: ``dE[φ]/dh = −nβ·Cov(φ, ΔL)``, checked
exactly.

Bayesian linear regression (n = 200, d = 3, nβ = n, a unit Gaussian prior;
:mod:`mechjax.slt.gaussian`) has a Gaussian posterior, so the derivative of each observable's
expectation under a shift of the data toward sample 0, toward sample 1, or toward a group of 20
samples is known in closed form (forward-mode autodiff of the closed-form expectation, float64).
Three observables (a weight, a prediction, the training loss) × three shifts give nine entries, each
estimated two ways with :func:`mechjax.slt.susceptibility.linear_response`:

* **exact posterior draws** (independent): PASS when every entry is within 3 Monte-Carlo standard
  errors (the sd of the centred products over √S). For a correct estimator each entry fails with
  probability 0.27%, so about 2.4% of seeds would FAIL one of the nine by chance.
* **SGLD draws** from mechjax's sampler, moments streamed inside the scan, one set per chain: PASS
  when every entry is within 3 standard errors (the spread of the per-chain estimates over √chains)
  plus an SGLD bias allowance of 5% of the entry's size. The allowance is the discretisation: at
  step ε the Euler chain's stationary covariance is inflated by about ``ε·nβ·h/4`` for curvature
  ``h`` (here h ≤ 1.7 so ≤ 0.9% at ε = 2e-4), which enters the response of a quadratic observable
  twice, plus the minibatch-noise term.

    python -m theory.linear_response
"""

import sys

import numpy as np
from absl import flags

from mechjax import cli
from mechjax.slt import gaussian
from mechjax.slt import moments as mom_lib
from mechjax.slt import susceptibility as sus

flags.DEFINE_integer(
  "exact_draws", 100_000, "Independent posterior draws for the exact-sampling check."
)
flags.DEFINE_integer("num_chains", 16, "SGLD chains (the standard error comes from their spread).")
flags.DEFINE_integer("num_draws", 100_000, "SGLD draws per chain, after burn-in.")
flags.DEFINE_integer("num_burnin", 1000, "SGLD burn-in steps per chain.")
flags.DEFINE_float("step_size", 2e-4, "SGLD step size.")
flags.DEFINE_float("bias_tolerance", 0.05, "Allowed SGLD bias, relative to each exact entry.")
flags.DEFINE_integer("seed", 0, "Seed of the data, the exact draws and the chains.")
for _name, _minimum in (
  ("exact_draws", 100),
  ("num_chains", 2),
  ("num_draws", 100),
  ("num_burnin", 0),
  ("seed", 0),
):
  cli.positive_int(_name, minimum=_minimum)
cli.positive_float("step_size")
cli.positive_float("bias_tolerance", allow_zero=True)
FLAGS = flags.FLAGS


def compare(p: gaussian.Problem, name: str, estimate, exact, error, allowance=0.0) -> bool:
  """Prints the K × M table and returns whether every entry is within 3·error +
  allowance·|exact|."""
  bound = 3 * error + allowance * np.abs(exact)
  ok = bool(np.all(np.abs(estimate - exact) <= bound))
  print(f"{name}:")
  for k, obs in enumerate(gaussian.OBSERVABLES):
    for m, shift in enumerate(p.shift_names):
      z = (estimate[k, m] - exact[k, m]) / error[k, m]
      print(
        f"  {obs:22s} {shift:22s} estimate {estimate[k, m]:+.5f}  exact {exact[k, m]:+.5f}  "
        f"({z:+.2f} s.e.; bound {bound[k, m]:.5f})"
      )
  print(f"{'PASS' if ok else 'FAIL'}  {name}")
  return ok


def main(argv):
  del argv
  p = gaussian.make_problem(seed=FLAGS.seed)
  exact = gaussian.exact_response(p)
  phi, dloss = gaussian.exact_draws(p, FLAGS.exact_draws, seed=FLAGS.seed)
  est = np.asarray(sus.linear_response(phi, dloss, p.nbeta))
  err = p.nbeta * np.asarray(sus.standard_error(phi, dloss))
  ok = compare(
    p, f"exact posterior, {FLAGS.exact_draws} independent draws (tolerance 3 s.e.)", est, exact, err
  )

  mom = gaussian.sgld_moments(
    p,
    num_chains=FLAGS.num_chains,
    num_draws=FLAGS.num_draws,
    num_burnin=FLAGS.num_burnin,
    step_size=FLAGS.step_size,
    seed=FLAGS.seed,
  )
  per_chain = p.nbeta * -np.asarray(mom_lib.moments_covariance(mom))
  merged = p.nbeta * -np.asarray(mom_lib.moments_covariance(mom_lib.moments_reduce(mom)))
  err = per_chain.std(0, ddof=1) / np.sqrt(FLAGS.num_chains)
  ok &= compare(
    p,
    f"SGLD, {FLAGS.num_chains} chains × {FLAGS.num_draws} draws, ε = {FLAGS.step_size:g}, streamed "
    "moments "
    f"(tolerance 3 s.e. + {100 * FLAGS.bias_tolerance:.0f}%)",
    merged,
    exact,
    err,
    FLAGS.bias_tolerance,
  )
  print("PASS" if ok else "FAIL")
  if not ok:
    sys.exit(1)


if __name__ == "__main__":
  cli.execute(main)
