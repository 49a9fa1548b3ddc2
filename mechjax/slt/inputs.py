"""What the sampler accepts as data and parameters, and the checks that refuse the rest in one line
before anything is compiled.

Data come in three kinds: a pytree of arrays with the ``n`` samples first; a device-side sampler
``sample_batch(key) -> batch``; or :class:`Streamed` host data (a memory-mapped token file's
windows, say) that reach the chains a part of steps at a time (:mod:`mechjax.slt.stream`).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.slt.settings import SGLDSettings

Params = Any


@dataclasses.dataclass(frozen=True, eq=False)
class Streamed:
  """Data for the SLT calls that stay on the host and reach the device a part at a time.

  Attributes:
    array: ``(n, ...)`` samples first: a NumPy array or a memory map (e.g. the windows of a token
      file, :func:`mechjax.data.tokens.disk_windows`), indexed with an integer array per part.
    steps_per_chunk: the steps of one part: each part's samples (``num_chains × steps_per_chunk ×
      batch_size`` of them) are gathered on the host while the previous part runs.
    dtype: the dtype the gathered samples are cast to before they reach the device (a token file's
      ``uint16`` ids to ``int32``, say), or None to keep ``array``'s.
  """

  array: Any
  steps_per_chunk: int = 64
  dtype: Any = None

  def __post_init__(self):
    shape = getattr(self.array, "shape", None)
    if shape is None or len(shape) < 1 or shape[0] < 1:
      raise ValueError(
        "Streamed needs an array with the samples first, (n, ...) with n >= 1; got "
        f"{type(self.array).__name__} of shape {shape}"
      )
    if not (isinstance(self.steps_per_chunk, int) and self.steps_per_chunk >= 1):
      raise ValueError(f"steps_per_chunk must be an int >= 1; got {self.steps_per_chunk!r}")

  @property
  def num_samples(self) -> int:
    return int(self.array.shape[0])

  def spec(self, rows: int | None = None) -> jax.ShapeDtypeStruct:
    """The shape and dtype of ``rows`` gathered samples (all of them when None)."""
    dtype = self.dtype if self.dtype is not None else self.array.dtype
    rows = self.num_samples if rows is None else rows
    return jax.ShapeDtypeStruct((rows, *self.array.shape[1:]), jnp.dtype(dtype))

  def gather(self, idx: np.ndarray) -> np.ndarray:
    """The samples at ``idx`` (any shape), shaped ``idx.shape + sample shape``."""
    rows = np.asarray(self.array[np.asarray(idx).reshape(-1)])
    if self.dtype is not None:
      rows = rows.astype(self.dtype, copy=False)
    return rows.reshape(*np.shape(idx), *self.array.shape[1:])


def check_params(params: Params) -> None:
  """Refuses a params leaf that is not an array or a number (a function, a string, a module's
  static field), naming it: such leaves must be split off before sampling, e.g. with
  ``eqx.partition(model, eqx.is_inexact_array)``, and closed over by the loss."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex, bool)):
      continue
    raise TypeError(
      f"params leaf {jax.tree_util.keystr(path) or '(root)'} is a {type(leaf).__name__}, not an "
      "array: SGLD samples float arrays and holds integer and boolean ones fixed, but cannot "
      "carry other objects. Split them off first (for equinox: params, static = "
      "eqx.partition(model, eqx.is_inexact_array)) and rebuild the model inside loss_fn."
    )


def is_sampler(data) -> bool:
  """Whether ``data`` is a device-side sampler ``sample_batch(key) -> batch`` rather than arrays."""
  return callable(data)


def check_sampler(sample_batch, batch_size: int) -> None:
  """Refuses a sampler whose batches do not have ``batch_size`` samples (traced once, abstractly;
  nothing is drawn)."""
  shapes = jax.eval_shape(sample_batch, jax.random.key(0))
  sizes = {leaf.shape[0] if leaf.shape else None for leaf in jax.tree.leaves(shapes)}
  if sizes != {batch_size}:
    raise ValueError(
      f"sample_batch(key) must return a batch whose leaves all have batch_size={batch_size} "
      f"samples first; got leading sizes {sorted(sizes, key=str)}"
    )


def data_size(data) -> int:
  """The number of samples ``n`` in ``data``, a pytree of arrays with the samples first; refuses,
  in one line that names each leaf's length, leaves whose leading lengths differ (and scalar
  leaves, which have no sample axis)."""
  leaves = jax.tree_util.tree_flatten_with_path(data)[0]
  if not leaves:
    raise ValueError(
      "data holds no arrays: pass a pytree of arrays with the samples first, or a sampler "
      "sample_batch(key) -> batch"
    )
  lengths = {}
  for path, leaf in leaves:
    name = f"data{jax.tree_util.keystr(path)}"
    shape = np.shape(leaf)
    if not shape:
      raise ValueError(
        f"{name} is a scalar, but every leaf of data needs the samples on its leading axis; "
        "close over constants in the loss instead"
      )
    lengths[name] = shape[0]
  if len(set(lengths.values())) > 1:
    listing = ", ".join(f"{k} has {v}" for k, v in lengths.items())
    raise ValueError(
      f"data's leaves have different numbers of samples ({listing}); every leaf needs the same "
      "leading (sample) length n, one row per training sample"
    )
  return next(iter(lengths.values()))


def _describe(out) -> str:
  if isinstance(out, jax.ShapeDtypeStruct):
    return f"an array of shape {tuple(out.shape)}"
  return f"a {type(out).__name__} of {len(jax.tree.leaves(out))} arrays"


# Output shapes of the losses already checked: {loss: {input signature: shape}}, weakly keyed by
# the loss (a bound method by its object), so that a user's closure is not kept alive by the cache.
_LOSS_SHAPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SHAPES_PER_LOSS = 16


def _loss_shape(loss_fn, params, batch):
  """``jax.eval_shape(loss_fn, params, batch)``, remembered by the loss and the inputs' shapes, so a
  repeated call with new values traces nothing (a large model's trace is not free). A loss that
  cannot be weakly referenced or hashed is traced on every call."""
  leaves, tree = jax.tree.flatten((params, batch))
  sig = (tree, tuple((np.shape(x), str(jnp.result_type(x))) for x in leaves))
  ref = loss_fn
  holder, func = getattr(loss_fn, "__self__", None), getattr(loss_fn, "__func__", None)
  if holder is not None and func is not None:  # a bound method: a new object at every access
    ref, sig = holder, (func, sig)
  try:
    shapes = _LOSS_SHAPES.setdefault(ref, {})
    known = sig in shapes
  except TypeError:  # not weakly referenceable, or unhashable
    return jax.eval_shape(loss_fn, params, batch)
  if not known:
    if len(shapes) >= _SHAPES_PER_LOSS:
      shapes.clear()
    shapes[sig] = jax.eval_shape(loss_fn, params, batch)
  return shapes[sig]


def check_loss(loss_fn, params, data, batch_size: int, per_sample: bool = False) -> None:
  """Refuses, before anything is compiled, a loss whose output has the wrong shape: traced once
  with :func:`jax.eval_shape` on a batch of ``batch_size`` samples of ``data``'s shapes (nothing
  is computed). ``loss_fn(params, batch)`` must return a scalar, the mean loss of the batch; with
  ``per_sample``, one loss per sample, ``(B,)`` or ``(B, T)``."""
  if is_sampler(data):
    batch = jax.eval_shape(data, jax.random.key(0))
  else:
    batch = jax.tree.map(
      lambda x: jax.ShapeDtypeStruct((batch_size,) + np.shape(x)[1:], jnp.result_type(x)), data
    )
  out = _loss_shape(loss_fn, params, batch)
  scalar = isinstance(out, jax.ShapeDtypeStruct) and out.shape == ()
  if not per_sample and not scalar:
    raise ValueError(
      f"loss_fn(params, batch) returned {_describe(out)} for a batch of {batch_size} samples, but "
      "the SGLD loss must be a scalar, the mean loss of the batch (e.g. jnp.mean of the "
      "per-sample losses); per-sample losses go to "
      "slt.estimate_susceptibilities(per_sample_loss, ...)"
    )
  if per_sample and not (
    isinstance(out, jax.ShapeDtypeStruct) and out.ndim in (1, 2) and out.shape[0] == batch_size
  ):
    raise ValueError(
      f"per_sample_loss(params, batch) returned {_describe(out)} for a batch of {batch_size} "
      f"samples, but it must return one loss per sample, ({batch_size},), or per token, "
      f"({batch_size}, T); the mean loss alone goes to slt.estimate_llc(loss_fn, ...)"
    )


def resolve_data(
  settings: SGLDSettings, data, loss_fn=None, params=None, per_sample: bool = False
) -> tuple[SGLDSettings, Callable | None]:
  """``(settings with nβ filled in, the sampler or None)`` for arrays, a device-side sampler or
  host data streamed a part at a time (:class:`Streamed`, whose ``n`` is its
  rows).

  Arrays: every leaf must have the same number ``n`` of samples first (:func:`data_size`),
  ``batch_size`` must not exceed it, and an unset ``nβ`` is ``n / ln n``. A sampler
  ``sample_batch(key) -> batch`` has no ``n``: ``nβ`` must be given (it sets the posterior's
  sample size), and its batches must hold ``batch_size`` samples. With ``loss_fn`` and ``params``
  the loss's output shape is checked too (:func:`check_loss`)."""
  if isinstance(data, Streamed):
    n = data.num_samples
    if settings.batch_size > n:
      raise ValueError(f"batch_size={settings.batch_size} exceeds the {n} streamed samples")
    if loss_fn is not None:
      check_loss(loss_fn, params, data.spec(), settings.batch_size, per_sample)
    return settings.resolved(n), None
  if is_sampler(data):
    if settings.nbeta is None:
      raise ValueError(
        "with a sampler sample_batch(key) for data there is no sample count n to set nβ = n / ln n "
        "from; pass nbeta= (e.g. default_nbeta(n) for the n your posterior should describe)"
      )
    check_sampler(data, settings.batch_size)
    resolved, sampler = settings, data
  else:
    n = data_size(data)
    if settings.batch_size > n:
      raise ValueError(f"batch_size={settings.batch_size} exceeds the {n} samples in data")
    resolved, sampler = settings.resolved(n), None
  if loss_fn is not None:
    check_loss(loss_fn, params, data, settings.batch_size, per_sample)
  return resolved, sampler
