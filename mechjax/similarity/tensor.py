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


def _log2_gram(a, b, symmetrize: bool) -> tuple[jax.Array, jax.Array]:
  """``(e, Ĝ)`` with ``G = 2^e · Ĝ`` (:func:`_log_gram`), after :func:`log_gram`'s checks."""
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
      g = da @ _bilinear_core(la, ra, lb, rb, g, symmetrize) @ db.T
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


QUADRATIC_MAX_ENTRIES = 2**26  # entries of one network's quadratic forms, at most


def fold_single_bilinear(layers) -> bl.Layer:
  """A network with exactly one bilinear layer as that one layer, the linear layers folded into
  it. Nothing of size ``in × in`` is formed: a linear prefix is multiplied into ``L`` and ``R``
  from the right, one layer at a time, and a bilinear first layer is returned as it is."""
  layers = _single_bilinear_layers(layers)
  core = _prepared(_depth_one(layers), keep_prefix=False)
  return {k: core[k] for k in bl.BILINEAR_KEYS}


def _single_bilinear_layers(layers) -> bl.Network:
  layers = bl.validate(layers)
  kinds = [bl.layer_kind(x) for x in layers]
  if kinds.count("bilinear") != 1:
    raise ValueError(
      f"the exact Gaussian inner product needs exactly one bilinear layer (linear layers around it "
      f"are folded in); got layer kinds {kinds}. At depth >= 2 use measure='frobenius' (the "
      "independent-copies expectation) or monte_carlo_inner"
    )
  return layers


# ----------------------------------------------------------------------------------------------
# Depth one: one bilinear layer, with linear layers before it (the prefix, e.g. an embedding) and
# after it (the suffix, e.g. a head).
#
# With the prefix P (m × in, the product of the linear layers before the bilinear one) and the
# suffix folded into D, the network is f(x) = D[(L P x) ⊙ (R P x)]. Every inner product below is
# contracted one of four ways, whichever costs the fewest multiply-adds for the whole call
# (:func:`_depth_one_plan`):
#
# * "hidden": through the hidden units, P folded into L and R (``L P`` is h × in), as the Gram
#   recursion does: Σ_hg (D_aᵀD_b)_hg [(L_a L_bᵀ) ⊙ (R_a R_bᵀ)]_hg, four h × in × h products;
# * "hidden_gram": the same with P kept apart: L_a P_a P_bᵀ L_bᵀ through G = P_a P_bᵀ (m × m), so
#   the products are h × m × h: the cheaper one when the input is wider than the embedding;
# * "forms": through each network's quadratic forms Q_k = ½ Σ_h D_kh (l_h r_hᵀ + r_h l_hᵀ),
#   (o, in, in), once per network, then ⟨Q_a, Q_b⟩ per pair: when the input is narrow;
# * "forms_gram": the forms in the embedding's space, (o, m, m), and ⟨Q_a, Q_b⟩ =
#   Σ_k tr(Q'_akᵀ G Q'_bk Gᵀ) per pair.

DEPTH_ONE_PATHS = ("hidden", "hidden_gram", "forms", "forms_gram")


def _depth_one(layers) -> dict:
  """``{"left", "right", "out"}`` of a network with one bilinear layer, the suffix multiplied into
  ``out``, and ``"prefix"`` (``m × in``) when linear layers come before the bilinear one."""
  i = [bl.layer_kind(x) for x in layers].index("bilinear")
  left, right, out = (jnp.asarray(layers[i][k]) for k in bl.BILINEAR_KEYS)
  for x in layers[i + 1 :]:
    out = jnp.asarray(x["weight"]) @ out
  core = {"left": left, "right": right, "out": out}
  prefix = None
  for x in layers[:i]:
    w = jnp.asarray(x["weight"])
    prefix = w if prefix is None else w @ prefix
  if prefix is not None:
    core["prefix"] = prefix
  return core


def _depth_one_plan(
  a: bl.Network, b: bl.Network, pairs: int, networks: int, symmetrize: bool
) -> tuple[bool, bool]:
  """``(forms, keep_prefix)``: the contraction of :data:`DEPTH_ONE_PATHS` with the fewest
  multiply-adds for ``pairs`` inner products among ``networks`` networks shaped like ``a`` and
  ``b``. The forms are used only when ``(o, width, width)`` fits in ``QUADRATIC_MAX_ENTRIES``; the
  prefix is kept apart only when both networks have one."""
  costs = _depth_one_costs(a, b, pairs, networks, symmetrize)
  return min(costs, key=costs.get)


def _depth_one_costs(a, b, pairs, networks, symmetrize) -> dict:
  shapes = [_depth_one_shapes(n) for n in (a, b)]
  d = shapes[0][0]
  m, h, o = (max(s[i] for s in shapes) for i in (1, 2, 3))
  prefixed = all(s[4] for s in shapes)
  products = 4 if symmetrize else 2  # h × width × h products per pair on the hidden path
  fold = 2 * h * m * d if any(s[4] for s in shapes) else 0  # L P and R P, per network
  costs = {(False, False): networks * fold + pairs * (products * h * h * d + h * h * o)}
  if o * d * d <= QUADRATIC_MAX_ENTRIES:
    costs[(True, False)] = networks * (fold + o * h * d * d) + pairs * o * d * d
  if prefixed:
    costs[(False, True)] = pairs * (m * m * d + 2 * h * m * m + products * h * h * m + h * h * o)
    if o * m * m <= QUADRATIC_MAX_ENTRIES:
      costs[(True, True)] = networks * o * h * m * m + pairs * (m * m * d + 2 * o * m**3)
  return costs


def _depth_one_shapes(layers) -> tuple[int, int, int, int, bool]:
  """``(in, m, h, o, prefixed)`` of a network with one bilinear layer, from its shapes alone."""
  i = [bl.layer_kind(x) for x in layers].index("bilinear")
  h, m = np.shape(layers[i]["left"])
  return bl.input_dim(layers), m, h, bl.output_dim(layers), i > 0


def _prepared(core: dict, keep_prefix: bool, slice_index: int | None = None) -> dict:
  """``core`` with the prefix folded into ``L`` and ``R`` unless ``keep_prefix``, and ``out``
  restricted to output ``slice_index`` when given."""
  core = dict(core)
  if "prefix" in core and not keep_prefix:
    p = core.pop("prefix")
    core["left"], core["right"] = core["left"] @ p, core["right"] @ p
  if slice_index is not None:
    core["out"] = core["out"][slice_index : slice_index + 1]
  return core


def _cross(za, zb):
  """``G = Z_a Z_bᵀ`` between two input maps, or None (the identity) when neither has one."""
  return None if za is None else za @ zb.T


def _forms_of(core: dict, symmetrize: bool) -> jax.Array:
  """``Q_k = Σ_h D_kh l_h r_hᵀ`` (symmetrised: ``½(Q_k + Q_kᵀ)``), ``(o, width, width)``."""
  q = jnp.einsum("kh,hi,hj->kij", core["out"], core["left"], core["right"])
  return 0.5 * (q + jnp.swapaxes(q, 1, 2)) if symmetrize else q


def _forms_inner(qa, qb, g) -> jax.Array:
  """``Σ_k ⟨P_aᵀ Q_ak P_a, P_bᵀ Q_bk P_b⟩ = Σ_k tr(Q_akᵀ G Q_bk Gᵀ)``, ``G = P_a P_bᵀ`` (without
  ``G``: ``Σ_k ⟨Q_ak, Q_bk⟩``)."""
  if g is None:
    return jnp.sum(qa * qb)
  x = jnp.einsum("kij,il->kjl", qa, g)  # Q_akᵀ G
  y = jnp.einsum("jm,klm->kjl", g, qb)  # G Q_bkᵀ
  return jnp.sum(x * y)


def _hidden_inner(ca: dict, cb: dict, g, symmetrize: bool) -> jax.Array:
  """``Σ_hg (D_aᵀD_b)_hg core_hg``, the core of :func:`_bilinear_core` taken through ``G``."""
  core = _bilinear_core(ca["left"], ca["right"], cb["left"], cb["right"], g, symmetrize)
  return jnp.sum(core * (ca["out"].T @ cb["out"]))


def _frobenius_parts(core: dict, forms: bool, symmetrize: bool) -> dict:
  """What a network contributes to every Frobenius inner product it enters, computed once."""
  parts = {"z": core.get("prefix")}
  if forms:
    parts["q"] = _forms_of(core, symmetrize)
  else:
    parts.update(left=core["left"], right=core["right"], out=core["out"])
  return parts


def _frobenius_pair(pa: dict, pb: dict, symmetrize: bool) -> jax.Array:
  """``⟨T_a, T_b⟩`` of two depth-one networks from their :func:`_frobenius_parts`."""
  g = _cross(pa["z"], pb["z"])
  if "q" in pa:
    return _forms_inner(pa["q"], pb["q"], g)
  return _hidden_inner(pa, pb, g, symmetrize)


def _gaussian_parts(core: dict, forms: bool, constant: bool) -> dict:
  """What a network contributes to every Gaussian inner product it enters (module doc), computed
  once: on the Gaussian coordinates ``x`` (the input without its constant, with ``constant``),
  the bilinear layer reads ``L Z x`` and ``R Z x`` (``Z`` the prefix, or none); each output is
  ``f_k = c_k + b_k·(Z x) + xᵀ Zᵀ Q_k Z x`` with trace ``t_k = tr(Zᵀ Q_k Z)``."""
  left, right, out, z = core["left"], core["right"], core["out"], core.get("prefix")
  o = out.shape[0]
  if constant:
    if z is None:
      l0, r0, left, right = left[:, 0], right[:, 0], left[:, 1:], right[:, 1:]
    else:
      l0, r0, z = left @ z[:, 0], right @ z[:, 0], z[:, 1:]
    parts = {
      "c": out @ (l0 * r0),
      "b": out @ (l0[:, None] * right + r0[:, None] * left),  # (o, width)
    }
  else:
    parts = {"c": jnp.zeros(o, left.dtype), "b": None}
  seen = left if z is None else left @ (z @ z.T)  # L Z Zᵀ: E[(Lz x)(Rz x)ᵀ] = L Z Zᵀ Rᵀ
  parts["t"] = out @ jnp.sum(seen * right, axis=1)
  parts.update(_frobenius_parts({"left": left, "right": right, "out": out}, forms, True))
  parts["z"] = z
  return parts


def _gaussian_pair(pa: dict, pb: dict) -> jax.Array:
  """``E⟨f_a, f_b⟩`` from two networks' :func:`_gaussian_parts` (Isserlis; module doc)."""
  g = _cross(pa["z"], pb["z"])
  quad = 2.0 * _frobenius_pair(pa, pb, True)
  out = quad + pa["t"] @ pb["t"] + pa["c"] @ pb["c"] + pa["c"] @ pb["t"] + pb["c"] @ pa["t"]
  if pa["b"] is not None:
    out = out + jnp.sum((pa["b"] if g is None else pa["b"] @ g) * pb["b"])
  return out


def _depth_one_pair_parts(a, b, measure, symmetrize, constant, pairs):
  """Both networks' parts for ``pairs`` inner products (of :func:`_depth_one_plan`'s path)."""
  forms, keep = _depth_one_plan(a, b, pairs, 2, symmetrize or measure == "gaussian")
  cores = [_prepared(_depth_one(n), keep) for n in (a, b)]
  if measure == "gaussian":
    return [_gaussian_parts(c, forms, constant) for c in cores]
  return [_frobenius_parts(c, forms, symmetrize) for c in cores]


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _depth_one_similarity(a, b, measure, symmetrize, constant):
  pa, pb = _depth_one_pair_parts(a, b, measure, symmetrize, constant, pairs=3)
  pair = _gaussian_pair if measure == "gaussian" else lambda x, y: _frobenius_pair(x, y, symmetrize)
  ab, aa, bb = pair(pa, pb), pair(pa, pa), pair(pb, pb)
  return ab / jnp.sqrt(jnp.abs(aa * bb))


@functools.partial(jax.jit, static_argnums=(2,))
def _gaussian_inner(a, b, constant):
  pa, pb = _depth_one_pair_parts(a, b, "gaussian", True, constant, pairs=1)
  return _gaussian_pair(pa, pb)


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
  ``tr(Q_ak^s Q_bk^s)`` is contracted through the hidden units or through the quadratic forms,
  with linear layers before the bilinear one folded in or kept apart as a Gram matrix, whichever
  costs the fewest operations (:data:`DEPTH_ONE_PATHS`); nothing of size ``in × in`` is formed
  unless the forms are the cheapest path.

  Args:
    a: the first network in the weight format of :mod:`mechjax.models.bilinear`, with exactly one
      bilinear layer (linear layers around it are folded in).
    b: the second network, likewise, with the same input and output widths as ``a``.
    constant: the networks read ``[1; x]``: the first input coordinate is the constant 1 and only
      the remaining ``in − 1`` are Gaussian.

  Returns:
    The scalar expectation.
  """
  a, b = _networks(a, b)
  a, b = _cast_pair(_single_bilinear_layers(a), _single_bilinear_layers(b))
  return _gaussian_inner(a, b, bool(constant))


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
  a, b = _networks(a, b)
  if measure == "gaussian" or (_single_bilinear(a) and _single_bilinear(b)):
    a, b = _cast_pair(_single_bilinear_layers(a), _single_bilinear_layers(b))
    # Each network's own terms once, the contraction chosen by cost (DEPTH_ONE_PATHS); no log
    # scale is needed at depth one.
    return _depth_one_similarity(a, b, measure, bool(symmetrize), bool(constant))
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
  them for one, and the contraction is chosen for all the pairs at once (:data:`DEPTH_ONE_PATHS`).

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
    nets = [_single_bilinear_layers(n) for n in nets]
    dt = jnp.result_type(*[jnp.asarray(v).dtype for n in nets for x in n for v in x.values()])
    stacked = jax.tree.map(
      lambda *xs: jnp.stack([jnp.asarray(x, jnp.result_type(dt, jnp.float32)) for x in xs]), *nets
    )
    index = None if slice_index is None else int(slice_index)
    program = _depth_one_matrix(measure, bool(symmetrize), bool(constant), index)
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
def _depth_one_matrix(measure: str, symmetrize: bool, constant: bool, slice_index: int | None):
  """The normalised ``K × K`` inner products of ``K`` stacked networks with one bilinear layer, as
  one jitted program (compiled once per shape): each network's parts once, then the pairs through
  the cheapest of :data:`DEPTH_ONE_PATHS` for ``K(K+1)/2`` pairs. Through quadratic forms without
  a Gram matrix the pairs are ``(K, in) × (in, K)`` products, one per row of the forms, summed."""
  gaussian = measure == "gaussian"

  def run(stacked):
    one = jax.tree.map(lambda x: x[0], stacked)
    k = jax.tree.leaves(stacked)[0].shape[0]
    forms, keep = _depth_one_plan(one, one, k * (k + 1) // 2, k, symmetrize or gaussian)

    def parts_of(net):
      core = _prepared(_depth_one(net), keep, slice_index)
      if gaussian:
        return _gaussian_parts(core, forms, constant)
      return _frobenius_parts(core, forms, symmetrize)

    parts = jax.vmap(parts_of)(stacked)
    if forms and not keep:  # every pair at once, row by row of the forms, then over the rows
      # (one (K, o·in²) × (o·in², K) product summed 655,360 float32 terms per entry at in 256 and
      # lost 8e-7 relative; rows of in terms lose 1e-7, for about 1.5× the product's time)
      q = parts["q"].reshape(k, -1, parts["q"].shape[-1])
      e = jnp.sum(jnp.einsum("kri,lri->rkl", q, q), axis=0)
      if gaussian:
        t, c = parts["t"], parts["c"]
        e = 2.0 * e + t @ t.T + c @ c.T + c @ t.T + t @ c.T
        if parts["b"] is not None:
          b = parts["b"].reshape(k, -1)
          e = e + b @ b.T
    else:
      ii, jj = np.triu_indices(k)
      pick = lambda i: jax.tree.map(lambda x: x[i], parts)  # noqa: E731
      pair = _gaussian_pair if gaussian else lambda x, y: _frobenius_pair(x, y, symmetrize)
      upper = jax.lax.map(
        lambda ij: pair(pick(ij[0]), pick(ij[1])), (jnp.asarray(ii), jnp.asarray(jj))
      )
      e = jnp.zeros((k, k), upper.dtype).at[ii, jj].set(upper).at[jj, ii].set(upper)
    diag = jnp.diag(e)
    return e / jnp.sqrt(jnp.abs(jnp.outer(diag, diag)))

  return jax.jit(run)


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
