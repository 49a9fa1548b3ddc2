"""mechjax: JAX tools for theory-driven mechanistic interpretability.

The public API lives in the subpackages, each with an ``__all__`` (listed by pillar in
``docs/api.md``):

* :mod:`mechjax.train`: the training core (``Problem``, ``train``, checkpoints, metrics);
* :mod:`mechjax.slt`: SGLD, the local learning coefficient, susceptibilities, patterning, exact
  learning coefficients;
* :mod:`mechjax.align`: orthogonal Procrustes, Haar and privileged-basis tests, transfer;
* :mod:`mechjax.similarity`: tensor similarity of bilinear networks, representational similarity;
* :mod:`mechjax.data`: Fourier-phase inputs, parentheses, Dyck-k, repeated sequences;
* :mod:`mechjax.models`: the MLPs, bilinear networks, transformer and SAE;
* :mod:`mechjax.studies`: the experiments' studies, callable as ``study.run(cfg, workdir)``.

Importing ``mechjax`` itself imports no subpackage (and not JAX).
"""

__version__ = "0.2.0"

__all__ = ["__version__"]
