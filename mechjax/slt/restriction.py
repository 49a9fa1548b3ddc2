"""A chain restricted to a box of each parameter leaf carries that box and nothing more.

A weight restriction (one attention head, one MLP, the embedding) is, in the layouts mechjax's
models use, one contiguous block along every axis of each leaf it touches: head ``h`` of a query
kernel ``(d_model, heads, head_dim)`` is ``[:, h:h+1, :]``, an MLP kernel is the whole leaf. A
:class:`Restriction` records that block per leaf, its extent (static: it fixes the shapes a chain
carries) and its corner (an array: restrictions of one shape, such as every head of a layer, share
one compiled program). A chain under it samples ``w_R``, the boxes' weights only: its draw, noise,
preconditioner state and moments are box-sized, and the loss sees ``w* with w_R written into its
boxes``. w* itself is read, never copied per chain.

This is the 0/1 ``param_mask`` of :func:`mechjax.slt.chain.sample_chain` whose non-zero entries
fill a box in every leaf, sampled without the zeros: on the box's coordinates the kernel
(:mod:`mechjax.slt.langevin`) computes the same step, since a masked chain's gradient, noise and
localising pull vanish off the mask, and the noise is the unrestricted chain's, cut to the box
(:meth:`Restriction.noise`). :func:`from_mask` finds the boxes of such a mask; a mask that is not
boxes is sampled as a mask, full-size.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from mechjax.slt import langevin
from mechjax.slt import noise as noise_lib
from mechjax.slt import params as params_lib
from mechjax.slt.params import is_float_leaf

Params = Any


@functools.partial(jax.tree_util.register_dataclass, data_fields=["starts"], meta_fields=["sizes"])
@dataclasses.dataclass(frozen=True, eq=False)
class Restriction:
  """The box of each leaf of a params tree (flattened order) that a chain samples.

  Attributes:
    sizes: per leaf, the box's extent along each axis, or None for a leaf held at ``w*``.
    starts: ``(leaves, max(1, max ndim))`` int32, each box's corner (row ``i``'s first
      ``ndim`` entries; zeros for a leaf held fixed). A pytree child, so a traced argument.
  """

  sizes: tuple[tuple[int, ...] | None, ...]
  starts: Any

  @property
  def num_sampled(self) -> int:
    """How many weights a chain under this restriction samples."""
    return int(sum(np.prod(s) for s in self.sizes if s is not None))

  def _corner(self, i: int, ndim: int):
    return [self.starts[i, k] for k in range(ndim)]

  def take(self, full: Params) -> Params:
    """The boxes' weights of ``full``: a tree like it with None at each leaf held fixed."""
    leaves, treedef = jax.tree.flatten(full)
    self._check(leaves)
    return jax.tree.unflatten(treedef, self._cut(leaves))

  def _cut(self, leaves: list) -> list:
    """Each box of ``leaves`` (one per leaf, None where the leaf is held fixed)."""
    return [
      None if s is None else jax.lax.dynamic_slice(a, self._corner(i, a.ndim), s)
      for i, (a, s) in enumerate(zip(leaves, self.sizes))
    ]

  def put(self, full: Params, sampled: Params) -> Params:
    """``full`` with each box replaced by ``sampled``'s leaf (:meth:`take`'s inverse)."""
    leaves, treedef = jax.tree.flatten(full)
    parts = jax.tree.leaves(sampled)
    out, k = [], 0
    for i, (a, s) in enumerate(zip(leaves, self.sizes)):
      if s is None:
        out.append(a)
        continue
      out.append(jax.lax.dynamic_update_slice(a, parts[k].astype(a.dtype), self._corner(i, a.ndim)))
      k += 1
    return jax.tree.unflatten(treedef, out)

  def noise(self, key: jax.Array, full: Params, impl: str = "threefry") -> Params:
    """Standard normal noise on the boxes: the unrestricted chain's noise
    (:func:`mechjax.slt.langevin.normal_noise`, each float leaf from its own key) on each box,
    computed for the box alone (:func:`mechjax.slt.noise.normals`), so that a restricted chain draws
    what the masked one draws at the cost of its own weights."""
    leaves, treedef = jax.tree.flatten(full)
    support = tuple(s is not None for s in self.sizes)
    keys = iter(langevin.noise_keys(key, params_lib.noise_slots(full, support), impl))
    boxed = [i for i, s in enumerate(self.sizes) if s is not None]
    requests = [
      (next(keys), leaves[i].shape, leaves[i].dtype, self._corner(i, leaves[i].ndim), self.sizes[i])
      for i in boxed
    ]
    out: list = [None] * len(leaves)
    for i, z in zip(boxed, noise_lib.normals(requests)):
      out[i] = z
    return jax.tree.unflatten(treedef, out)

  def mask(self, params: Params) -> Params:
    """The 0/1 float32 mask of the boxes, full-size (for a driver that samples masks)."""
    leaves, treedef = jax.tree.flatten(params)
    self._check(leaves)
    out = []
    for i, (a, s) in enumerate(zip(leaves, self.sizes)):
      m = np.zeros(np.shape(a), np.float32)
      if s is not None:
        corner = np.asarray(self.starts[i, : m.ndim])
        m[tuple(slice(c, c + n) for c, n in zip(corner, s))] = 1
      out.append(m)
    return jax.tree.unflatten(treedef, out)

  def _check(self, leaves) -> None:
    if len(leaves) != len(self.sizes):
      raise ValueError(f"the restriction has {len(self.sizes)} leaves; params has {len(leaves)}")


def from_mask(params: Params, param_mask: Params | None) -> Restriction | None:
  """The :class:`Restriction` whose boxes are exactly ``param_mask``'s non-zero entries, when they
  fill one box in every leaf that has any (a head's slice, a whole MLP kernel); None when the mask
  is None, traced, or not boxes (an arbitrary mask is then sampled as a mask), or selects no float
  weight."""
  if param_mask is None:
    return None
  masks, leaves = jax.tree.leaves(param_mask), jax.tree.leaves(params)
  if len(masks) != len(leaves) or any(isinstance(m, jax.core.Tracer) for m in masks):
    return None
  width = max([1, *(np.ndim(a) for a in leaves)])
  starts = np.zeros((len(leaves), width), np.int32)
  sizes = []
  for i, (a, m) in enumerate(zip(leaves, masks)):
    m = np.asarray(m) != 0
    if not is_float_leaf(a) or not m.any():
      sizes.append(None)
      continue
    if m.shape != np.shape(a):
      return None
    occupied = [  # along each axis, the indices where the mask has a non-zero entry
      np.flatnonzero(m.any(axis=tuple(k for k in range(m.ndim) if k != ax))) for ax in range(m.ndim)
    ]
    lo, hi = [int(o[0]) for o in occupied], [int(o[-1]) + 1 for o in occupied]
    if not m[tuple(slice(l, h) for l, h in zip(lo, hi))].all():
      return None
    sizes.append(tuple(h - l for l, h in zip(lo, hi)))
    starts[i, : m.ndim] = lo
  if all(s is None for s in sizes):
    return None
  return Restriction(tuple(sizes), starts)


def whole(params: Params) -> Restriction:
  """The restriction to every float leaf, whole: the unrestricted chain."""
  leaves = jax.tree.leaves(params)
  width = max([1, *(np.ndim(a) for a in leaves)])
  sizes = tuple(tuple(np.shape(a)) if is_float_leaf(a) else None for a in leaves)
  return Restriction(sizes, np.zeros((len(leaves), width), np.int32))


def leaf_names(params: Params) -> list[str]:
  """Each leaf's path, its keys joined by ``/`` (``attn_0/query/kernel``), in flattened order."""
  paths = jax.tree_util.tree_flatten_with_path(params)[0]
  return ["/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p) for p, _ in paths]


class NotABox(ValueError):
  """A union of boxes that is not one box in some leaf (two heads that are not neighbours)."""


def from_boxes(params: Params, *boxes: dict[str, tuple[slice, ...] | None]) -> Restriction:
  """The restriction to the union of ``boxes``, each a dict from a leaf path (:func:`leaf_names`;
  a path's prefix, such as ``mlp_1``, names every leaf under it) to a tuple of slices, one per
  leading axis that is cut (the rest whole), or None for the whole leaf. Built from shapes alone:
  no mask is made, except of a leaf that two boxes cut, to check that their union is one box
  (:class:`NotABox` if it is not)."""
  names, leaves = leaf_names(params), jax.tree.leaves(params)
  width = max([1, *(np.ndim(a) for a in leaves)])
  starts = np.zeros((len(leaves), width), np.int32)
  cuts: dict[int, list[list[range]]] = {}
  for key, cut in ((k, c) for b in boxes for k, c in b.items()):
    hits = [i for i, n in enumerate(names) if n == key or n.startswith(key + "/")]
    if not hits:
      raise ValueError(f"no parameter leaf is named {key!r} (or lies under it); leaves: {names}")
    for i in (i for i in hits if is_float_leaf(leaves[i])):
      shape, cut = np.shape(leaves[i]), tuple(cut or ())
      ranges = [range(n)[c] for n, c in zip(shape, cut)] + [range(n) for n in shape[len(cut) :]]
      if any(len(r) == 0 or r.step != 1 for r in ranges):
        raise ValueError(f"the box {cut} of leaf {names[i]!r} {shape} must be contiguous")
      cuts.setdefault(i, []).append(ranges)
  sizes: list[tuple[int, ...] | None] = [None] * len(leaves)
  for i, boxes_i in cuts.items():
    lo = [min(b[k].start for b in boxes_i) for k in range(len(boxes_i[0]))]
    hi = [max(b[k].stop for b in boxes_i) for k in range(len(boxes_i[0]))]
    if len(boxes_i) > 1:
      m = np.zeros(np.shape(leaves[i]), bool)
      for b in boxes_i:
        m[tuple(slice(r.start, r.stop) for r in b)] = True
      if not m[tuple(slice(a, b) for a, b in zip(lo, hi))].all():
        raise NotABox(f"the union is not one box of leaf {names[i]!r}")
    starts[i, : len(lo)] = lo
    sizes[i] = tuple(b - a for a, b in zip(lo, hi))
  return Restriction(tuple(sizes), starts)


def check_param_mask(param_mask, params: Params, what: str = "params") -> None:
  """Refuses a ``param_mask`` that is neither None, a :class:`Restriction` of ``params``' leaves
  nor a 0/1 pytree with ``params``' structure, in one line."""
  if param_mask is None:
    return
  if isinstance(param_mask, Restriction):
    param_mask._check(jax.tree.leaves(params))
  elif jax.tree.structure(param_mask) != jax.tree.structure(params):
    raise ValueError(
      f"param_mask must be a Restriction or a pytree with the structure of {what} (0/1 arrays)"
    )
