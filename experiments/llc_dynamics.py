"""The local learning coefficient over training: a deep linear network learning a rank-3 teacher
mode by mode.

    python -m experiments.llc_dynamics  # CPU defaults: 2 seeds, 40 checkpoints
    python -m experiments.llc_dynamics --localization=100 --llc_draws=4000 --widths=4,6,6,4

Writes config.json, metrics.jsonl, llc.jsonl, summary.json and figures/llc_dynamics.png to --workdir
(default runs/llc_dynamics). See mechjax/studies/llc/llc_dynamics.py for what is estimated and
compared. The settings and their flags: mechjax/studies/llc/llc_dynamics.py (Config); `--help` lists
them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.llc import llc_dynamics

main = cli.experiment(llc_dynamics.STUDY, __name__)

if __name__ == "__main__":
  main()
