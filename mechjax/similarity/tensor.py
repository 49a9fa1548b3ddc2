"""Tensor similarity: a weight-space similarity of bilinear networks that respects their symmetries.

Cohen, Wroe, Riggs Smith, Albuquerque, Nissen Gonzalez & Dooms (2026), "When are two networks the
same? Tensor similarity for mechanistic interpretability", arXiv:2605.15183.

Networks are lists in the weight format of :mod:`mechjax.models.bilinear`: linear layers
``{"weight": W}`` and bilinear layers ``{"left": L, "right": R, "out": D}``, ``y = D[(L x) ⊙ (R
x)]``.

**Which tensor.** A network with ``n`` bilinear layers is a polynomial of degree ``2ⁿ``; its weights
contract to a tensor ``T`` with one output index and ``2ⁿ`` input indices, ``f(x) = T(x, …, x)``.
For one layer, ``B_kij = Σ_h D_kh L_hi R_hj``. The tensor used here is *node-wise symmetrised*:
every bilinear node is replaced by the average of itself and its ``L ↔ R`` swap, ``B^s = ½(B +
B^{ᵀij})``, so the two input sub-trees of each node are exchangeable. With one bilinear layer that
is the full symmetrisation, and ``f`` determines ``B^s``. At depth ≥ 2 it is *not* the full
symmetrisation over all ``2ⁿ`` input slots: two networks can compute the same polynomial with
different node-wise tensors (for example a residual block against an unrolled copy of it), and then
their similarity is below 1. What holds at every depth:

* the similarity is invariant to the weight symmetries: hidden-unit permutations, per-unit rescaling
  ``(l, r, d) → (a·l, b·r, d/(ab))``, the ``L ↔ R`` swap of any unit, and any invertible change of
  basis between layers that the next layer undoes (a residual-stream rotation, embedding and head
  included);
* it is 1 only if the two node-wise tensors are proportional, hence only if the two functions are
  equal up to a positive factor (cosine similarity ignores scale; :func:`tensor_inner` does not).

**The Gram recursion** computes ``⟨T_a, T_b⟩`` without the ``(in)^{2ⁿ}`` tensor: with ``G₀ = I``,

* a linear layer: ``G ← W_a G W_bᵀ``;
* a bilinear layer: ``G ← D_a [½((L_a G L_bᵀ) ⊙ (R_a G R_bᵀ) + (L_a G R_bᵀ) ⊙ (R_a G L_bᵀ))] D_bᵀ``
  (``symmetrize=False`` keeps only the first product: the unsymmetrised tensor);
* ``⟨T_a, T_b⟩ = tr G``, and the per-output slice ``⟨T_a[k], T_b[k]⟩ = G_kk``.

A layer costs ``O(h_a h_b (d_a + d_b) + o_a o_b (h_a + h_b))``. Since the degree doubles at each
bilinear layer, ``G`` is carried as ``2^e · Ĝ`` with ``1 ≤ max |Ĝ| < 2`` and the integer exponent
``e`` doubling through each bilinear layer, so deep or wide networks neither overflow nor underflow,
and rescaling by powers of two rounds nothing.

**Gaussian inputs.** For independent copies ``x₁ … x_{2ⁿ} ~ N(0, I)``, ``E⟨T_a(x₁, …), T_b(x₁, …)⟩ =
⟨T_a, T_b⟩`` exactly at every depth (the multilinear identity;
:func:`mechjax.similarity.reference.multilinear_apply`). For the
*same* input ``x ~ N(0, I)`` in every slot, ``measure="gaussian"`` gives ``E_x⟨f_a(x), f_b(x)⟩``
exactly for networks with one bilinear layer (linear layers around it are folded in): by Isserlis,
``E⟨f_a, f_b⟩ = 2⟨B_a^s, B_b^s⟩ + ⟨t_a, t_b⟩`` with ``t_k = tr Q_k = E f_k``, plus the linear and
constant terms when the input is ``[1; x]`` (``constant=True``). At depth ≥ 2 the same-input
expectation is an 8-fold (and higher) Gaussian moment with no cheap closed form; it is refused
rather than approximated (:func:`mechjax.similarity.reference.monte_carlo_inner` estimates
it).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import bilinear as bl
from mechjax.similarity import depth_one

MEASURES = ("frobenius", "gaussian")


def networks(a, b) -> tuple[bl.Network, bl.Network]:
  """``(a, b)`` checked as networks in the weight format (:func:`mechjax.models.bilinear.validate`)
  with the same input and output widths; a ValueError names the widths."""
  a, b = bl.validate(a), bl.validate(b)
  if bl.input_dim(a) != bl.input_dim(b) or bl.output_dim(a) != bl.output_dim(b):
    raise ValueError(
      f"the two networks must share input and output widths; got {bl.input_dim(a)}→"
      f"{bl.output_dim(a)} and {bl.input_dim(b)}→{bl.output_dim(b)}"
    )
  return a, b


def _log2_gram(a, b, symmetrize: bool) -> tuple[jax.Array, jax.Array]:
  """``(e, Ĝ)`` with ``G = 2^e · Ĝ`` (:func:`_log_gram`), after :func:`log_gram`'s checks."""
  a, b = networks(a, b)
  kinds_a, kinds_b = [bl.layer_kind(x) for x in a], [bl.layer_kind(x) for x in b]
  if kinds_a != kinds_b:
    raise ValueError(
      "the recursion pairs layer i of one network with layer i of the other, so the two must have "
      f"the same sequence of layer kinds; got {kinds_a} and {kinds_b}"
    )
  dt = jnp.result_type(
    *[jnp.asarray(v).dtype for layer in a + b for v in layer.values()], jnp.float32
  )
  cast = lambda net: [{k: jnp.asarray(v, dt) for k, v in layer.items()} for layer in net]  # noqa: E731
  return _log_gram(cast(a), cast(b), symmetrize)


def log_gram(a, b, *, symmetrize: bool = True) -> tuple[jax.Array, jax.Array]:
  """``(c, Ĝ)`` with ``G = exp(c) · Ĝ`` the final ``(o_a, o_b)`` Gram matrix of the recursion
  (module doc).

  ``⟨T_a, T_b⟩ = exp(c) tr Ĝ``; ``exp(c) Ĝ_kk`` is the inner product of the output-``k`` slices.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a`` and the same sequence
      of layer kinds (layer ``i`` is paired with layer ``i``).
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor.

  Returns:
    ``(c, Ĝ)``: the scalar log-scale ``c`` and the normalised ``(o_a, o_b)`` Gram matrix ``Ĝ``
    (``1 ≤ max |Ĝ| < 2`` unless ``G = 0``: each layer is rescaled by a power of two).
  """
  e, g = _log2_gram(a, b, symmetrize)
  return e * math.log(2.0), g


@functools.partial(jax.jit, static_argnums=2)
def _log_gram(a, b, symmetrize):
  """``(e, Ĝ)`` with ``G = 2^e · Ĝ``. Each layer's ``G`` is rescaled by a power of two, which is
  exact, so ``e`` is an integer held exactly in the float type and the similarity's
  ``2^(e_ab − ½(e_aa + e_bb))`` loses nothing to rounding (a natural-log scale would carry the
  float32 rounding of a number in the tens into every similarity)."""
  dt = jax.tree.leaves(a)[0].dtype
  g = None  # the identity on the inputs, never formed
  e = jnp.zeros((), dt)
  for la_, lb_ in zip(a, b):
    if "weight" in la_:
      wb = lb_["weight"].T if g is None else g @ lb_["weight"].T
      g = la_["weight"] @ wb
    else:
      la, ra, da = (la_[k] for k in bl.BILINEAR_KEYS)
      lb, rb, db = (lb_[k] for k in bl.BILINEAR_KEYS)
      g = da @ depth_one.bilinear_core(la, ra, lb, rb, g, symmetrize) @ db.T
      e = 2.0 * e
    s = jnp.max(jnp.abs(g))
    _, step = jnp.frexp(s)  # s = m · 2^step with ½ ≤ m < 1, exactly; (0, 0) for s = 0
    step = jnp.where(s > 0, step - 1, 0)
    g = jnp.ldexp(g, -step)
    e = e + step.astype(dt)
  return e, g


def tensor_inner(
  a, b, *, measure: str = "frobenius", symmetrize: bool = True, constant: bool = False
) -> jax.Array:
  """``⟨T_a, T_b⟩``: the inner product of the two networks' (node-wise symmetrised) tensors.

  ``measure="frobenius"``: the Frobenius inner product, via the Gram recursion at any depth.
  ``measure="gaussian"``: ``E_x⟨f_a(x), f_b(x)⟩`` for ``x ~ N(0, I)`` (the input is ``[1; x]`` with
  ``constant=True``); exact, and only for networks with one bilinear layer (module doc).
  May overflow for very deep or large networks; :func:`log_gram` and :func:`tensor_similarity` do
  not.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a``.
    measure: ``"frobenius"`` (the tensors' Frobenius inner product, any depth) or ``"gaussian"``
      (the same-input Gaussian expectation, one bilinear layer only).
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor. Used by ``"frobenius"`` only.
    constant: with ``measure="gaussian"``, the networks read ``[1; x]``: their first input
      coordinate is the constant 1 and only the rest is Gaussian. Ignored for ``"frobenius"``.

  Returns:
    The scalar inner product.
  """
  if measure == "frobenius":
    e, g = _log2_gram(a, b, symmetrize)
    return jnp.exp2(e) * jnp.trace(g)
  if measure == "gaussian":
    return gaussian_inner(a, b, constant=constant)
  raise ValueError(f"measure must be one of {MEASURES}; got {measure!r}")


def _cast_pair(a, b) -> tuple[bl.Network, bl.Network]:
  """Both networks' arrays in one floating dtype (at least float32)."""
  dt = jnp.result_type(*[jnp.asarray(v).dtype for layer in a + b for v in layer.values()])
  dt = jnp.result_type(dt, jnp.float32)
  cast = lambda net: [{k: jnp.asarray(v, dt) for k, v in layer.items()} for layer in net]  # noqa: E731
  return cast(a), cast(b)


def gaussian_inner(a, b, *, constant: bool = False) -> jax.Array:
  """``E_x⟨f_a(x), f_b(x)⟩``, ``x ~ N(0, I)``, for networks with one bilinear layer (Isserlis).

  Writing each output as ``f_k = c_k + b_k·x + xᵀQ_k x`` (``c = b = 0`` unless ``constant``, when
  the network reads ``[1; x]``): ``E f_a f_b = Σ_k [2 tr(Q_ak^s Q_bk^s) + tr Q_ak tr Q_bk +
  b_ak·b_bk + c_ak c_bk + c_ak tr Q_bk + c_bk tr Q_ak]``, in one compiled program per shape.
  ``tr(Q_ak^s Q_bk^s)`` is contracted through the hidden units or through the quadratic forms, with
  linear layers before the bilinear one folded in or kept apart as a Gram matrix, whichever costs
  the fewest operations (:data:`mechjax.similarity.depth_one.DEPTH_ONE_PATHS`); nothing of size
  ``in × in`` is formed unless the forms are the cheapest path.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear`, with exactly one
      bilinear layer (linear layers around it are folded in).
    b: the second network, likewise, with the same input and output widths as ``a``.
    constant: the networks read ``[1; x]``: the first input coordinate is the constant 1 and only
      the remaining ``in − 1`` are Gaussian.

  Returns:
    The scalar expectation.
  """
  a, b = networks(a, b)
  a, b = _cast_pair(depth_one.single_bilinear_layers(a), depth_one.single_bilinear_layers(b))
  return depth_one.depth_one_gaussian_inner(a, b, bool(constant))


def _cosine_from_logs(eab, gab, eaa, gaa, ebb, gbb):
  """``x_ab / sqrt(x_aa x_bb)`` from values ``2^e · g``; the exponents' difference is exact."""
  return gab / jnp.sqrt(jnp.abs(gaa * gbb)) * jnp.exp2(eab - 0.5 * (eaa + ebb))


def tensor_similarity(
  a, b, *, measure: str = "frobenius", symmetrize: bool = True, constant: bool = False
) -> jax.Array:
  """``⟨T_a, T_b⟩ / (‖T_a‖ ‖T_b‖)``, in ``[-1, 1]``; 1 iff the tensors are positively
  proportional.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a``.
    measure: ``"frobenius"`` (the tensors' Frobenius inner product, any depth) or ``"gaussian"``
      (the same-input Gaussian inner product, one bilinear layer only).
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor. Used by ``"frobenius"`` only.
    constant: with ``measure="gaussian"``, the networks read ``[1; x]``: their first input
      coordinate is the constant 1 and only the rest is Gaussian. Ignored for ``"frobenius"``.

  Returns:
    The scalar cosine similarity.
  """
  if measure not in MEASURES:
    raise ValueError(f"measure must be one of {MEASURES}; got {measure!r}")
  a, b = networks(a, b)
  if measure == "gaussian" or (_single_bilinear(a) and _single_bilinear(b)):
    a, b = _cast_pair(depth_one.single_bilinear_layers(a), depth_one.single_bilinear_layers(b))
    # Each network's own terms once, the contraction chosen by cost (DEPTH_ONE_PATHS); no log
    # scale is needed at depth one.
    return depth_one.depth_one_similarity(a, b, measure, bool(symmetrize), bool(constant))
  (cab, gab), (caa, gaa), (cbb, gbb) = (
    _log2_gram(x, y, symmetrize) for x, y in ((a, b), (a, a), (b, b))
  )
  return _cosine_from_logs(cab, jnp.trace(gab), caa, jnp.trace(gaa), cbb, jnp.trace(gbb))


def _single_bilinear(net) -> bool:
  return [bl.layer_kind(x) for x in net].count("bilinear") == 1


def slice_similarity(a, b, *, symmetrize: bool = True) -> jax.Array:
  """Per-output tensor similarity: entry ``k`` compares the output-``k`` slices ``T_a[k]`` and
  ``T_b[k]`` (for a classifier, how alike the two networks compute class ``k``'s logit). Shape
  ``(o,)``.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a`` and the same sequence
      of layer kinds.
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor.

  Returns:
    ``(o,)`` cosine similarities, one per output.
  """
  (cab, gab), (caa, gaa), (cbb, gbb) = (
    _log2_gram(x, y, symmetrize) for x, y in ((a, b), (a, a), (b, b))
  )
  return _cosine_from_logs(cab, jnp.diag(gab), caa, jnp.diag(gaa), cbb, jnp.diag(gbb))


def similarity_matrix(
  networks: Sequence[bl.Network],
  *,
  measure: str = "frobenius",
  symmetrize: bool = True,
  slice_index: int | None = None,
  constant: bool = False,
) -> np.ndarray:
  """Tensor similarity between every pair of ``networks`` (each Gram computed once), ``(K, K)``.

  With ``slice_index`` the entries compare that output slice only. The networks must share one
  structure (layer kinds and shapes), as checkpoints of one run do; the ``K(K+1)/2`` pairs run in
  one compiled program, one after another (``lax.map``: on a CPU a batch of large pairs under
  ``vmap`` ran several times slower). With one bilinear layer each network's terms (and, on that
  path, its quadratic forms) are computed once for all pairs, as :func:`tensor_similarity` computes
  them for one, and the contraction is chosen for all the pairs at once
  (:data:`mechjax.similarity.depth_one.DEPTH_ONE_PATHS`).

  Args:
    networks: ``K ≥ 1`` networks in the weight format of :mod:`mechjax.models.bilinear`, all of one
      structure.
    measure: ``"frobenius"`` or ``"gaussian"`` (one bilinear layer), as in
      :func:`tensor_similarity`.
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor. Used by ``"frobenius"`` only.
    slice_index: an output index ``k``: compare only the slices ``T[k]``; None compares the whole
      tensors. ``"frobenius"`` only.
    constant: as in :func:`tensor_similarity`; ``"gaussian"`` only.

  Returns:
    A symmetric ``(K, K)`` float64 numpy array of cosine similarities (ones on the diagonal).
  """
  if measure not in MEASURES:
    raise ValueError(f"measure must be one of {MEASURES}; got {measure!r}")
  if measure == "gaussian" and slice_index is not None:
    raise ValueError(
      "slice_index is for measure='frobenius'; the Gaussian matrix compares whole networks"
    )
  nets = [bl.validate(n) for n in networks]
  if not nets:
    raise ValueError("similarity_matrix needs at least one network")
  shapes = [[{k: np.shape(v) for k, v in layer.items()} for layer in n] for n in nets]
  odd = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
  if odd is not None:
    raise ValueError(
      f"similarity_matrix needs networks of one structure (checkpoints of one run); network {odd} "
      "has "
      f"layers {shapes[odd]}, network 0 has {shapes[0]}. Compare differing networks pairwise with "
      "tensor_similarity"
    )
  if measure == "gaussian" or _single_bilinear(nets[0]):
    nets = [depth_one.single_bilinear_layers(n) for n in nets]
    dt = jnp.result_type(*[jnp.asarray(v).dtype for n in nets for x in n for v in x.values()])
    stacked = jax.tree.map(
      lambda *xs: jnp.stack([jnp.asarray(x, jnp.result_type(dt, jnp.float32)) for x in xs]), *nets
    )
    index = None if slice_index is None else int(slice_index)
    program = depth_one.depth_one_matrix(measure, bool(symmetrize), bool(constant), index)
    return np.asarray(program(stacked), np.float64)
  stacked = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *nets)
  k = len(nets)
  ii, jj = np.triu_indices(k)

  index = None if slice_index is None else int(slice_index)
  c, v = _matrix_program(bool(symmetrize), index)(stacked, jnp.asarray(ii), jnp.asarray(jj))
  c, v = np.asarray(c, np.float64), np.asarray(v, np.float64)
  logs = np.zeros((k, k))
  vals = np.zeros((k, k))
  logs[ii, jj], vals[ii, jj] = c, v
  logs[jj, ii], vals[jj, ii] = c, v
  d_log, d_val = np.diag(logs), np.diag(vals)
  with np.errstate(divide="ignore", invalid="ignore"):
    return (
      vals
      / np.sqrt(np.abs(np.outer(d_val, d_val)))
      * np.exp2(logs - 0.5 * (d_log[:, None] + d_log[None, :]))
    )


@functools.lru_cache(maxsize=32)
def _matrix_program(symmetrize: bool, slice_index: int | None):
  """The pairs of :func:`similarity_matrix` as one jitted program (``lax.map`` over them), built
  once per (symmetrize, slice) and compiled once per architecture and K: a second call with
  networks of the same shapes compiles nothing."""

  def pair(stacked, i, j):
    pick = lambda t, n: jax.tree.map(lambda x: x[n], t)  # noqa: E731
    c, g = _log2_gram(pick(stacked, i), pick(stacked, j), symmetrize)
    v = jnp.trace(g) if slice_index is None else g[slice_index, slice_index]
    return c, v

  return jax.jit(lambda stacked, ii, jj: jax.lax.map(lambda ij: pair(stacked, *ij), (ii, jj)))
