"""Language models trained on English Wikipedia text, written as Hugging Face checkpoints.

    python -m experiments.train_lm

Makes the corpus in --workdir (default runs/train_lm) on the first run: the Wikipedia articles that
ship with the gensim package, a byte-level BPE tokenizer, and train and held-out token files
(mechjax.data.language). Then trains --num_seeds seeds of a small GPT-NeoX (or --arch=llama)
model in one program, and writes each seed at log-spaced steps as hf/seed<i>/step<t>/, folders that
transformers and experiments.llc_over_training read. The settings and their flags:
mechjax/studies/language/train_lm.py (Config); `--help` lists them.

Afterwards open report.html in --workdir: what was trained on what, each seed's held-out loss, the
loss curves, and a greedy continuation of a prompt by each seed.
"""

from mechjax import cli
from mechjax.studies.language import train_lm

main = cli.experiment(train_lm.STUDY, __name__)

if __name__ == "__main__":
  main()
