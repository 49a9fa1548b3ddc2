"""The studies: each a question with a command that answers it, and the frame that runs them.

The frame is here: ``frame`` (the ``Study`` object and what every study does around its science),
``workdir``, ``runinfo`` and ``sampler_flags``. ``template`` is the study to copy. The others are
grouped by the question they answer, one subpackage each:

- ``fourier``: does a network learn a signal's amplitudes before its phases, and how fast?
- ``llc``: how does the local learning coefficient move while a model learns, and what is it for a
  checkpoint?
- ``patterning``: can a re-weighting of the data, read off susceptibilities, steer what a model
  learns?
- ``rotation``: are independently trained models the same up to a rotation of the residual stream
  (polymorphism)?
- ``tensor_similarity``: does weight-space similarity of bilinear networks track what they compute?

A study's module, its ``STUDY.name``, its experiment file and its default workdir share one name, so
``find(name)`` gives the module of ``experiments/<name>.py`` and ``from mechjax.studies import
<name>`` still works for a study in a subpackage.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

_FRAME = frozenset({"frame", "workdir", "runinfo", "sampler_flags"})


def _module_paths() -> dict[str, str]:
  """Every module under ``mechjax.studies``, by its last name, without importing any: ``{name:
  dotted path}``."""
  out = {}
  for info in pkgutil.iter_modules(__path__):
    if not info.ispkg:
      out[info.name] = f"{__name__}.{info.name}"
      continue
    package = importlib.import_module(f"{__name__}.{info.name}")
    for sub in pkgutil.iter_modules(package.__path__):
      out[sub.name] = f"{package.__name__}.{sub.name}"
  return out


def find(name: str) -> types.ModuleType:
  """The module of the study (or study helper) called ``name``, in whichever subpackage it lives:
  ``find("patterning_parens")`` is ``mechjax.studies.patterning.patterning_parens``."""
  paths = _module_paths()
  if name not in paths:
    known = sorted(n for n in paths if n not in _FRAME)
    raise ValueError(f"no study module {name!r} in mechjax.studies; expected one of {known}")
  return importlib.import_module(paths[name])


def all_studies() -> dict[str, types.ModuleType]:
  """Every study, ``{name: module}``: the modules under ``mechjax.studies`` that export a
  ``STUDY`` (imports them all)."""
  out = {}
  for name, path in sorted(_module_paths().items()):
    module = importlib.import_module(path)
    if hasattr(module, "STUDY"):
      out[name] = module
  return out


def __getattr__(name: str) -> types.ModuleType:
  """``from mechjax.studies import fourier_phase``: a study by its name, from its subpackage."""
  if name.startswith("__"):
    raise AttributeError(name)
  paths = _module_paths()
  if name not in paths:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  return importlib.import_module(paths[name])
