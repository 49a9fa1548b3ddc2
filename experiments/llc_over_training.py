"""The developmental landscape of a language model: the LLC of every checkpoint of a training run,
whole and per layer, beside per-head induction scores and the in-context-learning score.

    python -m experiments.train_lm     # writes runs/train_lm/hf/seed0/ and runs/train_lm/corpus/
    python -m experiments.llc_over_training --checkpoints=runs/train_lm/hf/seed0 \
--corpus=runs/train_lm/corpus/train.tokens

--checkpoints is a folder of checkpoint directories, one per step (train_lm's exports, or a model's
revisions, step1000/ and so on); checkpoints with identical weights are reported and estimated
once. Unless --nbeta is given, nβ = n / ln n with n the windows' predicted tokens (not the windows,
as --nbeta's own help says for the other studies). The settings and their flags:
mechjax/studies/language/llc_over_training.py (Config); `--help` lists them.

Afterwards open report.html in --workdir (default runs/llc_over_training): the verdict (the stages
found, or that none is resolved), the landscape figure, and a line per checkpoint.
"""

from mechjax import cli
from mechjax.studies.language import llc_over_training

main = cli.experiment(llc_over_training.STUDY, __name__)

if __name__ == "__main__":
  main()
