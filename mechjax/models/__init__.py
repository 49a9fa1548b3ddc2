"""The models the studies train, as flax modules: two-layer MLPs, bilinear networks (with their
weight symmetries and the export to layers for tensor similarity), a small transformer and a
top-k sparse autoencoder; deep linear networks, as plain functions (:mod:`mechjax.models.
deep_linear`); and pretrained GPT-2, GPT-NeoX (Pythia), Llama and Qwen2 checkpoints read from a
Hugging Face directory (:mod:`mechjax.models.pretrained`).

Example::

    from mechjax import models
    net = models.BilinearNet(features=10, d_model=32, hidden=64)
    params = net.init(jax.random.key(0), jnp.zeros((1, 64)))["params"]
    layers = models.bilinear.to_layers(net, params)  # for mechjax.similarity
"""

from mechjax.models import bilinear
from mechjax.models import convert
from mechjax.models import deep_linear
from mechjax.models import mlp
from mechjax.models import pretrained
from mechjax.models import sae
from mechjax.models import sites
from mechjax.models import transformer
from mechjax.models.bilinear import Bilinear
from mechjax.models.bilinear import BilinearBlock
from mechjax.models.bilinear import BilinearNet
from mechjax.models.mlp import SingleNeuron
from mechjax.models.mlp import TwoLayer
from mechjax.models.sae import SAE
from mechjax.models.sae import sae_loss
from mechjax.models.transformer import Transformer

__all__ = [
  "SAE",
  "Bilinear",
  "BilinearBlock",
  "BilinearNet",
  "SingleNeuron",
  "Transformer",
  "TwoLayer",
  "bilinear",
  "convert",
  "deep_linear",
  "mlp",
  "pretrained",
  "sae",
  "sae_loss",
  "sites",
  "transformer",
]
