"""Polymorphism as rotation: are independently trained transformers a Haar-random rotation apart?

    python -m experiments.polymorphism                       # CPU defaults: Adam and SGD, 4 seeds each
    python -m experiments.polymorphism --optimizer=sgd --num_seeds=6 --steps=4000

Trains Dyck-3 transformers with each optimizer, fits orthogonal Procrustes rotations between seeds on one
batch and evaluates everything on a held-out batch. Writes config.json, metrics.jsonl, summary.json,
pairs.json, rotations.npz, table.md (the per-site table) and figures/*.png to --workdir
(default runs/polymorphism).
"""

from absl import flags

from mechjax.studies import polymorphism as study
from mechjax.train import flags as shared

shared.define_shared_flags("polymorphism", steps=1500, num_seeds=4, log_every=250, checkpoint_every=500)
flags.DEFINE_list("optimizer", list(study.OPTIMIZERS), "Optimizers to train and compare: adam, sgd, or both.")
flags.DEFINE_integer("k", 3, "Bracket types of the Dyck-k language.")
flags.DEFINE_integer("length", 32, "Sequence length (BOS + brackets).")
flags.DEFINE_integer("max_depth", 8, "Largest nesting depth of the Dyck-3 sequences.")
flags.DEFINE_float("p_corrupt", 0.5, "Probability that a sequence has one bracket replaced (validity target).")
flags.DEFINE_integer("d_model", 64, "Residual-stream width.")
flags.DEFINE_integer("num_layers", 2, "Transformer blocks.")
flags.DEFINE_integer("num_heads", 4, "Attention heads per block (must divide d_model).")
flags.DEFINE_integer("d_mlp", 256, "MLP hidden width.")
flags.DEFINE_bool("attn_only", False, "Drop the MLPs.")
flags.DEFINE_integer("batch_size", 64, "Sequences per optimizer step.")
flags.DEFINE_float("adam_learning_rate", 3e-3, "Adam step size.")
flags.DEFINE_float("sgd_learning_rate", 0.05, "SGD step size.")
flags.DEFINE_float("sgd_momentum", 0.9, "SGD (heavy-ball) momentum; 0 for plain SGD.")
flags.DEFINE_integer("fit_sequences", 256, "Sequences whose activations fit R, the SAEs and the steering vectors.")
flags.DEFINE_integer("eval_sequences", 256, "Held-out sequences on which everything is measured.")
flags.DEFINE_integer("sae_latents", 256, "SAE dictionary size.")
flags.DEFINE_integer("sae_top_k", 8, "Active latents per input of the TopK SAEs.")
flags.DEFINE_integer("sae_steps", 1000, "SAE training steps.")
flags.DEFINE_integer("sae_batch_size", 256, "Activations per SAE step.")
flags.DEFINE_float("sae_learning_rate", 1e-3, "SAE Adam step size.")
flags.DEFINE_integer("num_null", 199, "Haar samples in each test's Monte-Carlo null (>= 59, so that a p-value "
                     "combined over the three basis statistics can reach 0.05).")
flags.DEFINE_float("steer_scale", 1.0, "Multiple of the difference-of-means vector added when steering.")

shared.choice_list("optimizer", study.OPTIMIZERS)
flags.register_validator("optimizer", lambda v: len(set(v)) == len(v), message="must not repeat an optimizer")
for _name, _minimum in (("k", 1), ("length", 2), ("max_depth", 1), ("d_model", 2), ("num_layers", 1), ("num_heads", 1),
                        ("d_mlp", 1), ("batch_size", 1), ("fit_sequences", 2), ("eval_sequences", 1),
                        ("sae_latents", 1), ("sae_top_k", 1), ("sae_steps", 1), ("sae_batch_size", 1), ("num_null", 59)):
  shared.positive_int(_name, minimum=_minimum)
for _name in ("adam_learning_rate", "sgd_learning_rate", "sae_learning_rate", "steer_scale"):
  shared.positive_float(_name)
shared.positive_float("sgd_momentum", allow_zero=True)
flags.register_validator("sgd_momentum", lambda v: v < 1, message="must be in [0, 1)")
flags.register_validator("p_corrupt", lambda v: 0 <= v <= 1, message="must be in [0, 1]")
flags.register_validator("num_seeds", lambda v: v >= 2, message="must be >= 2: rotations are fitted between seeds")
flags.register_multi_flags_validator(
    ["d_model", "num_heads"], lambda f: f["d_model"] % f["num_heads"] == 0,
    message="--num_heads must divide --d_model")
flags.register_multi_flags_validator(
    ["sae_top_k", "sae_latents"], lambda f: f["sae_top_k"] <= f["sae_latents"],
    message="--sae_top_k must be <= --sae_latents")
FLAGS = flags.FLAGS


def main(argv):
  values = shared.start(argv)
  if values is None:
    return
  summary = study.run(study.config_from_flags(values), FLAGS.workdir)
  print(f"wrote {FLAGS.workdir}/summary.json, table.md and figures: {', '.join(summary['figures'])}")
  for name, s in summary["optimizers"].items():
    acc = ", ".join(f"{h} {a:.3f}" for h, a in s["final_test_acc"].items())
    lo, hi = s["split_half_agreement_range"]
    print(f"\n{name}: test accuracy {acc}\n  seeds x sites with a privileged basis (kurtosis test, p <= 0.05): "
          f"{s['privileged_basis_seeds']:.2f}\n  seed pairs whose R rejects Haar on basis statistics: "
          f"{s['haar_basis_rejections']:.2f} (rank of XᵀY {s['min_cross_covariance_rank']}-"
          f"{s['max_cross_covariance_rank']} of {FLAGS.d_model}; R from two halves of the fit batch agree "
          f"{lo:.2f}-{hi:.2f}, 1 = identical)")
    print(study.table_markdown(s))


if __name__ == "__main__":
  shared.run(main)
