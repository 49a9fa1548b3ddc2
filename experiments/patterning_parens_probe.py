"""Patterning on parenthesis balancing, the earlier design: a probe loss targeted at one posterior.

    python -m experiments.patterning_parens_probe  # CPU defaults: 8 seeds × 3 conditions
    python -m experiments.patterning_parens_probe --num_heads=2 --weight_decay=0  # docs/results.md

Writes config.json, metrics.jsonl, patterning.json, summary.json and figures/patterning_parens.png
to --workdir (default runs/patterning_parens_probe). See
mechjax/studies/patterning/patterning_parens_probe.py for the stages. The settings and their flags:
mechjax/studies/patterning/patterning_parens_probe.py (Config) and
mechjax/studies/patterning/patterning_parens_base.py (ParensSettings); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.patterning import patterning_parens_probe

main = cli.experiment(patterning_parens_probe.STUDY, __name__)

if __name__ == "__main__":
  main()
