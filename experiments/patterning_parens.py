"""Patterning on parenthesis balancing: does a susceptibility-based data re-weighting select the algorithm?

    python -m experiments.patterning_parens                 # CPU defaults: 8 seeds × 3 conditions, ~13 min
    python -m experiments.patterning_parens --chi_step=100 --ridge=1e-3

Writes config.json, metrics.jsonl, patterning.json, summary.json and figures/patterning_parens.png to
--workdir (default runs/patterning_parens). See mechjax/studies/patterning_parens.py for the stages.
"""

from absl import flags

from mechjax.studies import patterning_parens as study
from mechjax.train import flags as shared

shared.define_shared_flags("patterning_parens", steps=1000, num_seeds=8, log_every=50, checkpoint_every=250)
flags.DEFINE_integer("length", 20, "String length (even).")
flags.DEFINE_integer("n", 4000, "Training strings; nβ = n / ln n for the susceptibilities and LLCs.")
flags.DEFINE_float("balanced_fraction", 0.5, "Fraction of balanced training strings.")
flags.DEFINE_integer("num_probes", 512, "Probe strings (equal counts, a negative prefix, starting ( and ending )).")
flags.DEFINE_integer("num_test", 1000, "Held-out in-distribution strings (the 'perfect' check and φ_test).")
flags.DEFINE_integer("disagreement", 1000,
                     "Equal-count strings with a negative prefix added to force each reference solution.")
flags.DEFINE_integer("d_model", 32, "Transformer width.")
flags.DEFINE_integer("num_layers", 2, "Transformer layers.")
flags.DEFINE_integer("num_heads", 2, "Attention heads per layer.")
flags.DEFINE_integer("d_mlp", 64, "MLP width.")
flags.DEFINE_float("learning_rate", 1e-3, "Adam step size.")
flags.DEFINE_integer("batch_size", 64, "Training minibatch size.")
flags.DEFINE_integer("chi_step", 250, "Checkpoint of the unweighted seed 0 at which susceptibilities are estimated "
                     "(a multiple of --checkpoint_every, at most --steps).")
flags.DEFINE_integer("per_group", 64, "Training probes per group of strings for the susceptibilities.")
flags.DEFINE_integer("chains", 4, "SGLD chains (vmapped).")
flags.DEFINE_integer("draws", 500, "SGLD draws per chain for the susceptibilities, after burn-in.")
flags.DEFINE_integer("burnin", 100, "SGLD burn-in steps.")
flags.DEFINE_float("sgld_step_size", 1e-4, "SGLD step size ε.")
flags.DEFINE_float("localization", 100.0, "SGLD localization γ.")
flags.DEFINE_integer("sgld_batch_size", 64, "SGLD minibatch size.")
flags.DEFINE_integer("eval_size", 512,
                     "Training samples in the fixed subset that defines L(w) for the susceptibilities.")
flags.DEFINE_integer("llc_draws", 1000, "SGLD draws per chain for the reference solutions' LLCs.")
flags.DEFINE_float("ridge", 0.0, "Ridge ρ of the patterning inverse.")
flags.DEFINE_enum("target", "gap", study.TARGETS,
                  "Size of the φ_counts target: 'gap' moves it by the distance between the reference solutions "
                  "(same size both ways); 'reference' moves the posterior mean onto each reference.")
flags.DEFINE_float("perfect_accuracy", 0.99, "Held-out accuracy at which a seed counts as perfect in distribution.")

for _name, _minimum in (("length", 6), ("n", 2), ("num_probes", 1), ("num_test", 1), ("disagreement", 1),
                        ("d_model", 1), ("num_layers", 1), ("num_heads", 1), ("d_mlp", 1), ("batch_size", 1),
                        ("chi_step", 1), ("per_group", 1), ("chains", 1), ("draws", 1), ("burnin", 0), ("sgld_batch_size", 1),
                        ("eval_size", 1), ("llc_draws", 1)):
  shared.positive_int(_name, minimum=_minimum)
for _name in ("learning_rate", "sgld_step_size", "localization"):
  shared.positive_float(_name)
shared.positive_float("ridge", allow_zero=True)
flags.register_validator("length", lambda v: v % 2 == 0, message="must be even")
flags.register_validator("balanced_fraction", lambda v: 0 < v < 1, message="must be in (0, 1)")
flags.register_validator("perfect_accuracy", lambda v: 0.5 < v <= 1, message="must be in (0.5, 1]")
flags.register_multi_flags_validator(
    ["steps", "chi_step", "checkpoint_every"],
    lambda f: f["chi_step"] <= f["steps"] and f["chi_step"] % f["checkpoint_every"] == 0,
    message="--chi_step must be a multiple of --checkpoint_every and at most --steps")
FLAGS = flags.FLAGS


def main(argv):
  shared.cpu_cores_as_devices()  # SGLD chains over every core
  values = shared.start(argv)
  if values is None:
    return
  summary = study.run(study.config_from_flags(values), FLAGS.workdir)
  print(f"wrote {FLAGS.workdir}/summary.json and figures/{summary['figures'][0]}")
  for a, r in summary["reference_solutions"].items():
    print(f"  reference {a}: LLC {r['llc_mean']:.2f} ± {r['llc_sd_over_chains']:.2f} (sd over chains), train accuracy "
          f"{r['train_accuracy']:.3f}, counts rate {r['counts_rate']:.2f}")
  for c, o in summary["conditions"].items():
    targets = summary["patterning"]["targets"]
    tv = "" if c == "unweighted" else f" (TV {targets[c.split('_', 1)[1]]['total_variation']:.3f})"
    p = summary["wilcoxon_p_vs_unweighted"].get(c)
    print(f"  {c}{tv}: selected {o['selected']}; counts rate {o['counts_rate_mean']:.3f} ± {o['counts_rate_sd']:.3f} "
          f"(sd over seeds)" + ("" if p is None else f", Wilcoxon p = {p:.3g} vs unweighted"))


if __name__ == "__main__":
  shared.run(main)
