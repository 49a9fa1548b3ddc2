"""Parameter trees as the sampler sees them: which leaves a chain moves, and the tree split into the
moved part and the fixed rest, and joined again.

A chain moves the float leaves of ``w*`` (integer and boolean leaves, such as step counters, stay
fixed) and, under a ``param_mask``, only the leaves where the mask has a non-zero entry: the
leaves outside that *support* are held at ``w*`` without a gradient or noise.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Params = Any


def is_float_leaf(leaf) -> bool:
  """Whether SGLD samples this leaf of a params tree: a floating-point (or complex) array."""
  return jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)


def split_fixed(params: Params, support: tuple[bool, ...] | None = None) -> tuple[Params, Params]:
  """``(sampled, fixed)``: two trees like ``params``, the first with None in place of each
  non-float leaf (integer or boolean arrays: step counters, indices, masks) and of each leaf that
  ``support`` (one flag per leaf of ``params``, see :func:`mask_support`) marks False, the second
  with None in place of the others. :func:`join_fixed` puts them back together."""
  leaves, treedef = jax.tree.flatten(params)
  if support is None:
    support = (True,) * len(leaves)
  if len(support) != len(leaves):
    raise ValueError(f"support has {len(support)} flags for {len(leaves)} params leaves")
  moves = [is_float_leaf(a) and f for a, f in zip(leaves, support)]
  sampled = jax.tree.unflatten(treedef, [a if m else None for a, m in zip(leaves, moves)])
  fixed = jax.tree.unflatten(treedef, [None if m else a for a, m in zip(leaves, moves)])
  return sampled, fixed


def mask_support(params: Params, param_mask: Params | None) -> tuple[bool, ...] | None:
  """Which leaves of ``params`` a chain can move: one flag per leaf (flattened order), True for a
  float leaf whose mask has a non-zero entry. A leaf whose mask is all zero stays at ``w*``, so
  the sampler holds it fixed outright: no gradient with respect to it (the backward pass skips
  what only it needs, e.g. the layers below a restricted head) and no noise for it. None when
  ``param_mask`` is None or not concrete (a traced mask restricts nothing at trace time)."""
  if param_mask is None:
    return None
  masks = jax.tree.leaves(param_mask)
  if any(isinstance(m, jax.core.Tracer) for m in masks):
    return None
  leaves = jax.tree.leaves(params)
  if len(masks) != len(leaves):
    raise ValueError(f"param_mask has {len(masks)} leaves; params has {len(leaves)}")
  return tuple(bool(is_float_leaf(a) and np.any(np.asarray(m))) for a, m in zip(leaves, masks))


def join_fixed(sampled: Params, fixed: Params) -> Params:
  """The inverse of :func:`split_fixed`."""
  return jax.tree.map(
    lambda s, f: f if s is None else s, sampled, fixed, is_leaf=lambda x: x is None
  )


def sampled_part(full_star: Params, param_mask: Params | None, support):
  """``(w*, fixed, mask, noise_slots)``: the float leaves the chain moves (:func:`split_fixed`;
  non-float leaves, such as integer step counters, and leaves outside ``support`` are held at
  ``w*``), the rest, the 0/1 mask over the moved leaves, and each moved leaf's noise slot: its
  position among all float leaves, so that a restricted chain draws the unrestricted one's noise."""
  params_star, fixed = split_fixed(full_star, support)
  if param_mask is None:
    mask = jax.tree.map(jnp.ones_like, params_star)
  else:
    mask = jax.tree.map(
      lambda m, p, q: None if q is None else m,
      param_mask,
      full_star,
      params_star,
      is_leaf=lambda x: x is None,
    )
  return params_star, fixed, mask, noise_slots(full_star, support)


def noise_slots(full_star: Params, support) -> tuple[np.ndarray, int]:
  """``(slots, number of float leaves)``: each moved leaf's position among all float leaves of
  ``full_star`` (its noise key's index), so that a chain that moves fewer leaves draws the
  unrestricted chain's noise on those it moves."""
  float_leaves = [i for i, a in enumerate(jax.tree.leaves(full_star)) if is_float_leaf(a)]
  slots = [k for k, i in enumerate(float_leaves) if support is None or support[i]]
  return np.array(slots, np.int32), len(float_leaves)
