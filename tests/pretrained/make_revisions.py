"""Builds ``checkpoints/revisions/``: a folder of checkpoint directories that transformers wrote, as
a model's revisions are served (``step0``, ``step100``, ``step1000``, ``step2000``), for the test
that llc_over_training reads checkpoints mechjax did not write. ``step2000`` holds the same
weights as ``step1000``, as some public revision series serve one checkpoint under two steps.

Run it where torch and transformers are installed, from the repository root::

    python -m tests.pretrained.make_revisions
"""

from __future__ import annotations

import os
import shutil

import torch
import transformers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints", "revisions")
CONFIG = dict(
  vocab_size=61,
  hidden_size=16,
  num_hidden_layers=1,
  num_attention_heads=2,
  intermediate_size=32,
  max_position_embeddings=16,
  rotary_pct=0.5,
  use_parallel_residual=True,
  tie_word_embeddings=False,
  bos_token_id=0,
  eos_token_id=0,
)


def main():
  shutil.rmtree(HERE, ignore_errors=True)
  for seed, step in enumerate((0, 100, 1000)):
    torch.manual_seed(seed)
    model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**CONFIG))
    with torch.no_grad():
      for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(os.path.join(HERE, f"step{step}"))
  shutil.copytree(os.path.join(HERE, "step1000"), os.path.join(HERE, "step2000"))
  size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(HERE) for f in fs)
  print(f"revisions: 4 checkpoints, {size / 1e3:.0f} kB")


if __name__ == "__main__":
  main()
