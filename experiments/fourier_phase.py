"""Amplitude before phase: two-layer networks on Fourier amplitude and phase tasks (arXiv:2605.16913).

    python -m experiments.fourier_phase                       # CPU defaults: 10 runs x 4 seeds, ~3 min
    python -m experiments.fourier_phase --shape=16,16 --tasks=amplitude,spiked_principal --alpha=0,2

Writes config.json, metrics.jsonl, summary.json and figures/*.png to --workdir (default runs/fourier_phase).
"""

from absl import flags

from mechjax.data import fourier
from mechjax.models.mlp import ACTIVATIONS
from mechjax.studies import fourier_phase as study
from mechjax.train import flags as shared

shared.define_shared_flags("fourier_phase", steps=30_000, num_seeds=4, log_every=500, checkpoint_every=10_000)
flags.DEFINE_list("tasks", list(study.TASKS), f"Tasks to train: any of {', '.join(study.TASKS)}.")
flags.DEFINE_list("alpha", ["0", "1", "2"], "Power-spectrum exponents for the phase tasks, E|x_k|^2 ~ |k|^-alpha.")
flags.DEFINE_string("shape", "32", "Input shape: N for 1D signals, or H,W for images (e.g. 16,16).")
flags.DEFINE_list("amplitude_alphas", ["0", "1"], "The two spectrum exponents of the amplitude task's classes.")
flags.DEFINE_float("beta", 5.0, "Spike strength beta of the spiked-cumulant task.")
flags.DEFINE_enum("noise", "rademacher", list(fourier.NOISES), "Non-Gaussian noise of the linear-process task.")
flags.DEFINE_integer("width", 64, "Hidden units of the two-layer network.")
flags.DEFINE_enum("activation", "relu", sorted(ACTIVATIONS), "Hidden activation.")
flags.DEFINE_integer("batch_size", 64, "Fresh samples per SGD step (online SGD: no sample is seen twice).")
flags.DEFINE_float("learning_rate", 0.05, "SGD step size.")
flags.DEFINE_integer("eval_samples", 4096, "Size of the fixed test set (and its scrambled and whitened copies).")
flags.DEFINE_float("target_accuracy", 0.6, "summary.json reports the samples needed to reach this test accuracy.")

shared.choice_list("tasks", study.TASKS)
shared.float_list("alpha", minimum=0.0)
shared.float_list("amplitude_alphas", minimum=0.0)
flags.register_validator("amplitude_alphas", lambda v: len(v) == 2 and float(v[0]) != float(v[1]),
                         message="must be exactly two different exponents, e.g. 0,1")
flags.register_validator("alpha", lambda v: len({f"{float(a):g}" for a in v}) == len(v),
                         message="must not repeat a value")
flags.register_validator("tasks", lambda v: len(set(v)) == len(v), message="must not repeat a task")
flags.register_validator("shape", lambda v: _shape_ok(v), message="must be N or H,W with integers >= 2, e.g. 32 or 16,16")
shared.positive_float("beta", allow_zero=True)
shared.positive_float("learning_rate")
shared.positive_int("width")
shared.positive_int("batch_size", minimum=2)
shared.positive_int("eval_samples", minimum=2)
flags.register_validator("target_accuracy", lambda v: 0.5 < v <= 1.0, message="must be in (0.5, 1]")
FLAGS = flags.FLAGS


def _shape_ok(text):
  try:
    study.parse_shape(text)
  except ValueError:
    return False
  return True


def main(argv):
  values = shared.start(argv)
  if values is None:
    return
  summary = study.run(study.config_from_flags(values), FLAGS.workdir)
  print(f"wrote {FLAGS.workdir}/summary.json and figures: {', '.join(summary['figures'])}")
  for name, c in summary["conditions"].items():
    reached = c["samples_to_target"]
    reached = f"{reached} samples" if reached is not None else f"not within {c['samples']} samples"
    print(f"  {name:32s} final test acc {c['final_test_acc_mean']:.3f} ± {c['final_test_acc_sd']:.3f}; "
          f"{summary['target_accuracy']:g} reached: {reached}")


if __name__ == "__main__":
  shared.run(main)
