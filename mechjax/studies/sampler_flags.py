"""The SLT studies' sampler flags: one command-line name per SGLD setting, and the defaults the
patterning studies share.

The sampler itself (:class:`mechjax.slt.settings.SGLDSettings`) knows nothing of flags; a study's
``Config`` holds its settings as a group (:func:`mechjax.config.group`) with the names below.
"""

from __future__ import annotations

from typing import Any

from mechjax import config
from mechjax.slt.settings import SGLDSettings

STUDY_FLAGS = {
  "num_chains": "chains",
  "num_draws": "draws",
  "num_burnin": "burnin",
  "step_size": "sgld_step_size",
  "localization": "localization",
  "batch_size": "sgld_batch_size",
}


def study_group(help: str, **defaults: Any) -> Any:  # noqa: A002
  """The SGLD settings group of a susceptibility study's ``Config``, with the flags ``--chains
  --draws --burnin --sgld_step_size --localization --sgld_batch_size`` (:data:`STUDY_FLAGS`) and the
  defaults the patterning studies share (4 chains, ε = 1e-4, γ = 100, batches of 64), which
  ``defaults`` override."""
  base = dict(step_size=1e-4, localization=100.0, batch_size=64, num_chains=4)
  return config.group(SGLDSettings(**{**base, **defaults}), help=help, flags=STUDY_FLAGS)
