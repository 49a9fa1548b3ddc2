"""Synthetic data generated on the device: Fourier-phase inputs (power-law amplitudes, controlled
phases), parenthesis strings, Dyck-k sequences, token sequences with repeated halves and modular
addition pairs; scikit-learn's 8×8 digits; and token corpora from text files for pretrained
language models (``data.tokens``).

Each module is a namespace of its own (``data.fourier``, ``data.parens``, ``data.dyck``,
``data.repeats``, ``data.modular``, ``data.digits``); the Fourier tasks' samplers are also exported
here.

Example::

    from mechjax import data
    x, y = data.sample_phase_task(jax.random.key(0), 256, shape=32, alpha=1.0)  # x: (256, 32)
"""

from mechjax.data import digits
from mechjax.data import dyck
from mechjax.data import fourier
from mechjax.data import modular
from mechjax.data import parens
from mechjax.data import repeats
from mechjax.data import tokens
from mechjax.data.fourier import colour
from mechjax.data.fourier import phase_scramble
from mechjax.data.fourier import power_law_amplitudes
from mechjax.data.fourier import sample_amplitude_task
from mechjax.data.fourier import sample_phase_task
from mechjax.data.fourier import whiten_amplitudes

__all__ = [
  "colour",
  "digits",
  "dyck",
  "fourier",
  "modular",
  "parens",
  "phase_scramble",
  "power_law_amplitudes",
  "repeats",
  "sample_amplitude_task",
  "sample_phase_task",
  "tokens",
  "whiten_amplitudes",
]
