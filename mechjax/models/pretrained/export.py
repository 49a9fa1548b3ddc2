"""Writing a model in its Hugging Face architecture's own layout, which transformers and the hub's
tools read: :func:`export_hf`.

The weights are the reader run backwards. A family's ``params(arch, get)`` builds mechjax's params
from Hugging Face tensors by reshaping, transposing, slicing and splitting them; called with a
``get`` that returns each tensor's element *indices*, it returns, for every mechjax parameter, the
position of each of its elements in the Hugging Face tensors. Scattering the parameter values to
those positions gives the tensors, so every layout the loader reads is written by the same code,
and what :func:`export_hf` writes :func:`~mechjax.models.pretrained.checkpoint.load` reads back to
the bit.

The config is the family's ``config(arch)``: the keys its ``arch(cfg)`` reads. A model whose
:class:`~mechjax.models.pretrained.arch.Arch` that config does not give back exactly (a folded
model's unembedding bias, biases on the query but not the output of a GPT-NeoX, ...) is refused in
one line, naming the fields: :func:`~mechjax.models.pretrained.checkpoint.save` writes those.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jax
import numpy as np

from mechjax.data import tokens
from mechjax.models.pretrained import families
from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import CheckpointError
from mechjax.models.pretrained.checkpoint import refuse_existing
from mechjax.models.pretrained.checkpoint import tokenizer_source
from mechjax.models.pretrained.model import DecoderLM
from mechjax.models.pretrained.safetensors import write_safetensors

WEIGHTS = "model.safetensors"


def hf_config(arch: Arch) -> dict:
  """``config.json`` for ``arch`` in its family's own keys; refuses an ``arch`` those keys cannot
  give back exactly, naming the fields that would change."""
  family = families.BY_FAMILY[arch.family]
  cfg = family.config(arch)
  back = families.arch_from_config(cfg)
  if back != arch:
    fields = [
      f"{f.name}={getattr(arch, f.name)!r}"
      for f in dataclasses.fields(Arch)
      if getattr(arch, f.name) != getattr(back, f.name)
    ]
    raise CheckpointError(
      f"{cfg['architectures'][0]} cannot express this model ({', '.join(fields)}); write it in "
      "mechjax's own layout with pretrained.save"
    )
  return cfg


class _Positions:
  """A ``get(name, shape)`` for a family's ``params``: returns each requested tensor's element
  indices in one flat numbering, and records the tensors' names and shapes in request order. Names
  get ``prefix`` (the base model's, for the body; none for the head)."""

  def __init__(self):
    self.prefix, self.shapes, self.offsets, self.size = "", {}, {}, 0

  def __call__(self, key: str, shape: tuple) -> np.ndarray:
    name, n = self.prefix + key, int(np.prod(shape))
    if name not in self.shapes:
      self.shapes[name], self.offsets[name] = tuple(shape), self.size
      self.size += n
    if self.shapes[name] != tuple(shape):
      raise AssertionError(f"{name} requested with shapes {self.shapes[name]} and {shape}")
    return np.arange(self.offsets[name], self.offsets[name] + n, dtype=np.int64).reshape(shape)


def hf_tensors(arch: Arch, params: dict) -> dict[str, np.ndarray]:
  """``params`` (of a :class:`DecoderLM` of ``arch``) as the family's Hugging Face tensors, by
  name (module docstring). Refuses params whose structure or shapes are not the model's."""
  family = families.BY_FAMILY[arch.family]
  has = lambda name: name == "embed_out.weight"  # noqa: E731 (GPT-NeoX's own head name)
  get = _Positions()
  get.prefix = family.PREFIX
  index = family.params(arch, get, has)
  if not arch.tied_embeddings:
    get.prefix = ""
    index["unembed"] = {"kernel": get(family.head(has), (arch.vocab_size, arch.d_model)).T}
  if jax.tree.structure(params) != jax.tree.structure(index):
    raise CheckpointError(
      f"the params do not have the structure of a {arch.family} DecoderLM of this Arch; pass the "
      "params that model.init or pretrained.load gives"
    )
  values = [np.asarray(v) for v in jax.tree.leaves(params)]
  flat = np.zeros(get.size, np.result_type(*values))
  written = np.zeros(get.size, bool)
  for (path, idx), value in zip(jax.tree_util.tree_leaves_with_path(index), values):
    if value.shape != idx.shape:
      raise CheckpointError(
        f"param {jax.tree_util.keystr(path)} has shape {value.shape}; the Arch implies {idx.shape}"
      )
    flat[idx.ravel()] = value.ravel()
    written[idx.ravel()] = True
  if not written.all():  # every element of every tensor comes from some parameter
    raise AssertionError(f"{arch.family}: {int((~written).sum())} tensor elements not written")
  return {
    name: flat[get.offsets[name] : get.offsets[name] + int(np.prod(shape))].reshape(shape)
    for name, shape in get.shapes.items()
  }


def export_hf(
  directory: str | os.PathLike,
  model: DecoderLM,
  params: dict,
  *,
  tokenizer: str | os.PathLike | None = None,
) -> str:
  """Writes ``(model, params)`` as a Hugging Face checkpoint of the model's own architecture in a
  new ``directory``: ``config.json`` (the family's keys, :func:`hf_config`), ``model.safetensors``
  (its weight names, :func:`hf_tensors`) and, with ``tokenizer`` (a ``tokenizer.json`` or a
  folder holding one), ``tokenizer.json``. transformers' ``AutoModelForCausalLM.from_pretrained``
  and :func:`~mechjax.models.pretrained.checkpoint.load` read it; the latter gives ``params``
  back exactly. Returns the directory.

  Refused in one line: an Arch the family's config cannot express (:func:`hf_config`), params of
  another structure, and a directory that already holds a checkpoint (nothing is overwritten).
  The params keep their dtype (float32, or bfloat16), which ``config.json`` records::

      pretrained.export_hf("runs/lm/hf/step_1000", model, params, tokenizer="runs/corpus")
  """
  directory = os.fspath(directory)
  cfg = hf_config(model.arch)
  tensors = hf_tensors(model.arch, params)
  refuse_existing(directory, "export_hf")
  source = tokenizer_source(tokenizer)
  cfg["dtype"] = cfg["torch_dtype"] = np.result_type(*tensors.values()).name
  os.makedirs(directory, exist_ok=True)
  write_safetensors(os.path.join(directory, WEIGHTS), tensors, metadata={"format": "pt"})
  if source is not None:
    shutil.copyfile(source, os.path.join(directory, "tokenizer.json"))
    cfg.update(_special_ids(source))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(cfg, f, indent=2)
  return directory


def _special_ids(tokenizer_json: str) -> dict:
  """``bos_token_id`` and ``eos_token_id`` from a tokenizer's end-of-text token, when it has one
  (``<|endoftext|>``, ``</s>`` or ``<eos>``)."""
  with open(tokenizer_json) as f:
    added = {t["content"]: t["id"] for t in json.load(f).get("added_tokens", [])}
  for name in tokens.EOS_TOKENS:
    if name in added:
      return {"bos_token_id": added[name], "eos_token_id": added[name]}
  return {}
