"""The template study (mechjax/studies/template.py): a two-layer network learns a linear teacher,
once per hidden width. Copy both files to start a new study.

    python -m experiments.template --widths=2,8,32 --steps=2000

Writes config.json, metrics.jsonl, summary.json, figures/accuracy.png and report.html to --workdir
(default runs/template); `--help` lists the settings.
"""

from mechjax import cli
from mechjax.studies import template

main = cli.experiment(template.STUDY, __name__)

if __name__ == "__main__":
  main()
