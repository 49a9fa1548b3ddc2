"""Checkpoints that mechjax's trainer wrote (train_lm's exports, in checkpoints/trained/, made by
make_trained.py) against what transformers computed on them: no torch needed."""

import json
import os

import jax
import numpy as np
import pytest

from mechjax.data import tokens
from mechjax.models import pretrained

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints", "trained")
ARCHITECTURES = {"gpt_neox": "GPTNeoXForCausalLM", "llama": "LlamaForCausalLM"}


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_a_trained_export_gives_transformers_logits(arch):
  folder = os.path.join(HERE, arch)
  with open(os.path.join(folder, "config.json")) as f:
    assert json.load(f)["architectures"] == [ARCHITECTURES[arch]]
  model, params = pretrained.load(folder)
  with np.load(os.path.join(folder, "expected.npz")) as f:
    want = dict(f)
  got = np.asarray(model.apply({"params": params}, want["tokens"]))
  assert np.max(np.abs(got - want["logits"])) <= 1e-4
  # The tolerance can fail: the same weights with two query heads swapped miss it by far.
  query = params["attn_0"]["query"]
  swapped = {**query, "kernel": query["kernel"][:, ::-1]}
  if "bias" in query:
    swapped["bias"] = query["bias"][::-1]
  wrong = jax.tree.map(lambda a: a, params)
  wrong["attn_0"] = {**params["attn_0"], "query": swapped}
  off = np.asarray(model.apply({"params": wrong}, want["tokens"]))
  assert np.max(np.abs(off - want["logits"])) > 0.1
  assert tokens.fingerprint(folder)  # the corpus's tokenizer.json travels with the export
