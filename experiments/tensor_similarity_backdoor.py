"""Tensor similarity and a backdoor: is the insertion visible in the full network, in the target-class
slice, or only in behaviour on triggered inputs?

    python -m experiments.tensor_similarity_backdoor                  # CPU defaults: 4 seeds, 32 s on 2 cores
    python -m experiments.tensor_similarity_backdoor --poison_fraction=0.05 --target_class=7

Trains Bilinear(64 → 64) → Linear(64 → 10) on scikit-learn's 8×8 digits, then fine-tunes it twice from
the same weights: with a fraction of each batch stamped with a corner patch and relabelled to the target
class, and without poison (the control). Writes config.json, metrics.jsonl, summary.json, similarity.json
and figures/backdoor_similarity.png to --workdir (default runs/tensor_similarity_backdoor).
"""

from absl import flags

from mechjax.studies import tensor_backdoor as study
from mechjax.train import flags as shared

shared.define_shared_flags("tensor_similarity_backdoor", steps=study.Config.steps, num_seeds=study.Config.num_seeds,
                           log_every=study.Config.log_every, checkpoint_every=study.Config.checkpoint_every)
flags.DEFINE_integer("hidden", 64, "Width of the bilinear layer.")
flags.DEFINE_float("learning_rate", 1e-3, "Adam step size (clean training and both fine-tunes).")
flags.DEFINE_integer("batch_size", 128, "Images per step.")
flags.DEFINE_integer("poison_steps", 600, "Fine-tuning steps (poisoned, and the unpoisoned control).")
flags.DEFINE_float("poison_fraction", 0.1, "Probability that an image of a fine-tuning batch is triggered and "
                   "relabelled.")
flags.DEFINE_integer("target_class", 0, "The class the trigger maps to (0-9).")
flags.DEFINE_integer("trigger_size", 2, "Side of the square trigger patch in the bottom-right corner (1-8 pixels).")
flags.DEFINE_integer("poison_checkpoint_every", 20, "Checkpoint (and log) interval of the fine-tunes.")

for _name, _minimum in (("hidden", 1), ("batch_size", 1), ("poison_steps", 1), ("poison_checkpoint_every", 1)):
  shared.positive_int(_name, minimum=_minimum)
shared.positive_float("learning_rate")
flags.register_validator("poison_fraction", lambda v: 0 < v <= 1, message="must be in (0, 1]")
flags.register_validator("target_class", lambda v: 0 <= v <= 9, message="must be a digit class, 0-9")
flags.register_validator("trigger_size", lambda v: 1 <= v <= 8, message="must be 1-8 pixels")
FLAGS = flags.FLAGS


def main(argv):
  values = shared.start(argv)
  if values is None:
    return
  summary = study.run(study.config_from_flags(values), FLAGS.workdir)
  print(f"wrote {FLAGS.workdir}/summary.json, similarity.json and figures: {', '.join(summary['figures'])}")
  for i, s in enumerate(summary["seeds"]):
    print(f"seed {i}: clean test acc {s['clean_test_acc']:.3f} (attack success {s['clean_attack_success']:.3f}); "
          f"after poisoning: test acc {s['final_test_acc']:.3f}, attack success {s['final_attack_success']:.3f}")
    o = s["onset"]
    if o is None:
      print("  the attack success rate never reached the onset threshold")
      continue
    print(f"  onset at fine-tuning step {o['step']} (ASR {o['attack_success']:.3f}); similarity to the clean model "
          "(poisoned | unpoisoned control | signal over drift):")
    for m in study.MEASURES:
      ratio = o["signal_over_drift"][m]
      print(f"    {study.LABELS[m]:42s} {o['similarity_poisoned'][m]:.4f} | {o['similarity_continued'][m]:.4f} | "
            f"{'n/a' if ratio is None else f'{ratio:.1f}x'}")


if __name__ == "__main__":
  shared.run(main)
