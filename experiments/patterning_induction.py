"""Patterning induction heads: per-token susceptibilities of each attention head, PCA, and retraining on
data re-weighted along the induction direction (promote / suppress), along a random direction of the same
size (the control), or not at all.

    python -m experiments.patterning_induction              # CPU defaults: 4 seeds × 4 conditions, ~15 min
    python -m experiments.patterning_induction --chi_step=400 --strength=0.8

Writes config.json, metrics.jsonl, susceptibility.npz, summary.json and figures/induction_{susceptibility,
formation}.png to --workdir (default runs/patterning_induction). See mechjax/studies/patterning_induction.py.
"""

from absl import flags

from mechjax.studies import patterning_induction as study
from mechjax.train import flags as shared

shared.define_shared_flags("patterning_induction", steps=3000, num_seeds=4, log_every=50, checkpoint_every=200)
flags.DEFINE_integer("vocab", 64, "Vocabulary size; tokens are uniform.")
flags.DEFINE_integer("length", 32, "Sequence length (even); repeated sequences copy the first half.")
flags.DEFINE_float("repeat_fraction", 0.5, "Fraction of training sequences that repeat.")
flags.DEFINE_integer("d_model", 64, "Transformer width.")
flags.DEFINE_integer("num_layers", 2, "Attention-only layers.")
flags.DEFINE_integer("num_heads", 4, "Heads per layer; every head is a component of the susceptibility matrix.")
flags.DEFINE_float("learning_rate", 1e-3, "Adam step size.")
flags.DEFINE_integer("batch_size", 64, "Training sequences per step (fresh every step).")
flags.DEFINE_integer("chi_step", 400, "Unweighted seed 0's checkpoint for the susceptibilities (a multiple of "
                     "--checkpoint_every).")
flags.DEFINE_integer("n", 4096, "Sequences in the fixed sample that defines the posterior; nβ = n / ln n.")
flags.DEFINE_integer("probe_sequences", 16, "Probe sequences (half repeated); every token is a probe column.")
flags.DEFINE_integer("eval_sequences", 256, "Sequences of each kind for the repeat loss and prefix-matching score.")
flags.DEFINE_integer("chains", 4, "SGLD chains (vmapped, as are the heads).")
flags.DEFINE_integer("draws", 200, "SGLD draws per chain, after burn-in.")
flags.DEFINE_integer("burnin", 50, "SGLD burn-in steps.")
flags.DEFINE_float("sgld_step_size", 1e-4, "SGLD step size ε.")
flags.DEFINE_float("localization", 100.0, "SGLD localization γ.")
flags.DEFINE_integer("sgld_batch_size", 64, "SGLD minibatch size.")
flags.DEFINE_integer("eval_size", 64, "Sequences in the fixed subset that defines L(w) for the susceptibilities.")
flags.DEFINE_float("strength", 0.5, "Fraction of the largest non-negative step along the induction direction.")
flags.DEFINE_integer("top_components", 3,
                     "The induction direction is chosen among this many leading principal directions.")
flags.DEFINE_float("formation_fraction", 0.5, "A run's formation step is when its repeat loss first falls below "
                   "this fraction of ln(vocab).")

for _name, _minimum in (("vocab", 2), ("length", 4), ("d_model", 1), ("num_layers", 1), ("num_heads", 1),
                        ("batch_size", 1), ("chi_step", 1), ("n", 2), ("probe_sequences", 2), ("eval_sequences", 1),
                        ("chains", 1), ("draws", 1), ("burnin", 0), ("sgld_batch_size", 1), ("eval_size", 1),
                        ("top_components", 1)):
  shared.positive_int(_name, minimum=_minimum)
for _name in ("learning_rate", "sgld_step_size", "localization"):
  shared.positive_float(_name)
flags.register_validator("length", lambda v: v % 2 == 0, message="must be even")
flags.register_validator("probe_sequences", lambda v: v % 2 == 0, message="must be even (half repeat)")
for _name in ("repeat_fraction", "strength", "formation_fraction"):
  flags.register_validator(_name, lambda v: 0 < v < 1, message="must be in (0, 1)")
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
  s = study.run(study.config_from_flags(values), FLAGS.workdir)
  k = s["induction_component"]
  print(f"wrote {FLAGS.workdir}/summary.json and figures/{', '.join(s['figures'])}")
  print(f"  induction direction: PC{k + 1} ({100 * s['explained_variance'][k]:.0f}% of variance), correlation "
        f"{s['component_correlations'][k]:+.2f} with the induction positions; weight on them "
        + ", ".join(f"{c} {w:.3f}" for c, w in s["induction_weight"].items()))
  for c, f in s["formation_step"].items():
    line = f"  {c}: formation steps {[None if x is None else round(x) for x in f]}"
    if c in s["formation_shift_vs_unweighted"]:
      d = s["formation_shift_vs_unweighted"][c]
      if d["mean"] is not None:
        sd = "" if d["sd"] is None else f" ± {d['sd']:.0f} (sd over seeds)"
        line += (f"; shift vs unweighted {d['mean']:+.0f}{sd}, earlier in {d['earlier_in']}/{d['seeds_compared']}, "
                 f"later in {d['later_in']}/{d['seeds_compared']}")
    print(line)


if __name__ == "__main__":
  shared.run(main)
