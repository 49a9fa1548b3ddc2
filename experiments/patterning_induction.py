"""Patterning induction heads: per-token susceptibilities of each attention head, PCA, and
retraining on data re-weighted along the induction direction (promote / suppress), along a random
direction of the same size (the control), or not at all.

    python -m experiments.patterning_induction  # CPU defaults: 4 seeds × 4 conditions
    python -m experiments.patterning_induction --chi_step=400 --strength=0.8

Writes config.json, metrics.jsonl, susceptibility.npz, summary.json and
figures/induction_{susceptibility, formation}.png to --workdir (default runs/patterning_induction).
See mechjax/studies/patterning/patterning_induction.py. The settings and their flags:
mechjax/studies/patterning/patterning_induction.py (Config); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.patterning import patterning_induction

main = cli.experiment(patterning_induction.STUDY, __name__)

if __name__ == "__main__":
  main()
