"""Do two pretrained language models differ by a rotation of the residual stream? Centred Procrustes
at every residual site, explained variance raw and through R, the Haar tests, and steering transfer.

    python -m experiments.pretrained_polymorphism --model_a=pythia-70m-seed1 \
      --model_b=pythia-70m-seed2 --corpus=corpus.tokens

--model_a and --model_b are checkpoint directories on disk of the same width and tokenizer, and
--corpus a token file made from text files (docs/pretrained.md shows both; nothing is downloaded).
Writes config.json, summary.json, rotations.npz and figures/alignment.png to --workdir (default
runs/pretrained_polymorphism). The settings and their flags: Config in
mechjax/studies/rotation/pretrained_polymorphism.py; `--help` lists them.

Afterwards open report.html in --workdir: the results, the figure with its caption, then the config
and the whole summary.
"""

from mechjax import cli
from mechjax.studies.rotation import pretrained_polymorphism

main = cli.experiment(pretrained_polymorphism.STUDY, __name__)

if __name__ == "__main__":
  main()
