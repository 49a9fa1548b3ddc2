"""Which module reads which checkpoint: the dispatch table from ``config.json``'s ``architectures``
to a family's module, and the two readers that use it, :func:`arch_from_config` and
:func:`params_from_hf`.

A family's module (:mod:`~mechjax.models.pretrained.gpt2`,
:mod:`~mechjax.models.pretrained.gpt_neox`, :mod:`~mechjax.models.pretrained.llama`) names its
``ARCHITECTURES``, the ``FAMILIES`` it makes, the ``PREFIX`` of its base model's weight names, and
``arch(cfg, activation, architecture)``, ``params(arch, get, has)`` and ``head(has)``. A new family
is a module with those names and one entry in :data:`MODULES`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from mechjax.models.pretrained import gpt2
from mechjax.models.pretrained import gpt_neox
from mechjax.models.pretrained import llama
from mechjax.models.pretrained.arch import ACTIVATIONS
from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import refuse

MODULES = (gpt2, gpt_neox, llama)
BY_ARCHITECTURE = {name: m for m in MODULES for name in m.ARCHITECTURES}
BY_FAMILY = {family: m for m in MODULES for family in m.FAMILIES}
ARCHITECTURES = tuple(BY_ARCHITECTURE)
SAVED_ARCHITECTURE = "MechjaxDecoderLM"  # mechjax's own layout, written by checkpoint.save()


def arch_from_config(cfg: dict) -> Arch:
  """The :class:`~mechjax.models.pretrained.arch.Arch` of a ``config.json`` (as a dict). Raises
  :class:`~mechjax.models.pretrained.arch.CheckpointError` for an architecture or a config value
  that is not implemented."""
  archs = cfg.get("architectures") or []
  if archs == [SAVED_ARCHITECTURE]:
    saved = cfg.get("mechjax_arch") or {}
    fields = [f.name for f in dataclasses.fields(Arch)]
    if sorted(saved) != sorted(fields):
      refuse(f"config.json: mechjax_arch must give exactly the fields of Arch: {', '.join(fields)}")
    return Arch(**saved)
  arch = next((a for a in archs if a in BY_ARCHITECTURE), None)
  if arch is None:
    refuse(
      f"config.json: architecture {archs or cfg.get('model_type')!r} is not supported; supported: "
      f"{', '.join(ARCHITECTURES)}"
    )
  activation = cfg.get("activation_function", cfg.get("hidden_act"))
  if activation not in ACTIVATIONS:
    refuse(
      f"config.json: activation {activation!r} is not implemented; supported: "
      f"{', '.join(ACTIVATIONS)}"
    )
  return BY_ARCHITECTURE[arch].arch(cfg, activation, arch)


def params_from_hf(arch: Arch, get: Callable[[str, tuple], np.ndarray], has=None) -> dict:
  """:class:`~mechjax.models.pretrained.model.DecoderLM` params from Hugging Face tensors:
  ``get(name, shape)`` returns the tensor of that name (names without the base model's prefix for
  the body), ``has(name)`` whether there is one. Torch's ``Linear`` stores ``(out, in)``, GPT-2's
  ``Conv1D`` ``(in, out)``; fused projections are split per head (GPT-2's ``c_attn`` as ``[q; k;
  v]``, GPT-NeoX's ``query_key_value`` as ``(heads, 3, head_dim)``)."""
  family = BY_FAMILY[arch.family]
  p = family.params(arch, get, has)
  if not arch.tied_embeddings:
    p["unembed"] = {"kernel": get(family.head(has), (arch.vocab_size, arch.d_model)).T}
  return p


def prefix(arch: Arch) -> str:
  """The prefix of the base model's weight names in this family's checkpoints."""
  return BY_FAMILY[arch.family].PREFIX
