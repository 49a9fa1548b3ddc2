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
bilinear layer, ``G`` is carried as ``exp(c) · Ĝ`` with ``max |Ĝ| = 1`` and the log-scale ``c``
doubling through each bilinear layer, so deep or wide networks neither overflow nor underflow.

**Gaussian inputs.** For independent copies ``x₁ … x_{2ⁿ} ~ N(0, I)``, ``E⟨T_a(x₁, …), T_b(x₁, …)⟩ =
⟨T_a, T_b⟩`` exactly at every depth (the multilinear identity; :func:`multilinear_apply`). For the
*same* input ``x ~ N(0, I)`` in every slot, ``measure="gaussian"`` gives ``E_x⟨f_a(x), f_b(x)⟩``
exactly for networks with one bilinear layer (linear layers around it are folded in): by Isserlis,
``E⟨f_a, f_b⟩ = 2⟨B_a^s, B_b^s⟩ + ⟨t_a, t_b⟩`` with ``t_k = tr Q_k = E f_k``, plus the linear and
constant terms when the input is ``[1; x]`` (``constant=True``). At depth ≥ 2 the same-input
expectation is an 8-fold (and higher) Gaussian moment with no cheap closed form; it is refused
rather than approximated (:func:`monte_carlo_inner` estimates it).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import bilinear as bl

MEASURES = ("frobenius", "gaussian")


def _networks(a, b) -> tuple[bl.Network, bl.Network]:
  a, b = bl.validate(a), bl.validate(b)
  if bl.input_dim(a) != bl.input_dim(b) or bl.output_dim(a) != bl.output_dim(b):
    raise ValueError(
      f"the two networks must share input and output widths; got {bl.input_dim(a)}→"
      f"{bl.output_dim(a)} and {bl.input_dim(b)}→{bl.output_dim(b)}"
    )
  return a, b


def _bilinear_core(la, ra, lb, rb, g, symmetrize):
  """``(L_a G L_bᵀ) ⊙ (R_a G R_bᵀ)`` (node-wise symmetrised or not); ``g=None`` is the identity,
  which is not multiplied."""
  gb = (lambda m: m.T) if g is None else (lambda m: g @ m.T)
  ll = la @ gb(lb)
  rr = ra @ gb(rb)
  if not symmetrize:
    return ll * rr
  return 0.5 * (ll * rr + (la @ gb(rb)) * (ra @ gb(lb)))


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
    (``max |Ĝ| = 1`` unless ``G = 0``).
  """
  a, b = _networks(a, b)
  kinds_a, kinds_b = [bl.layer_kind(x) for x in a], [bl.layer_kind(x) for x in b]
  if kinds_a != kinds_b:
    raise ValueError(
      "the recursion pairs layer i of one network with layer i of the other, so the two must have "
      f"the same sequence of layer kinds; got {kinds_a} and {kinds_b}"
    )
  dt = jnp.result_type(
    *[jnp.asarray(v).dtype for layer in a + b for v in layer.values()], jnp.float32
  )
  cast = lambda net: [{k: jnp.asarray(v, dt) for k, v in layer.items()} for layer in net]
  return _log_gram(cast(a), cast(b), symmetrize)


@functools.partial(jax.jit, static_argnums=2)
def _log_gram(a, b, symmetrize):
  dt = jax.tree.leaves(a)[0].dtype
  g = None  # the identity on the inputs, never formed
  c = jnp.zeros((), dt)
  for la_, lb_ in zip(a, b):
    if "weight" in la_:
      wb = lb_["weight"].T if g is None else g @ lb_["weight"].T
      g = la_["weight"] @ wb
    else:
      la, ra, da = (la_[k] for k in bl.BILINEAR_KEYS)
      lb, rb, db = (lb_[k] for k in bl.BILINEAR_KEYS)
      g = da @ _bilinear_core(la, ra, lb, rb, g, symmetrize) @ db.T
      c = 2.0 * c
    s = jnp.max(jnp.abs(g))
    s = jnp.where(s > 0, s, 1.0)
    g = g / s
    c = c + jnp.log(s)
  return c, g


def _from_log(c, x):
  return jnp.exp(c) * x


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
    c, g = log_gram(a, b, symmetrize=symmetrize)
    return _from_log(c, jnp.trace(g))
  if measure == "gaussian":
    return gaussian_inner(a, b, constant=constant)
  raise ValueError(f"measure must be one of {MEASURES}; got {measure!r}")


def fold_single_bilinear(layers) -> bl.Layer:
  """A network with exactly one bilinear layer as that one layer, the linear layers folded into
  it. Nothing of size ``in × in`` is formed: a linear prefix is multiplied into ``L`` and ``R``
  from the right, one layer at a time, and a bilinear first layer is returned as it is."""
  layers = bl.validate(layers)
  kinds = [bl.layer_kind(x) for x in layers]
  if kinds.count("bilinear") != 1:
    raise ValueError(
      f"the exact Gaussian inner product needs exactly one bilinear layer (linear layers around it "
      f"are folded in); got layer kinds {kinds}. At depth >= 2 use measure='frobenius' (the "
      "independent-copies expectation) or monte_carlo_inner"
    )
  i = kinds.index("bilinear")
  lay = layers[i]
  left, right, out = (jnp.asarray(lay[k]) for k in bl.BILINEAR_KEYS)
  for x in reversed(layers[:i]):  # (L W_i ⋯ W_1): the prefix applied to x, innermost last
    w = jnp.asarray(x["weight"])
    left, right = left @ w, right @ w
  for x in layers[i + 1 :]:
    out = jnp.asarray(x["weight"]) @ out
  return {"left": left, "right": right, "out": out}


def _sym_frobenius_single(la, ra, da, lb, rb, db):
  """``⟨B_a^s, B_b^s⟩`` of two single bilinear layers: ``Σ_hg (DᵀD)_hg · ½[(L_a L_bᵀ)⊙(R_a R_bᵀ)
  + (L_a R_bᵀ)⊙(R_a L_bᵀ)]_hg``, four ``h_a × in × h_b`` products and one ``h_a × o × h_b``."""
  core = 0.5 * ((la @ lb.T) * (ra @ rb.T) + (la @ rb.T) * (ra @ lb.T))
  return jnp.sum(core * (da.T @ db))


def _gaussian_parts(f: bl.Layer, constant: bool):
  """Per-network terms of :func:`gaussian_inner`, computed once per network: the Gaussian
  coordinates' ``L`` and ``R``, ``D``, and the constant, linear and trace terms of each output."""
  left, right, d = f["left"], f["right"], f["out"]
  if constant:
    l0, r0, lx, rx = left[:, 0], right[:, 0], left[:, 1:], right[:, 1:]
    const = d @ (l0 * r0)
    lin = d @ (l0[:, None] * rx + r0[:, None] * lx)
  else:
    lx, rx = left, right
    const = jnp.zeros(d.shape[0], left.dtype)
    lin = jnp.zeros((d.shape[0], 1), left.dtype)
  trace = d @ jnp.sum(lx * rx, axis=1)
  return lx, rx, d, const, lin, trace


QUADRATIC_MAX_ENTRIES = 2**26  # the (o, in, in) quadratic forms of the per-network path, at most


def _use_quadratic_forms(h: int, d: int, o: int, pairs: int, networks: int) -> bool:
  """Whether to contract through each network's quadratic forms ``Q_k^s`` (``o·h·d²`` per network,
  then ``o·d²`` per pair) instead of the hidden-unit Grams (``4h²d + h²o`` per pair): the first
  wins when the input is narrow against the hidden layer, and is used only when the ``(o, d, d)``
  forms fit in ``QUADRATIC_MAX_ENTRIES``."""
  per_network = networks * o * h * d * d + pairs * o * d * d
  per_pair = pairs * (4 * h * h * d + h * h * o)
  return o * d * d <= QUADRATIC_MAX_ENTRIES and per_network < per_pair


def _quadratic_forms(lx, rx, d):
  """``Q_k^s = ½ Σ_h D_kh (l_h r_hᵀ + r_h l_hᵀ)``, ``(o, in, in)``."""
  q = jnp.einsum("kh,hi,hj->kij", d, lx, rx)
  return 0.5 * (q + jnp.swapaxes(q, 1, 2))


def _gaussian_from_parts(pa, pb, qa=None, qb=None):
  (lxa, rxa, da, ca, ba, ta), (lxb, rxb, db, cb, bb, tb) = pa, pb
  if qa is None:
    quad = 2.0 * _sym_frobenius_single(lxa, rxa, da, lxb, rxb, db)
  else:
    quad = 2.0 * jnp.sum(qa * qb)
  return quad + ta @ tb + jnp.sum(ba * bb) + ca @ cb + ca @ tb + cb @ ta


def _forms(parts, use: bool):
  return _quadratic_forms(*parts[:3]) if use else None


@functools.partial(jax.jit, static_argnums=2)
def _gaussian_inner(fa, fb, constant):
  pa, pb = _gaussian_parts(fa, constant), _gaussian_parts(fb, constant)
  (h, d), o = pa[0].shape, pa[2].shape[0]
  use = _use_quadratic_forms(max(h, pb[0].shape[0]), d, o, pairs=1, networks=2)
  return _gaussian_from_parts(pa, pb, _forms(pa, use), _forms(pb, use))


@functools.partial(jax.jit, static_argnums=2)
def _gaussian_similarity(fa, fb, constant):
  pa, pb = _gaussian_parts(fa, constant), _gaussian_parts(fb, constant)
  (h, d), o = pa[0].shape, pa[2].shape[0]
  use = _use_quadratic_forms(max(h, pb[0].shape[0]), d, o, pairs=3, networks=2)
  qa, qb = _forms(pa, use), _forms(pb, use)
  ab = _gaussian_from_parts(pa, pb, qa, qb)
  return ab / jnp.sqrt(_gaussian_from_parts(pa, pa, qa, qa) * _gaussian_from_parts(pb, pb, qb, qb))


def _folded_pair(a, b):
  a, b = _networks(a, b)
  fa, fb = fold_single_bilinear(a), fold_single_bilinear(b)
  dt = jnp.result_type(*[v.dtype for v in (*fa.values(), *fb.values())], jnp.float32)
  cast = lambda f: {k: v.astype(dt) for k, v in f.items()}  # noqa: E731
  return cast(fa), cast(fb)


def gaussian_inner(a, b, *, constant: bool = False) -> jax.Array:
  """``E_x⟨f_a(x), f_b(x)⟩``, ``x ~ N(0, I)``, for networks with one bilinear layer (Isserlis).

  Writing each output as ``f_k = c_k + b_k·x + xᵀQ_k x`` (``c = b = 0`` unless ``constant``, when
  the network reads ``[1; x]``): ``E f_a f_b = Σ_k [2 tr(Q_ak^s Q_bk^s) + tr Q_ak tr Q_bk +
  b_ak·b_bk + c_ak c_bk + c_ak tr Q_bk + c_bk tr Q_ak]``, in one compiled program per shape.
  ``tr(Q_ak^s Q_bk^s)`` is contracted through the hidden units (four ``h_a × in × h_b`` matrix
  products and one ``h_a × o × h_b``, nothing of size ``in²`` formed) or, when the input is narrow
  against the hidden layer and the forms fit, through the ``(o, in, in)`` forms themselves,
  whichever costs fewer operations (:func:`_use_quadratic_forms`).

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear`, with exactly one
      bilinear layer (linear layers around it are folded in).
    b: the second network, likewise, with the same input and output widths as ``a``.
    constant: the networks read ``[1; x]``: the first input coordinate is the constant 1 and only
      the remaining ``in − 1`` are Gaussian.

  Returns:
    The scalar expectation.
  """
  fa, fb = _folded_pair(a, b)
  return _gaussian_inner(fa, fb, bool(constant))


def _cosine_from_logs(cab, gab, caa, gaa, cbb, gbb):
  """``x_ab / sqrt(x_aa x_bb)`` from log-scaled values, without leaving log space."""
  return gab / jnp.sqrt(jnp.abs(gaa * gbb)) * jnp.exp(cab - 0.5 * (caa + cbb))


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
  if measure == "gaussian":
    fa, fb = _folded_pair(a, b)
    return _gaussian_similarity(fa, fb, bool(constant))  # each network's own terms once
  if measure != "frobenius":
    raise ValueError(f"measure must be one of {MEASURES}; got {measure!r}")
  a, b = _networks(a, b)
  if _single_bilinear(a) and _single_bilinear(b):
    fa, fb = _folded_pair(a, b)
    return _frobenius_single_similarity(fa, fb, bool(symmetrize))
  (cab, gab), (caa, gaa), (cbb, gbb) = (
    log_gram(x, y, symmetrize=symmetrize) for x, y in ((a, b), (a, a), (b, b))
  )
  return _cosine_from_logs(cab, jnp.trace(gab), caa, jnp.trace(gaa), cbb, jnp.trace(gbb))


def _single_bilinear(net) -> bool:
  return [bl.layer_kind(x) for x in net].count("bilinear") == 1


def _frobenius_single(la, ra, da, lb, rb, db):
  """``⟨B_a, B_b⟩`` of two unsymmetrised single bilinear layers: ``Σ_hg (DᵀD)_hg (L_a L_bᵀ)_hg
  (R_a R_bᵀ)_hg``."""
  return jnp.sum((la @ lb.T) * (ra @ rb.T) * (da.T @ db))


@functools.partial(jax.jit, static_argnums=2)
def _frobenius_single_similarity(fa, fb, symmetrize):
  """The Frobenius similarity of two networks with one bilinear layer each (linear layers folded
  in): through each network's ``(o, in, in)`` coefficient forms ``Q_k = Σ_h D_kh l_h r_hᵀ``
  (symmetrised or not; ``⟨T_a, T_b⟩ = Σ_k ⟨Q_ak, Q_bk⟩``) when that costs fewer operations than the
  hidden-unit contraction (:func:`_use_quadratic_forms`), else through the hidden units. Nothing of
  size ``in × in`` is multiplied as an identity, and no log scale is needed at depth 1."""
  (h, d), o = fa["left"].shape, fa["out"].shape[0]
  h = max(h, fb["left"].shape[0])
  if _use_quadratic_forms(h, d, o, pairs=3, networks=2):

    def forms(f):
      q = jnp.einsum("kh,hi,hj->kij", f["out"], f["left"], f["right"])
      return 0.5 * (q + jnp.swapaxes(q, 1, 2)) if symmetrize else q

    qa, qb = forms(fa), forms(fb)
    inner = lambda x, y: jnp.sum(x * y)  # noqa: E731
  else:
    qa = (fa["left"], fa["right"], fa["out"])
    qb = (fb["left"], fb["right"], fb["out"])
    pair = _sym_frobenius_single if symmetrize else _frobenius_single
    inner = lambda x, y: pair(*x, *y)  # noqa: E731
  return inner(qa, qb) / jnp.sqrt(jnp.abs(inner(qa, qa) * inner(qb, qb)))


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
    log_gram(x, y, symmetrize=symmetrize) for x, y in ((a, b), (a, a), (b, b))
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
  structure (layer kinds and shapes), as checkpoints of one run do; the pairs are one vmapped
  program. With ``measure="gaussian"`` each network's terms (and, on that path, its quadratic
  forms) are computed once for all ``K²`` pairs, as :func:`tensor_similarity` computes them for one.

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
  if measure == "gaussian":
    folded = [fold_single_bilinear(n) for n in nets]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *folded)
    return np.asarray(_gaussian_matrix(stacked, bool(constant)), np.float64)
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
      * np.exp(logs - 0.5 * (d_log[:, None] + d_log[None, :]))
    )


@functools.partial(jax.jit, static_argnums=1)
def _gaussian_matrix(stacked, constant):
  """``E⟨f_a, f_b⟩`` normalised, for every pair of the ``K`` folded networks in ``stacked``: each
  network's parts once, then either the ``K × K`` products of the flattened quadratic forms or the
  hidden-unit contraction of each of the ``K(K+1)/2`` pairs, whichever costs fewer operations."""
  parts = jax.vmap(lambda f: _gaussian_parts(f, constant))(stacked)
  lx, rx, d, c, b, t = parts
  k, h, n = lx.shape
  o = d.shape[1]
  pairs = k * (k + 1) // 2
  if _use_quadratic_forms(h, n, o, pairs=pairs, networks=k):
    q = jax.vmap(_quadratic_forms)(lx, rx, d).reshape(k, -1)
    quad = 2.0 * (q @ q.T)
  else:
    ii, jj = np.triu_indices(k)
    upper = jax.vmap(lambda i, j: _sym_frobenius_single(lx[i], rx[i], d[i], lx[j], rx[j], d[j]))(
      jnp.asarray(ii), jnp.asarray(jj)
    )
    quad = jnp.zeros((k, k), lx.dtype).at[ii, jj].set(2.0 * upper).at[jj, ii].set(2.0 * upper)
  bf = b.reshape(k, -1)
  e = quad + t @ t.T + bf @ bf.T + c @ c.T + c @ t.T + t @ c.T
  diag = jnp.diag(e)
  return e / jnp.sqrt(jnp.abs(jnp.outer(diag, diag)))


@functools.lru_cache(maxsize=32)
def _matrix_program(symmetrize: bool, slice_index: int | None):
  """The pairs of :func:`similarity_matrix` as one jitted, vmapped program, built once per
  (symmetrize, slice) and compiled once per architecture and K: a second call with networks of
  the same shapes compiles nothing."""

  def pair(stacked, i, j):
    pick = lambda t, n: jax.tree.map(lambda x: x[n], t)  # noqa: E731
    c, g = log_gram(pick(stacked, i), pick(stacked, j), symmetrize=symmetrize)
    v = jnp.trace(g) if slice_index is None else g[slice_index, slice_index]
    return c, v

  return jax.jit(jax.vmap(pair, in_axes=(None, 0, 0)))


# ----------------------------------------------------------------------------------------------
# Independent input copies and Monte Carlo.


def multilinear_apply(layers, xs, *, symmetrize: bool = True) -> jax.Array:
  """``T(x₁, …, x_m)``: the network's node-wise tensor on ``m = 2ⁿ`` separate inputs ``xs`` of shape
  ``(m, ..., in)`` (``n`` bilinear layers). With all copies equal this is ``f(x)``.

  Args:
    layers: the network in the weight format of :mod:`mechjax.models.bilinear`.
    xs: ``(m, ..., in)`` input copies, ``m = 2ⁿ``; each bilinear layer pairs consecutive groups
      (copies ``0, 1``, then ``2, 3``, …).
    symmetrize: average each bilinear node over the swap of its two inputs (the node-wise
      symmetrised tensor); False evaluates the raw tensor.

  Returns:
    ``(..., out)``: the multilinear form's value for each batch entry.
  """
  layers = bl.validate(layers)
  m = 2 ** bl.num_bilinear(layers)
  if xs.shape[0] != m:
    raise ValueError(
      f"a network with {bl.num_bilinear(layers)} bilinear layers takes {m} input copies; got "
      f"{xs.shape[0]} (xs has shape {xs.shape})"
    )
  hs = [x for x in xs]  # one activation per group of copies
  for layer in layers:
    if "weight" in layer:
      hs = [h @ jnp.asarray(layer["weight"]).T for h in hs]
      continue
    left, right, out = (jnp.asarray(layer[k]) for k in bl.BILINEAR_KEYS)
    new = []
    for u, v in zip(hs[0::2], hs[1::2]):
      prod = (u @ left.T) * (v @ right.T)
      if symmetrize:
        prod = 0.5 * (prod + (v @ left.T) * (u @ right.T))
      new.append(prod @ out.T)
    hs = new
  return hs[0]


def monte_carlo_inner(
  a,
  b,
  key: jax.Array,
  num_samples: int,
  *,
  independent_copies: bool = False,
  constant: bool = False,
  batch: int = 4096,
) -> tuple[float, float]:
  """Monte-Carlo ``E⟨f_a(x), f_b(x)⟩`` over ``x ~ N(0, I)`` (or, with ``independent_copies``, of the
  multilinear forms on independent copies, whose mean is exactly ``⟨T_a, T_b⟩``). Returns (mean,
  s.e.).

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a``.
    key: PRNG key for the Gaussian inputs.
    num_samples: number of samples averaged (at least 2 for a standard error).
    independent_copies: draw ``2ⁿ`` independent inputs per sample and evaluate the node-wise
      symmetrised multilinear forms; both networks must have ``n`` bilinear layers.
    constant: the networks read ``[1; x]``: a constant 1 is prepended to each Gaussian sample.
    batch: samples drawn per jitted chunk (memory against the number of dispatches).

  Returns:
    ``(mean, standard_error)`` as Python floats.
  """
  a, b = _networks(a, b)
  d = bl.input_dim(a) - (1 if constant else 0)
  m = 2 ** max(bl.num_bilinear(a), bl.num_bilinear(b)) if independent_copies else 1
  if independent_copies and bl.num_bilinear(a) != bl.num_bilinear(b):
    raise ValueError("independent copies need the same number of bilinear layers in both networks")

  @jax.jit
  def chunk(k):
    x = jax.random.normal(k, (m, batch, d), jnp.result_type(float))
    if constant:
      x = jnp.concatenate([jnp.ones((m, batch, 1), x.dtype), x], axis=-1)
    if independent_copies:
      fa, fb = multilinear_apply(a, x), multilinear_apply(b, x)
    else:
      fa, fb = bl.apply_layers(a, x[0]), bl.apply_layers(b, x[0])
    return jnp.sum(fa * fb, axis=-1)

  chunks = math.ceil(num_samples / batch)
  vals = np.concatenate([np.asarray(chunk(k)) for k in jax.random.split(key, chunks)])[:num_samples]
  return float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(len(vals)))


# ----------------------------------------------------------------------------------------------
# Brute force (small sizes only), for checks and the benchmark.


def materialize(layers, *, symmetrize: bool = True) -> jax.Array:
  """The node-wise tensor itself, shape ``(out, in, …, in)`` with ``2ⁿ`` input axes. Exponential in
  depth."""
  return _materialize(bl.validate(layers), symmetrize)


@functools.partial(jax.jit, static_argnums=1)
def _materialize(layers, symmetrize):
  t = jnp.eye(
    bl.input_dim(layers), dtype=jax.tree.leaves(layers)[0].dtype
  )  # (width, in^m), flattened
  m = 1
  for layer in layers:
    if "weight" in layer:
      t = jnp.asarray(layer["weight"]) @ t
      continue
    left, right, out = (jnp.asarray(layer[k]) for k in bl.BILINEAR_KEYS)
    lt, rt = left @ t, right @ t  # (h, N) with N = in^m
    prod = jnp.einsum("hI,hJ->hIJ", lt, rt)
    if symmetrize:
      prod = 0.5 * (prod + jnp.swapaxes(prod, 1, 2))
    t = out @ prod.reshape(prod.shape[0], -1)
    m *= 2
  return t.reshape((t.shape[0],) + (bl.input_dim(layers),) * m)


def brute_force_inner(a, b, *, symmetrize: bool = True) -> jax.Array:
  """``⟨T_a, T_b⟩`` from the materialised tensors.

  For checks on small networks only: the tensors have ``in^(2ⁿ)`` entries per output.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear` (a list of layer
      dicts, or one layer dict).
    b: the second network, with the same input and output widths as ``a``.
    symmetrize: use the node-wise symmetrised tensor (average each bilinear node with its
      ``L ↔ R`` swap); False uses the raw, unsymmetrised tensor.

  Returns:
    The scalar inner product.
  """
  a, b = _networks(a, b)
  return _brute_force_inner(a, b, symmetrize)


@functools.partial(jax.jit, static_argnums=2)
def _brute_force_inner(a, b, symmetrize):
  return jnp.vdot(_materialize(a, symmetrize), _materialize(b, symmetrize))


# ----------------------------------------------------------------------------------------------
# Baselines.


def weight_cosine(a, b) -> jax.Array:
  """Cosine between the two networks' flattened weights (layer by layer, in order). Depends on the
  basis: a hidden-unit permutation alone changes it."""
  a, b = bl.validate(a), bl.validate(b)
  fa = [jnp.ravel(jnp.asarray(v)) for layer in a for _, v in sorted(layer.items())]
  fb = [jnp.ravel(jnp.asarray(v)) for layer in b for _, v in sorted(layer.items())]
  if [x.shape for x in fa] != [x.shape for x in fb]:
    raise ValueError(
      "weight cosine needs networks of identical shapes; got "
      f"{[x.shape for x in fa]} and {[x.shape for x in fb]}"
    )
  va, vb = jnp.concatenate(fa), jnp.concatenate(fb)
  return va @ vb / (jnp.linalg.norm(va) * jnp.linalg.norm(vb))


def output_cosine(ya: jax.Array, yb: jax.Array, *, center: bool = False) -> jax.Array:
  """Behavioural similarity: cosine between two networks' outputs ``(N, o)`` on the same inputs,
  flattened.

  ``center=True`` subtracts each input's mean logit first (softmax ignores that shift).

  Args:
    ya: the first network's outputs, shape ``(N, o)``.
    yb: the second network's outputs on the same inputs, same shape.
    center: subtract each row's mean over the last axis from both before comparing.

  Returns:
    The scalar cosine of the flattened outputs.
  """
  if ya.shape != yb.shape:
    raise ValueError(f"outputs must have the same shape (N, o); got {ya.shape} and {yb.shape}")
  if center:
    ya = ya - ya.mean(-1, keepdims=True)
    yb = yb - yb.mean(-1, keepdims=True)
  ya, yb = ya.reshape(-1), yb.reshape(-1)
  return ya @ yb / (jnp.linalg.norm(ya) * jnp.linalg.norm(yb))


def cosine_matrix(vectors_KxN: jax.Array) -> np.ndarray:
  """Pairwise cosines of the rows (``(K, N)``, any ``N``), ``(K, K)``: weight or output cosine of
  many checkpoints at once."""
  v = jnp.asarray(vectors_KxN).reshape(vectors_KxN.shape[0], -1)
  v = v / jnp.linalg.norm(v, axis=1, keepdims=True)
  return np.asarray(v @ v.T)


def cka_matrix(acts_KxNxD: jax.Array) -> np.ndarray:
  """Linear CKA (:func:`mechjax.similarity.representational.linear_cka`) between every pair of ``K``
  activation sets on the same ``N`` inputs, ``(K, K)``.

  All pairs come from one ``(K·D) × (K·D)`` cross-covariance of the centred activations, so the cost
  is one matrix product, not ``K²`` of them.
  """
  acts = jnp.asarray(acts_KxNxD)
  if acts.ndim != 3:
    raise ValueError(f"activations must be (K, N, D); got shape {acts.shape}")
  return np.asarray(_cka_matrix(acts))


@jax.jit
def _cka_matrix(acts):
  k, n, d = acts.shape
  x = acts - acts.mean(axis=1, keepdims=True)
  x = jnp.transpose(x, (1, 0, 2)).reshape(n, k * d)
  c = (x.T @ x).reshape(k, d, k, d)
  hsic = jnp.sum(c**2, axis=(1, 3))  # ‖X̄_iᵀX̄_j‖²_F
  norms = jnp.sqrt(jnp.diag(hsic))
  return hsic / jnp.outer(norms, norms)
