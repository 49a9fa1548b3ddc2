"""Tensor similarity across grokking: modular addition with a bilinear network.

    python -m experiments.tensor_similarity_grokking               # CPU defaults: 4 seeds, 3 min 49 s on 2 cores
    python -m experiments.tensor_similarity_grokking --p=59 --steps=8000

Trains Bilinear(2P → 64) → Linear(64 → P) on a 30% split of all (a, b) pairs with AdamW (weight decay
0.3), saving checkpoints on a power schedule, then compares every pair of checkpoints by tensor
similarity, logit cosine on all P² inputs, weight cosine and CKA. Writes config.json, metrics.jsonl,
summary.json, similarity.npz and figures/*.png to --workdir (default runs/tensor_similarity_grokking).
"""

import math

from absl import flags

from mechjax.studies import tensor_grokking as study
from mechjax.train import flags as shared

shared.define_shared_flags("tensor_similarity_grokking", steps=study.Config.steps,
                           num_seeds=study.Config.num_seeds, log_every=study.Config.log_every,
                           checkpoint_every=study.Config.steps)
flags.DEFINE_integer("p", 113, "The modulus P (inputs are one-hot pairs, 2P wide).")
flags.DEFINE_integer("hidden", 64, "Width of the bilinear layer.")
flags.DEFINE_float("train_fraction", 0.3, "Fraction of the P² pairs used for training (the rest is the test set).")
flags.DEFINE_float("learning_rate", 1e-3, "AdamW step size.")
flags.DEFINE_float("weight_decay", 0.3, "AdamW (decoupled) weight decay.")
flags.DEFINE_list("weight_decays", [], "Several weight decays to train side by side in one vmapped program "
                  "(each with the same --num_seeds seeds); empty: just --weight_decay.")
flags.DEFINE_integer("batch_size", 512, "Training pairs per step (drawn with replacement from the split).")
flags.DEFINE_integer("num_checkpoints", 48, "Checkpoints on the power schedule (the initialisation is added).")
flags.DEFINE_float("checkpoint_power", 2.0, "Checkpoint k of K is at steps * (k/K)^power (1 = evenly spaced).")

for _name, _minimum in (("p", 3), ("hidden", 1), ("batch_size", 1), ("num_checkpoints", 2)):
  shared.positive_int(_name, minimum=_minimum)
for _name in ("learning_rate", "checkpoint_power"):
  shared.positive_float(_name)
shared.positive_float("weight_decay", allow_zero=True)


def _weight_decays_ok(values):
  try:
    xs = [float(v) for v in values]
  except (TypeError, ValueError):
    return False
  return all(math.isfinite(x) and x >= 0 for x in xs) and len(set(xs)) == len(xs)


flags.register_validator("weight_decays", _weight_decays_ok,
                         message="must be empty or a comma-separated list of distinct finite numbers >= 0, e.g. 0.1,0.3,1")
flags.register_validator("train_fraction", lambda v: 0 < v < 1, message="must be in (0, 1)")
FLAGS = flags.FLAGS


def main(argv):
  values = shared.start(argv)
  if values is None:
    return
  summary = study.run(study.config_from_flags(values), FLAGS.workdir)
  print(f"wrote {FLAGS.workdir}/summary.json, similarity.npz and figures: {', '.join(summary['figures'])}")
  for s in summary["seeds"]:
    r = s["pearson_r_vs_logit_cosine"]
    print(f"seed {s['seed']} (weight decay {s['weight_decay']:g}): train acc {s['final_train_acc']:.3f}, test acc {s['final_test_acc']:.3f}; memorised at step "
          f"{s['memorised_step']}, generalised at step {s['generalised_step']}")
    print(f"  Pearson r with logit cosine over {len(summary['checkpoint_steps'])} checkpoints: tensor similarity "
          f"{r['tensor']:.3f}, weight cosine {r['weight_cosine']:.3f}, CKA {r['cka']:.3f}")


if __name__ == "__main__":
  shared.run(main)
