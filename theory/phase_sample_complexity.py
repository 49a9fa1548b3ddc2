"""Online SGD needs ~N³ samples to find phase (4th-cumulant) structure in isotropic inputs.

Claim (Ricci, Merger & Goldt, arXiv:2605.16913; the online-SGD thresholds of Ben Arous, Gheissari &
Jagannath, arXiv:2003.10409, for information exponent k = 4): on the isotropic (alpha = 0) spiked-
cumulant task, spherical online SGD reaches weak recovery after n ≫ N³ log² N samples, and not for
n ≪ N³. We measure the samples to |m| ≥ 0.5 of ``--num_spikes`` teacher spikes × ``--num_seeds``
neurons at each N of a grid, all in one vmapped program per N, and fit the exponent ``a`` of the
pooled median, n ≈ c·N^a, with no log factor divided out.

    PASS when a lies in [3 + b_lo·s − (q_hi − a), 3 + b_hi·s + (a − q_lo)]
    and neither reach exceeds --max_tolerance.

* ``[3 + b_lo·s, 3 + b_hi·s]`` is what the law n = c·N³·(log N)^b predicts on the grid for b in
  ``--log_powers`` (default [0, 2], the theorem's two bounds), with s the least-squares slope of
  ln ln N on ln N over the grid (0.29 for N = 16–64). A free b cannot be fitted beside a here (the
  two are confounded over two octaves), so the band carries it.
* The reaches are the Monte-Carlo error of a: the central 95% interval ``[q_lo, q_hi]`` of a over
  a bootstrap that resamples spikes, then seeds within spikes (``--confidence``), so the check
  passes when that interval overlaps the band. At alpha = 0 every spike is the same problem up to a
  rotation (fixing the constant direction, which the data never carry), so the spikes' spread there
  is the seeds' spread; the bootstrap carries both. A grid whose error reaches further than
  ``--max_tolerance`` cannot tell N² from N³ and FAILs as inconclusive.
* The check is shown able to fail on every run: the same samples rescaled so that their medians
  grow exactly like N² (the control) must FAIL, or the script FAILs. The same with N⁴ is printed
  too; with 128 neurons per N the bootstrap interval of a is about ±0.35 (±0.5 with 64), just
  narrow enough for that control to FAIL as well.

The statistic of the earlier release, the slope of n / log² N against the window [``--low``,
``--high``], is printed beside it for one release. It could not fail for the right reason: if n grew
exactly like N³, that slope would be about 3 − 2/ln N ≈ 2.4 on N = 16–64, outside its window.

Then, at the largest N, each spike is put in the dominant principal subspace of a power-law spectrum
(alpha ≥ 1) and the speed-up n(alpha = 0) / n(alpha) is measured: pooled, with a bootstrap over
spikes and seeds, and per spike (the pooled isotropic median over that spike's median, since at
alpha = 0 every spike is the same problem up to a rotation), with its spread over spikes.

    python -m theory.phase_sample_complexity  # N = 16..64, 8 spikes x 16 seeds
    python -m theory.phase_sample_complexity --dims=12,16,24,32 --num_spikes=4 \\
        --max_tolerance=1.0 --speedup_alphas=  # the fast version (.ci/run runs it)
"""

import os
import sys

import numpy as np
from absl import flags

from mechjax import cli
from mechjax import plotting
from mechjax.train import metrics as metrics_lib
from theory import weak_recovery

flags.DEFINE_list("dims", ["16", "24", "32", "48", "64"], "Input dimensions N of the grid.")
flags.DEFINE_integer("num_seeds", 16, "Independent neurons per spike and N.")
flags.DEFINE_integer("num_spikes", 8, "Teacher spikes per N (vmapped with the seeds).")
flags.DEFINE_integer("seed", 0, "Base seed (spikes and initialisations).")
flags.DEFINE_float("beta", 5.0, "Spike strength beta.")
flags.DEFINE_float(
  "lr_scale",
  0.02,
  "Step size lr = lr_scale / N, with batch B = N (about 5x below the noise threshold).",
)
flags.DEFINE_list(
  "log_powers",
  ["0", "2"],
  "The range of b in the law n = c N^3 (log N)^b (the theorem's bounds: 0 and 2).",
)
flags.DEFINE_float(
  "confidence", 0.95, "Confidence of the tolerance (two-sided, from the bootstrap's sd)."
)
flags.DEFINE_float(
  "max_tolerance",
  0.5,
  "FAIL as inconclusive when the tolerance on the exponent is wider than this.",
)
flags.DEFINE_float("low", 2.5, "The earlier statistic's window on the slope of n / log^2 N: low.")
flags.DEFINE_float("high", 3.7, "The earlier statistic's window on the slope of n / log^2 N: high.")
flags.DEFINE_list(
  "speedup_alphas",
  ["1", "2"],
  "Power-law exponents for the speed-up at the largest N (empty: skip).",
)
flags.DEFINE_float(
  "max_factor", 20.0, "Give up on a neuron after max_factor * N^3 * log^2 N samples."
)
flags.DEFINE_integer("num_resamples", 2000, "Bootstrap resamples.")
flags.DEFINE_float(
  "quantile",
  0.65,
  "Stop each N when this share of its neurons has reached weak recovery (at least 0.5; above it, "
  "fewer bootstrap resamples have an unreached median).",
)
flags.DEFINE_string(
  "out",
  os.path.join("runs", "theory", "phase_sample_complexity"),
  "Folder for result.json and the figure.",
)
flags.register_validator(
  "dims",
  lambda v: (
    len(v) >= 2
    and all(s.isdigit() and int(s) >= 12 for s in v)
    and len({int(s) for s in v}) == len(v)
  ),
  message="must be a list of at least two different integers >= 12, e.g. 16,32,64",
)
flags.register_validator(
  "speedup_alphas",
  lambda v: all(_is_float(s) and float(s) > 0 for s in v),
  message="must be a comma-separated list of numbers > 0 (or empty)",
)
flags.register_validator(
  "log_powers",
  lambda v: len(v) in (1, 2) and all(_is_float(s) and float(s) >= 0 for s in v),
  message="must be one or two numbers >= 0, e.g. 0,2",
)
cli.positive_int("num_seeds", minimum=2)
cli.positive_int("num_spikes", minimum=1)
cli.positive_int("num_resamples", minimum=100)
cli.positive_int("seed", minimum=0)
flags.register_validator("out", lambda v: bool(v and v.strip()), message="must be a non-empty path")
flags.register_validator(
  "confidence", lambda v: 0 < v < 1, message="must be a probability in (0, 1), e.g. 0.95"
)
flags.register_multi_flags_validator(
  ["low", "high"],
  lambda d: 0 < d["low"] < d["high"],
  message="--low and --high must satisfy 0 < low < high",
)
cli.positive_float("beta")
cli.positive_float("lr_scale")
cli.positive_float("max_factor")
cli.positive_float("max_tolerance")
flags.register_validator(
  "quantile", lambda v: 0.5 <= v <= 1, message="must be in [0.5, 1], e.g. 0.65"
)
FLAGS = flags.FLAGS


def _is_float(s):
  try:
    return np.isfinite(float(s))
  except ValueError:
    return False


def measure(
  dims,
  *,
  alpha=0.0,
  num_seeds,
  num_spikes,
  seed,
  beta,
  lr_scale,
  max_factor,
  per_spike=False,
  quantile=0.65,
  log=print,
):
  """Samples to weak recovery at each N: one row per N, with ``samples`` ``(spikes, seeds)``."""
  rows = []
  for n in dims:
    setup = weak_recovery.RecoverySetup(
      shape=(n,), alpha=alpha, spike="principal", beta=beta, lr_scale=lr_scale
    )
    r = weak_recovery.samples_to_weak_recovery(
      setup,
      num_seeds=num_seeds,
      num_spikes=num_spikes,
      seed=seed,
      max_samples=int(max_factor * n**3 * np.log(n) ** 2),
      per_spike=per_spike,
      quantile=quantile,
    )
    spikes = weak_recovery.spread(r["spike_medians"])
    rows.append(
      {
        "N": n,
        "alpha": alpha,
        "median_samples": r["median"],
        "spike_medians": r["spike_medians"].tolist(),
        "spike_median_spread": spikes,
        "samples": r["samples"].tolist(),
        "reached": int(np.isfinite(r["samples"]).sum()),
      }
    )
    log(
      f"  N={n:3d} alpha={alpha:g}: median samples to |m|>=0.5: {r['median']:.3g} "
      f"({rows[-1]['reached']}/{num_spikes * num_seeds} reached); n/N^3 = "
      f"{r['median'] / n**3:.2f}; per-spike medians 16-84%: [{spikes['p16']:.3g}, "
      f"{spikes['p84']:.3g}]"
    )
  return rows


def _verdict(check: dict) -> str:
  return "PASS" if check["passed"] else "FAIL"


def main(argv):
  del argv
  dims = sorted(int(d) for d in FLAGS.dims)
  log_powers = tuple(float(b) for b in FLAGS.log_powers)
  common = dict(
    num_seeds=FLAGS.num_seeds,
    num_spikes=FLAGS.num_spikes,
    seed=FLAGS.seed,
    beta=FLAGS.beta,
    lr_scale=FLAGS.lr_scale,
    max_factor=FLAGS.max_factor,
    quantile=FLAGS.quantile,
  )
  law = dict(
    log_powers=log_powers,
    confidence=FLAGS.confidence,
    max_tolerance=FLAGS.max_tolerance,
    num_resamples=FLAGS.num_resamples,
    seed=FLAGS.seed,
  )
  print(
    f"spherical online SGD, He4 loss, beta={FLAGS.beta}, B=N, lr={FLAGS.lr_scale}/N, "
    f"{FLAGS.num_spikes} spikes x {FLAGS.num_seeds} seeds per N"
  )
  rows = measure(dims, **common)
  samples = [np.array(r["samples"], float) for r in rows]
  check = weak_recovery.check_law(dims, samples, **law)
  control = weak_recovery.check_law(dims, weak_recovery.inject_exponent(dims, samples, 2.0), **law)
  control_up = weak_recovery.check_law(
    dims, weak_recovery.inject_exponent(dims, samples, 4.0), **law
  )
  able_to_fail = not control["passed"]
  passed = check["passed"] and able_to_fail
  if check["exponent"] is None:
    print(f"FAIL: {check['reason']}; no exponent can be fitted")
    sys.exit(1)
  b_lo, b_hi = min(log_powers), max(log_powers)
  print(
    f"fitted law: n = c N^a with a = {check['exponent']:.2f} (pooled median over spikes and seeds)"
  )
  print(
    f"  predicted: a in [{check['band'][0]:.2f}, {check['band'][1]:.2f}] for n = c N^3 (log N)^b, "
    f"b in [{b_lo:g}, {b_hi:g}] (ln ln N rises {weak_recovery.log_factor_slope(dims):.3f} per "
    "unit ln N here)"
  )
  q_lo, q_hi = check["bootstrap_interval"]
  print(
    f"  tolerance: -{check['tolerance'][0]:.2f} / +{check['tolerance'][1]:.2f}: the "
    f"{100 * FLAGS.confidence:g}% bootstrap interval of a, [{q_lo:.2f}, {q_hi:.2f}], over "
    f"{FLAGS.num_resamples} resamples of spikes, then seeds "
    f"({100 * check['bootstrap_dropped']:.1f}% dropped)"
  )
  print(
    f"  interval: [{check['interval'][0]:.2f}, {check['interval'][1]:.2f}] -> {_verdict(check)} "
    f"({check['reason']})"
  )
  print(
    f"  control, the same samples with n ∝ N^2 injected: a = {control['exponent']:.2f} -> "
    f"{_verdict(control)} ({control['reason']})"
  )
  print(
    f"  (and with n ∝ N^4 injected: {_verdict(control_up)}, {control_up['reason']}; reported, "
    "not required)"
  )
  medians = np.array(check["medians"])
  old = weak_recovery.fit_exponent(np.array(dims), medians, log_power=2.0)[0]
  old_boot = weak_recovery.bootstrap_exponent(
    np.array(dims), samples, seed=FLAGS.seed, num_resamples=FLAGS.num_resamples
  )
  old_passed = FLAGS.low <= old <= FLAGS.high
  local = np.diff(np.log(medians / np.log(dims) ** 2)) / np.diff(np.log(dims))
  print(
    f"  earlier statistic (reported for one release): slope of n/log^2 N {old:.2f}, 68% "
    f"[{old_boot[0]:.2f}, {old_boot[1]:.2f}], window [{FLAGS.low}, {FLAGS.high}] -> "
    f"{'PASS' if old_passed else 'FAIL'}; local slopes {np.round(local, 2).tolist()}"
  )

  speedups = []
  alphas = [float(a) for a in FLAGS.speedup_alphas]
  if alphas:
    big = dims[-1]
    print(f"power-law speed-up at N={big}, spikes in the principal subspace:")
    base = samples[-1]
    for a in alphas:
      r = measure([big], alpha=a, per_spike=True, **common)[0]
      faster = np.array(r["samples"], float)
      per = weak_recovery.spike_speedups(base, faster)
      pooled = rows[-1]["median_samples"] / r["median_samples"]
      boot = weak_recovery.bootstrap_speedup(
        base, faster, num_resamples=FLAGS.num_resamples, seed=FLAGS.seed
      )
      sp = weak_recovery.spread(per)
      speedups.append(
        {
          "alpha": a,
          "median_samples": r["median_samples"],
          "speedup": pooled,
          "speedup_bootstrap_68": list(boot),
          "per_spike_speedups": per.tolist(),
          "per_spike_spread": sp,
          "samples": r["samples"],
        }
      )
      print(
        f"  alpha={a:g}: n(alpha=0)/n(alpha) = {pooled:.1f}x pooled (68% over spikes and seeds "
        f"[{boot[0]:.1f}, {boot[1]:.1f}]); per spike: median {sp['median']:.1f}x, 16-84% "
        f"[{sp['p16']:.1f}, {sp['p84']:.1f}], range [{np.min(per):.1f}, {np.max(per):.1f}]"
      )

  os.makedirs(FLAGS.out, exist_ok=True)
  exponent, prefactor = weak_recovery.fit_exponent(np.array(dims), medians, log_power=0.0)
  fig = plotting.loglog_fit_figure(
    np.array(dims, float),
    medians,
    exponent,
    prefactor,
    os.path.join(FLAGS.out, "exponent.png"),
    xlabel="N",
    ylabel="samples to weak recovery",
    title=(
      f"isotropic spiked cumulant: n ∝ N^{exponent:.2f} "
      f"(predicted [{check['band'][0]:.2f}, {check['band'][1]:.2f}])"
    ),
    scatter=[(np.full(s.size, n, float), s.reshape(-1)) for n, s in zip(dims, samples)],
    label="median over spikes and seeds",
  )
  result = {
    "law": check,
    "control_n_propto_N2": control,
    "control_n_propto_N4": control_up,
    "able_to_fail": able_to_fail,
    "passed": passed,
    "earlier_statistic": {
      "exponent_of_n_over_log2N": old,
      "bootstrap_68": list(old_boot),
      "window": [FLAGS.low, FLAGS.high],
      "passed": old_passed,
      "local_slopes": local.tolist(),
    },
    "grid": rows,
    "speedups": speedups,
    "flags": cli.flag_values(),
  }
  metrics_lib.write_json(
    os.path.join(FLAGS.out, "result.json"), result
  )  # non-finite values (unreached) become null
  print(f"wrote {FLAGS.out}/result.json and {os.path.basename(fig)}")
  if not able_to_fail:
    print("FAIL: the control (n ∝ N^2) passed too, so this grid cannot test the law")
  print("PASS" if passed else "FAIL")
  sys.exit(0 if passed else 1)


if __name__ == "__main__":
  cli.execute(main)
