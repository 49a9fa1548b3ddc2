"""Amplitude before phase: two-layer networks on Fourier amplitude and phase tasks
(arXiv:2605.16913).

    python -m experiments.fourier_phase  # CPU defaults: 10 runs x 4 seeds
    python -m experiments.fourier_phase --shape=16,16 --tasks=amplitude,spiked_principal --alpha=0,2

Writes config.json, metrics.jsonl, summary.json and figures/*.png to --workdir (default
runs/fourier_phase). The settings and their flags: mechjax/studies/fourier/fourier_phase.py
(Config); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.fourier import fourier_phase

main = cli.experiment(fourier_phase.STUDY, __name__)

if __name__ == "__main__":
  main()
