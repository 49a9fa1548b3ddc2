"""The SGLD sampler's settings: one frozen :class:`SGLDSettings` for every run, the default
inverse temperature, and :func:`settings_from`, the one reader of a call's setting overrides.

Every setting of a run travels in one :class:`SGLDSettings`: everything but the loss, the data,
``w*`` and the key. It is also a settings group of the SLT studies' configs
(:func:`mechjax.config.group`), so chains, draws and step size have one name in every study.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mechjax import config

MALA_EVERY = 16
NORMS_EVERY = 16
STAR_LOSS_PATHS = ("auto", "per_sample", "per_step")
CHAIN_LOOPS = ("auto", "vmap", "map")
NOISE_IMPLS = ("threefry", "rbg", "unsafe_rbg")


def default_nbeta(n: int) -> float:
  """``nβ = n / ln n``: the inverse temperature ``β* = 1/ln n`` (Watanabe's WBIC temperature) times
  ``n``.

  ``n`` is the number of *samples in the dataset*, not the batch size: the minibatch loss is a mean,
  an unbiased estimate of ``L_n``, so ``nβ·∇L_B`` estimates the full ``nβ·∇L_n`` whatever the batch.
  devinterp's default uses the batch size ``b`` instead (``b / ln b``), a much higher temperature;
  both are valid choices of ``β`` (the LLC estimate is consistent for any fixed ``β`` as n grows),
  but they are not interchangeable, and the estimate should be reported with the ``nβ`` used.
  """
  if n < 2:
    raise ValueError(f"n must be >= 2 for n / ln n; got {n}")
  return float(n / math.log(n))


@dataclasses.dataclass(frozen=True)
class SGLDSettings(config.Settings):
  """Everything that defines an SGLD run but the loss, the data, ``w*`` and the key.

  It is also a settings group of the SLT studies' configs (:func:`mechjax.config.group`), so chains,
  draws and step size have one name in every study (``cfg.sgld.num_chains``) whatever their flags
  are called.
  """

  step_size: float = config.setting(config.REQUIRED, "SGLD step size ε.", check=config.positive)
  localization: float = config.setting(
    config.REQUIRED,
    "Localization strength γ of the Gaussian prior at w*.",
    check=config.non_negative,
  )
  batch_size: int = config.setting(
    config.REQUIRED,
    "SGLD minibatch size (drawn with replacement each step).",
    check=config.at_least(1),
  )
  num_chains: int = config.setting(
    4,
    "SGLD chains, vmapped (and sharded when there are several devices).",
    check=config.at_least(1),
  )
  num_draws: int = config.setting(
    200, "SGLD draws per chain, after burn-in.", check=config.at_least(1)
  )
  num_burnin: int = config.setting(
    0, "SGLD burn-in steps per chain (discarded).", check=config.at_least(0)
  )
  nbeta: float | None = config.setting(
    None,
    "Inverse temperature times n; unset: n / ln n of the data (default_nbeta).",
    check=config.positive,
    unset=0.0,
  )
  rmsprop: float | None = config.setting(
    None,
    "Decay α of a pSGLD RMSProp preconditioner; unset: plain SGLD.",
    check=config.within(0.0, 1.0),
  )
  rmsprop_eps: float = config.setting(
    1e-8, "δ of the RMSProp preconditioner.", check=config.positive
  )
  mala: bool = config.setting(
    True,
    "Estimate a MALA acceptance probability every mala_every-th step (one more gradient on "
    "those steps).",
  )
  mala_every: int = config.setting(
    MALA_EVERY,
    "Steps between MALA acceptance estimates (1: every step). The estimate costs a gradient, "
    "so every 16th step adds about 1/16 to a step's cost.",
    check=config.at_least(1),
  )
  norms_every: int = config.setting(
    NORMS_EVERY,
    "Steps between the traces of the distance to w*, the drift norm and the noise norm (1: every "
    "step); the last step always has them. Each is a sum over every sampled weight, which on a "
    "CPU costs a noticeable part of a large model's step.",
    check=config.at_least(1),
  )
  star_loss: str = config.setting(
    "auto",
    "How each step's minibatch loss at w* is found: per_sample computes every sample's loss at "
    "w* once and averages the batch's (exact when the loss is a mean over samples); per_step "
    "evaluates the loss at w* on every step's batch; auto uses per_sample when a check on two "
    "batches shows the loss is such a mean and the data are arrays of at most as many samples as "
    "the chains draw.",
    check=config.one_of(STAR_LOSS_PATHS),
  )
  chain_loop: str = config.setting(
    "auto",
    "How the chains on one device run: vmap batches every op over them; map runs them one after "
    "another (lax.map); auto uses map on a CPU for a model of at least 10,000 parameters, whose "
    "batched step costs more CPU time than the unbatched steps it replaces, and vmap otherwise.",
    check=config.one_of(CHAIN_LOOPS),
  )

  noise_impl: str = config.setting(
    "threefry",
    "PRNG of the Langevin noise: threefry draws it from the chain's key; rbg and unsafe_rbg from "
    "a key of that implementation made from 128 bits of it (other numbers, as random).",
    check=config.one_of(NOISE_IMPLS),
  )
  microbatch_size: int | None = config.setting(
    None,
    "Split each step's minibatch into consecutive pieces of this many samples under a scan and "
    "average their losses and gradients: the same draws to rounding, for a loss that is a mean "
    "over samples, with one piece's activations in memory at a time; unset: the whole batch at "
    "once. It does not change nβ. Must divide batch_size.",
    check=config.at_least(1),
    unset=0,
  )

  def validate(self):
    if self.microbatch_size is not None and self.batch_size % self.microbatch_size:
      raise config.ConfigError(
        ("microbatch_size", "batch_size"),
        f"microbatch_size={self.microbatch_size} must divide batch_size={self.batch_size}",
      )

  @property
  def num_steps(self) -> int:
    """Steps per chain: burn-in and draws."""
    return self.num_burnin + self.num_draws

  def resolved(self, n: int) -> SGLDSettings:
    """These settings with ``nbeta`` filled in for a dataset of ``n`` samples when it is unset."""
    return self if self.nbeta is not None else dataclasses.replace(self, nbeta=default_nbeta(n))


SGLD_FIELDS = tuple(f.name for f in dataclasses.fields(SGLDSettings))
REQUIRED_FIELDS = ("step_size", "localization", "batch_size")


def settings_from(settings: SGLDSettings | None = None, /, **overrides: Any) -> SGLDSettings:
  """The one way every SLT entry point reads its sampler settings: ``settings`` (an
  :class:`SGLDSettings`; default none) with ``overrides`` replacing its fields.

  ``estimate_llc(loss, w, data, key=k, step_size=1e-4, localization=100.0, batch_size=64)``, a
  study's ``estimate_llc(..., settings=cfg.sgld)`` and ``estimate_llc(..., settings=cfg.sgld,
  num_draws=50)`` all come here. An override left at None keeps the settings' value (or the
  default). Without ``settings`` the fields with no default (:data:`REQUIRED_FIELDS`) must be among
  the overrides.

  Raises:
    TypeError: an override that is not a field of :class:`SGLDSettings` (a misspelling would
      otherwise be lost), ``settings`` of another type, or a required field missing.
    mechjax.config.ConfigError: a value out of range, as :class:`SGLDSettings` checks it.
  """
  unknown = sorted(set(overrides) - set(SGLD_FIELDS))
  if unknown:
    raise TypeError(
      f"unknown SGLD settings {unknown}: the sampler takes the fields of SGLDSettings, "
      f"{', '.join(SGLD_FIELDS)}"
    )
  given = {k: v for k, v in overrides.items() if v is not None}
  if settings is not None:
    if not isinstance(settings, SGLDSettings):
      raise TypeError(f"settings must be an SGLDSettings; got {type(settings).__name__}")
    return dataclasses.replace(settings, **given) if given else settings
  missing = [k for k in REQUIRED_FIELDS if k not in given]
  if missing:
    raise TypeError(f"missing the SGLD settings {missing} (or pass settings=SGLDSettings(...))")
  return SGLDSettings(**given)
