"""Tensor similarity across grokking: modular addition with a bilinear network.

    python -m experiments.tensor_similarity_grokking  # CPU defaults: 4 seeds
    python -m experiments.tensor_similarity_grokking --p=59 --steps=8000

Trains Bilinear(2P → 64) → Linear(64 → P) on a 30% split of all (a, b) pairs with AdamW (weight
decay 0.3), saving checkpoints on a power schedule, then compares every pair of checkpoints by
tensor similarity, logit cosine on all P² inputs, weight cosine and CKA. Writes config.json,
metrics.jsonl, summary.json, similarity.npz and figures/*.png to --workdir (default
runs/tensor_similarity_grokking). The settings and their flags:
mechjax/studies/tensor_similarity/tensor_similarity_grokking.py (Config); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.tensor_similarity import tensor_similarity_grokking

main = cli.experiment(tensor_similarity_grokking.STUDY, __name__)

if __name__ == "__main__":
  main()
