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

Importing ``mechjax`` itself imports no subpackage (and not JAX). :func:`use_all_cpu_cores`, called
before JAX runs anything, makes every CPU core a JAX device, so that SGLD chains and seeds are
split over the cores.
"""

import os

__version__ = "0.2.0"

__all__ = ["__version__", "use_all_cpu_cores"]


def usable_cpu_cores() -> int:
  """The CPU cores this process may run on (its affinity mask, which a cluster's scheduler sets),
  or ``os.cpu_count()`` where the platform has no such mask."""
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def use_all_cpu_cores() -> int:
  """Makes every usable CPU core a JAX CPU device and returns the number of CPU devices.

  XLA runs one CPU device's elementwise work on one core, so on a CPU a vmapped sampler or a seed
  sweep uses one core unless the program is split over several devices. mechjax splits chains,
  points and seeds over all devices whenever their number divides the axis
  (:mod:`mechjax.sharding`); with a device per core that uses every core. Call this once, before
  JAX runs anything (after ``import jax`` is fine; before the first array or ``jax.devices()``).

  It changes nothing, and returns the devices JAX already has, when JAX has started, when the
  CPU device count was set already (``jax_num_cpu_devices``, or
  ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``), or on a machine with one core.
  Accelerator backends are not affected: on a GPU or TPU the devices are the chips.
  """
  import jax  # local: importing mechjax does not import JAX

  _set_cpu_devices()
  return len(jax.devices("cpu"))


def _set_cpu_devices() -> bool:
  """:func:`use_all_cpu_cores` without starting JAX: returns whether it set the CPU device
  count (False when it changed nothing, for the reasons listed there)."""
  import jax

  cores = usable_cpu_cores()
  preset = "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
  if cores < 2 or preset or jax.config.jax_num_cpu_devices not in (-1, None, 1):
    return False
  try:
    jax.config.update("jax_num_cpu_devices", cores)
  except RuntimeError:  # the backend has started: the device count is fixed
    return False
  return True
