"""The local learning coefficient over training: a deep linear network learning a rank-3 teacher mode by mode.

    python -m experiments.llc_dynamics                      # CPU defaults: 2 seeds, 40 checkpoints, ~4 min
    python -m experiments.llc_dynamics --localization=100 --llc_draws=4000 --widths=4,6,6,4

Writes config.json, metrics.jsonl, llc.jsonl, summary.json and figures/llc_dynamics.png to --workdir
(default runs/llc_dynamics). See mechjax/studies/llc_dynamics.py for what is estimated and compared.
"""

from absl import flags

from mechjax.studies import llc_dynamics as study
from mechjax.train import flags as shared

shared.define_shared_flags("llc_dynamics", steps=4000, num_seeds=2, log_every=50, checkpoint_every=100)
flags.DEFINE_list("widths", ["5", "5", "5", "5"], "Layer widths H_0,...,H_L of the deep linear network (input first).")
flags.DEFINE_list("singular_values", ["3", "2", "1"], "The teacher's singular values; their number is its rank.")
flags.DEFINE_float("noise", 0.0, "Standard deviation of Gaussian label noise (0: the teacher is a true parameter).")
flags.DEFINE_integer("n", 10_000, "Training samples; the LLC is estimated on the same set with nβ = n / ln n.")
flags.DEFINE_float("init_scale", 0.01, "Standard deviation of the initial weights (small: modes are learned in stages).")
flags.DEFINE_integer("batch_size", 64, "Training minibatch size.")
flags.DEFINE_float("learning_rate", 0.05, "SGD step size.")
flags.DEFINE_integer("llc_chains", 4, "SGLD chains per LLC estimate (vmapped).")
flags.DEFINE_integer("llc_draws", 2000, "SGLD draws per chain, after burn-in.")
flags.DEFINE_integer("llc_burnin", 200, "SGLD burn-in steps per chain.")
flags.DEFINE_float("llc_step_size", 1e-5, "SGLD step size ε.")
flags.DEFINE_integer("llc_batch_size", 256, "SGLD minibatch size.")
flags.DEFINE_list("localization", ["100", "1000"], "Localization strengths γ; the LLC is estimated for each.")
flags.DEFINE_float("nbeta", 0.0, "Inverse temperature times n; 0 means n / ln n.")

flags.register_validator("widths", lambda v: len(v) >= 3 and all(w.isdigit() and int(w) >= 1 for w in v),
                         message="must be at least three positive integers (input, hidden..., output), e.g. 5,5,5,5")
shared.float_list("singular_values", minimum=1e-12)
shared.float_list("localization", minimum=0.0)
flags.register_validator("localization", lambda v: len({float(g) for g in v}) == len(v), message="must not repeat a value")
for _name in ("noise", "nbeta"):
  shared.positive_float(_name, allow_zero=True)
for _name in ("init_scale", "learning_rate", "llc_step_size"):
  shared.positive_float(_name)
for _name, _minimum in (("n", 2), ("batch_size", 1), ("llc_chains", 1), ("llc_draws", 1), ("llc_burnin", 0),
                        ("llc_batch_size", 1)):
  shared.positive_int(_name, minimum=_minimum)
flags.register_multi_flags_validator(
    ["widths", "singular_values"],
    lambda f: not all(w.isdigit() for w in f["widths"]) or len(f["singular_values"]) <= min(int(w) for w in f["widths"]),
    message="the teacher's rank (the number of --singular_values) must not exceed the narrowest of --widths")
flags.register_multi_flags_validator(
    ["n", "batch_size", "llc_batch_size"], lambda f: max(f["batch_size"], f["llc_batch_size"]) <= f["n"],
    message="--batch_size and --llc_batch_size must not exceed --n")
FLAGS = flags.FLAGS


def main(argv):
  values = shared.start(argv)
  if values is None:
    return
  summary = study.run(study.config_from_flags(values), FLAGS.workdir)
  lams = summary["closed_form_llc_by_rank"]
  print(f"wrote {FLAGS.workdir}/summary.json and figures/{summary['figures'][0]}")
  print(f"  closed-form λ(r) for r = 0..{len(lams) - 1} learned modes: {', '.join(f'{x:g}' for x in lams)}")
  for gamma, g in summary["localizations"].items():
    print(f"  γ = {gamma}: final LLC {g['final_llc_mean']:.2f} ± {g['final_llc_sd_over_seeds']:.2f} (sd over seeds) "
          f"vs λ({len(lams) - 1}) = {lams[-1]:g} ({100 * g['final_relative_error']:+.1f}%); "
          + "; ".join(f"r={r}: median {v['median_llc']:.2f}, {100 * v['negative_fraction']:.0f}% negative"
                      for r, v in g["by_learned_modes"].items()))


if __name__ == "__main__":
  shared.run(main)
