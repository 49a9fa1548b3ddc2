"""The LLC and per-token susceptibilities of a pretrained language model, whole and per attention
head and MLP.

    python -m experiments.pretrained_llc --model=pythia-70m --corpus=corpus.tokens

--model is a Hugging Face checkpoint directory on disk and --corpus a token file made from text
files (docs/pretrained.md shows both; nothing is downloaded). Writes config.json, summary.json,
susceptibilities.npz and figures/susceptibilities.png to --workdir (default runs/pretrained_llc).
The settings and their flags: mechjax/studies/llc/pretrained_llc.py (Config); `--help` lists them.

Afterwards open report.html in --workdir: the results, the figures with their captions, then the
config and the whole summary.
"""

from mechjax import cli
from mechjax.studies.llc import pretrained_llc

main = cli.experiment(pretrained_llc.STUDY, __name__)

if __name__ == "__main__":
  main()
