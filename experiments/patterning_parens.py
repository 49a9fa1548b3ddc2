"""Patterning on parenthesis balancing by the LLC: does a susceptibility-based data re-weighting
select the algorithm?

    python -m experiments.patterning_parens  # CPU defaults: 8 seeds × 4 conditions
    python -m experiments.patterning_parens --neg_prefix_fraction=0.1 --ridge=1e-3

Writes config.json, metrics.jsonl, patterning.json, summary.json and figures/patterning_parens.png
to --workdir (default runs/patterning_parens). See mechjax/studies/patterning/patterning_parens.py
for the stages. The settings and their flags: mechjax/studies/patterning/patterning_parens.py
(Config) and mechjax/studies/patterning/patterning_parens_base.py (ParensSettings); `--help` lists
them. The earlier probe design is experiments/patterning_parens_probe.py.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.patterning import patterning_parens

main = cli.experiment(patterning_parens.STUDY, __name__)

if __name__ == "__main__":
  main()
