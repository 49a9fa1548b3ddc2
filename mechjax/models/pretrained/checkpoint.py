"""Checkpoint directories: :func:`load` reads a Hugging Face model directory (``config.json`` and
the weights) into a :class:`~mechjax.models.pretrained.model.DecoderLM` and its params, and
:func:`save` writes a model in mechjax's own layout, which :func:`load` reads back.

The weights are ``model.safetensors``, sharded ``model-XXXXX-of-YYYYY.safetensors`` with
``model.safetensors.index.json``, or, where torch is installed, ``pytorch_model.bin``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from mechjax.models.pretrained import families
from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import CheckpointError
from mechjax.models.pretrained.model import DecoderLM
from mechjax.models.pretrained.safetensors import read_safetensors
from mechjax.models.pretrained.safetensors import write_safetensors


def read_weights(directory: str) -> dict[str, np.ndarray]:
  """The checkpoint's tensors by name: ``model.safetensors``, the shards listed in
  ``model.safetensors.index.json``, or ``pytorch_model.bin`` through torch."""
  single = os.path.join(directory, "model.safetensors")
  index = os.path.join(directory, "model.safetensors.index.json")
  if os.path.exists(single):
    return read_safetensors(single)
  if os.path.exists(index):
    with open(index) as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for shard in shards:
      out.update(read_safetensors(os.path.join(directory, shard)))
    return out
  binary = os.path.join(directory, "pytorch_model.bin")
  if os.path.exists(binary):
    try:
      import torch
    except ImportError:
      raise CheckpointError(
        f"{binary} needs torch to read; install torch, or convert it once where torch is: python "
        '-c "import torch; from safetensors.torch import save_file; save_file({k: v.contiguous() '
        f"for k, v in torch.load('{binary}', weights_only=True).items()}}, "
        f"'{os.path.join(directory, 'model.safetensors')}')\""
      ) from None
    state = torch.load(binary, map_location="cpu", weights_only=True, mmap=True)
    out = {}
    for k, v in state.items():
      if v.dtype == torch.bfloat16:
        out[k] = v.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
      else:
        out[k] = v.numpy()
    return out
  raise CheckpointError(
    f"{directory} has no weights: expected model.safetensors, model.safetensors.index.json with "
    "its shards, or pytorch_model.bin"
  )


class Weights:
  """Looks tensors up by Hugging Face name, with or without the base model's prefix, and checks
  their shapes."""

  def __init__(self, tensors: dict, prefixes: tuple[str, ...], dtype):
    self.tensors, self.prefixes, self.dtype = tensors, prefixes, dtype

  def has(self, key: str) -> bool:
    return any(p + key in self.tensors for p in self.prefixes)

  def __call__(self, key: str, shape: tuple[int, ...]) -> np.ndarray:
    for p in self.prefixes:
      if p + key in self.tensors:
        value = self.tensors[p + key]
        if tuple(value.shape) != tuple(shape):
          raise CheckpointError(
            f"weight {p + key} has shape {tuple(value.shape)}; the config implies {tuple(shape)}"
          )
        return np.asarray(value, self.dtype)
    raise CheckpointError(f"weight {self.prefixes[0] + key} is missing from the checkpoint")


def load(directory: str | os.PathLike, *, dtype=jnp.float32) -> tuple[DecoderLM, dict]:
  """``(model, params)`` from a Hugging Face model directory (module docstring); ``model.apply(
  {"params": params}, tokens_BxT)`` gives the logits. Raises :class:`CheckpointError`, one line,
  for an unsupported architecture or config value and for a missing or misshapen weight."""
  directory = os.fspath(directory)
  cfg = read_config(directory)
  arch = families.arch_from_config(cfg)
  saved = cfg.get("architectures") == [families.SAVED_ARCHITECTURE]
  tensors = read_weights(directory)
  if saved:
    return _load_saved(arch, tensors, dtype)
  store = Weights(
    tensors, (families.prefix(arch), ""), np.dtype(dtype)
  )  # the body's names, then top-level
  params = families.params_from_hf(arch, store, store.has)
  params = jax.tree.map(lambda x: jnp.asarray(x, dtype), params)
  return DecoderLM(arch, dtype), params


def read_config(directory: str) -> dict:
  """The checkpoint's ``config.json`` as a dict; one line for a directory that does not exist, a
  hub cache folder (``models--org--name``, whose ``snapshots/<revision>/`` is the checkpoint), a
  folder without ``config.json`` and a config that is not JSON."""
  if not os.path.exists(directory):
    raise CheckpointError(f"{directory} does not exist; pass a Hugging Face model directory")
  if not os.path.isdir(directory):
    raise CheckpointError(
      f"{directory} is a file; pass the Hugging Face model directory that holds config.json"
    )
  path = os.path.join(directory, "config.json")
  if not os.path.exists(path):
    snapshots = os.path.join(directory, "snapshots")
    revisions = sorted(os.listdir(snapshots)) if os.path.isdir(snapshots) else []
    if revisions:
      shown = ", ".join(os.path.join(snapshots, r) for r in revisions[:3])
      more = f" (and {len(revisions) - 3} more)" if len(revisions) > 3 else ""
      raise CheckpointError(
        f"{directory} is a Hugging Face hub cache folder, not a checkpoint; pass one of its "
        f"snapshots/<revision>/ folders: {shown}{more}"
      )
    raise CheckpointError(f"{directory} has no config.json; pass a Hugging Face model directory")
  try:
    with open(path) as f:
      return json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise CheckpointError(f"{path} is not valid JSON ({e}); the checkpoint is damaged") from None


def _load_saved(arch: Arch, tensors: dict, dtype) -> tuple[DecoderLM, dict]:
  """A checkpoint written by :func:`save`: one tensor per param, named by its path."""
  model = DecoderLM(arch, dtype)
  store = Weights(tensors, ("",), np.dtype(dtype))
  params = jax.tree_util.tree_map_with_path(
    lambda k, s: jnp.asarray(store(param_name(k), s.shape), dtype), param_shapes(model)
  )
  return model, params


def param_shapes(model: DecoderLM) -> dict:
  """The model's params as shapes and dtypes (nothing is computed)."""
  return jax.eval_shape(
    lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  )


def param_name(path) -> str:
  return ".".join(str(getattr(k, "key", k)) for k in path)


def refuse_existing(directory: str, writer: str, error: type[Exception] = CheckpointError) -> None:
  """Refuses, with ``error`` in one line, a ``directory`` that already holds a checkpoint (a
  ``config.json`` or weights): ``writer`` writes a new directory and overwrites nothing."""
  for name in ("config.json", "model.safetensors", "model.safetensors.index.json"):
    if os.path.exists(os.path.join(directory, name)):
      raise error(f"{directory} already holds {name}; {writer} writes a new directory")


def tokenizer_source(tokenizer: str | os.PathLike | None) -> str | None:
  """The ``tokenizer.json`` that ``tokenizer`` names (the file, or a folder holding it), or None
  for None; one line when there is none."""
  if tokenizer is None:
    return None
  source = os.fspath(tokenizer)
  if os.path.isdir(source):
    source = os.path.join(source, "tokenizer.json")
  if not os.path.isfile(source):
    raise CheckpointError(
      f"tokenizer={source} does not exist; pass a tokenizer.json or its checkpoint directory"
    )
  return source


def save(
  directory: str | os.PathLike,
  model: DecoderLM,
  params: dict,
  *,
  tokenizer: str | os.PathLike | None = None,
) -> str:
  """Writes ``(model, params)`` to a new checkpoint directory that :func:`load` reads back
  exactly: ``config.json`` (``architectures: ["MechjaxDecoderLM"]`` and the :class:`Arch`) and
  ``model.safetensors``, one tensor per param named by its path (``attn_0.query.kernel``).

  For a model that is not a Hugging Face checkpoint as it stands: a folded or rotated one
  (:func:`fold_norms`, :func:`rotate_residual`). This is mechjax's layout, not Hugging Face's:
  transformers does not read it. A directory that already holds a ``config.json`` or weights is
  refused, not overwritten. Returns the directory.

  ``tokenizer``, the source checkpoint's ``tokenizer.json`` or its directory, is copied in as
  ``tokenizer.json``, so that corpora (:mod:`mechjax.data.tokens`) and the studies' tokenizer
  check work on the saved model as on its source::

      pretrained.save("folded", *pretrained.fold_norms(model, params), tokenizer="pythia-70m")
  """
  directory = os.fspath(directory)
  refuse_existing(directory, "save", FileExistsError)
  source = tokenizer_source(tokenizer)
  os.makedirs(directory, exist_ok=True)
  if source is not None:
    shutil.copyfile(source, os.path.join(directory, "tokenizer.json"))
  flat = {param_name(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(params)}
  write_safetensors(os.path.join(directory, "model.safetensors"), flat)
  with open(os.path.join(directory, "config.json"), "w") as f:
    cfg = {
      "architectures": [families.SAVED_ARCHITECTURE],
      "mechjax_arch": dataclasses.asdict(model.arch),
    }
    json.dump(cfg, f, indent=2)
  return directory
