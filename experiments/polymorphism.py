"""Polymorphism as rotation: are independently trained transformers a Haar-random rotation apart?

    python -m experiments.polymorphism  # CPU defaults: Adam and SGD, 4 seeds each
    python -m experiments.polymorphism --optimizer=sgd --num_seeds=6 --steps=4000

Trains Dyck-3 transformers with each optimizer, fits orthogonal Procrustes rotations between seeds
on one batch and evaluates everything on a held-out batch. Writes config.json, metrics.jsonl,
summary.json, pairs.json, rotations.npz, table.md (the per-site table) and figures/*.png to
--workdir (default runs/polymorphism). The settings and their flags:
mechjax/studies/rotation/polymorphism.py (Config); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.rotation import polymorphism

main = cli.experiment(polymorphism.STUDY, __name__)

if __name__ == "__main__":
  main()
