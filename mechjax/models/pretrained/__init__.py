"""Pretrained language models from a Hugging Face checkpoint directory, without torch.

``load(directory)`` reads ``config.json`` and the weights (``model.safetensors``, sharded
``model-XXXXX-of-YYYYY.safetensors`` with ``model.safetensors.index.json``, or, where torch is
installed, ``pytorch_model.bin``) and returns a flax module and its params::

    model, params = pretrained.load("checkpoints/pythia-70m")
    logits = model.apply({"params": params}, tokens_BxT)                  # (B, T, vocab)
    logits, sites = model.apply({"params": params}, tokens_BxT, return_sites=True)

Architectures (``config.json``'s ``architectures``): ``GPT2LMHeadModel``, ``GPTNeoXForCausalLM``
(Pythia), ``LlamaForCausalLM`` and ``Qwen2ForCausalLM``. A config value that would change the
function and is not implemented (a rope scaling type, a sliding window, another activation) is
refused by name.

The package, one job a module:

* :mod:`~mechjax.models.pretrained.arch`: the :class:`Arch` (what differs between families) and
  :class:`CheckpointError`;
* :mod:`~mechjax.models.pretrained.gpt2`, :mod:`~mechjax.models.pretrained.gpt_neox`,
  :mod:`~mechjax.models.pretrained.llama` (with Qwen2): each family's config keys and weight names;
* :mod:`~mechjax.models.pretrained.families`: which family reads which checkpoint;
* :mod:`~mechjax.models.pretrained.model`: the flax module :class:`DecoderLM` and its losses;
* :mod:`~mechjax.models.pretrained.safetensors`: the file format;
* :mod:`~mechjax.models.pretrained.checkpoint`: :func:`load` and :func:`save` (mechjax's own
  layout);
* :mod:`~mechjax.models.pretrained.export`: :func:`export_hf`, a model in its Hugging Face
  architecture's own layout, which transformers reads;
* :mod:`~mechjax.models.pretrained.surgery`: function-preserving changes of the weights, and the
  per-component masks.
"""

from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.arch import CheckpointError
from mechjax.models.pretrained.checkpoint import load
from mechjax.models.pretrained.checkpoint import read_weights
from mechjax.models.pretrained.checkpoint import save
from mechjax.models.pretrained.export import export_hf
from mechjax.models.pretrained.families import ARCHITECTURES
from mechjax.models.pretrained.families import arch_from_config
from mechjax.models.pretrained.families import params_from_hf
from mechjax.models.pretrained.model import DecoderLM
from mechjax.models.pretrained.model import check_tokens
from mechjax.models.pretrained.model import lm_losses
from mechjax.models.pretrained.model import logsumexp_head
from mechjax.models.pretrained.model import next_token_losses
from mechjax.models.pretrained.model import site_names
from mechjax.models.pretrained.safetensors import read_safetensors
from mechjax.models.pretrained.safetensors import write_safetensors
from mechjax.models.pretrained.surgery import component_boxes
from mechjax.models.pretrained.surgery import component_masks
from mechjax.models.pretrained.surgery import fold_norms
from mechjax.models.pretrained.surgery import mean_preserving
from mechjax.models.pretrained.surgery import restriction_boxes
from mechjax.models.pretrained.surgery import rotate_residual
from mechjax.models.sites import attention_patterns

__all__ = [
  "ARCHITECTURES",
  "Arch",
  "CheckpointError",
  "DecoderLM",
  "arch_from_config",
  "attention_patterns",
  "check_tokens",
  "component_boxes",
  "component_masks",
  "export_hf",
  "restriction_boxes",
  "fold_norms",
  "lm_losses",
  "load",
  "logsumexp_head",
  "mean_preserving",
  "next_token_losses",
  "params_from_hf",
  "read_safetensors",
  "read_weights",
  "rotate_residual",
  "save",
  "site_names",
  "write_safetensors",
]
