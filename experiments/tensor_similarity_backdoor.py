"""Tensor similarity and a backdoor: is the insertion visible in the full network, in the
target-class slice, or only in behaviour on triggered inputs?

    python -m experiments.tensor_similarity_backdoor  # CPU defaults: 4 seeds
    python -m experiments.tensor_similarity_backdoor --poison_fraction=0.05 --target_class=7

Trains Bilinear(64 → 64) → Linear(64 → 10) on scikit-learn's 8×8 digits, then fine-tunes it twice
from the same weights: with a fraction of each batch stamped with a corner patch and relabelled to
the target class, and without poison (the control). Writes config.json, metrics.jsonl, summary.json,
similarity.json and figures/backdoor_similarity.png to --workdir (default
runs/tensor_similarity_backdoor). The settings and their flags:
mechjax/studies/tensor_similarity/tensor_similarity_backdoor.py (Config); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.tensor_similarity import tensor_similarity_backdoor

main = cli.experiment(tensor_similarity_backdoor.STUDY, __name__)

if __name__ == "__main__":
  main()
