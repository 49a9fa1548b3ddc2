"""Tensor similarity of networks with one bilinear layer, in closed form: the inner products and
the Gaussian expectation, contracted whichever of four ways costs least
(:mod:`mechjax.similarity.tensor` calls them; its Gram recursion covers every depth).

Depth one: one bilinear layer, with linear layers before it (the prefix, e.g. an embedding) and
after it (the suffix, e.g. a head).

With the prefix P (m × in, the product of the linear layers before the bilinear one) and the
suffix folded into D, the network is f(x) = D[(L P x) ⊙ (R P x)]. Every inner product below is
contracted one of four ways, whichever costs the fewest multiply-adds for the whole call
(:func:`_depth_one_plan`):

* "hidden": through the hidden units, P folded into L and R (``L P`` is h × in), as the Gram
  recursion does: Σ_hg (D_aᵀD_b)_hg [(L_a L_bᵀ) ⊙ (R_a R_bᵀ)]_hg, four h × in × h products;
* "hidden_gram": the same with P kept apart: L_a P_a P_bᵀ L_bᵀ through G = P_a P_bᵀ (m × m), so
  the products are h × m × h: the cheaper one when the input is wider than the embedding;
* "forms": through each network's quadratic forms Q_k = ½ Σ_h D_kh (l_h r_hᵀ + r_h l_hᵀ),
  (o, in, in), once per network, then ⟨Q_a, Q_b⟩ per pair: when the input is narrow;
* "forms_gram": the forms in the embedding's space, (o, m, m), and ⟨Q_a, Q_b⟩ =
  Σ_k tr(Q'_akᵀ G Q'_bk Gᵀ) per pair.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models import bilinear as bl


def bilinear_core(la, ra, lb, rb, g, symmetrize):
  """``(L_a G L_bᵀ) ⊙ (R_a G R_bᵀ)`` (node-wise symmetrised or not); ``g=None`` is the identity,
  which is not multiplied."""
  gb = (lambda m: m.T) if g is None else (lambda m: g @ m.T)
  ll = la @ gb(lb)
  rr = ra @ gb(rb)
  if not symmetrize:
    return ll * rr
  return 0.5 * (ll * rr + (la @ gb(rb)) * (ra @ gb(lb)))


QUADRATIC_MAX_ENTRIES = 2**26  # entries of one network's quadratic forms, at most


def fold_single_bilinear(layers) -> bl.Layer:
  """A network with exactly one bilinear layer as that one layer, the linear layers folded into
  it. Nothing of size ``in × in`` is formed: a linear prefix is multiplied into ``L`` and ``R``
  from the right, one layer at a time, and a bilinear first layer is returned as it is."""
  layers = single_bilinear_layers(layers)
  core = _prepared(_depth_one(layers), keep_prefix=False)
  return {k: core[k] for k in bl.BILINEAR_KEYS}


def single_bilinear_layers(layers) -> bl.Network:
  layers = bl.validate(layers)
  kinds = [bl.layer_kind(x) for x in layers]
  if kinds.count("bilinear") != 1:
    raise ValueError(
      f"the exact Gaussian inner product needs exactly one bilinear layer (linear layers around it "
      f"are folded in); got layer kinds {kinds}. At depth >= 2 use measure='frobenius' (the "
      "independent-copies expectation) or monte_carlo_inner"
    )
  return layers


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
  """``Σ_hg (D_aᵀD_b)_hg core_hg``, the core of :func:`bilinear_core` taken through ``G``."""
  core = bilinear_core(ca["left"], ca["right"], cb["left"], cb["right"], g, symmetrize)
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
def depth_one_similarity(a, b, measure, symmetrize, constant):
  pa, pb = _depth_one_pair_parts(a, b, measure, symmetrize, constant, pairs=3)
  pair = _gaussian_pair if measure == "gaussian" else lambda x, y: _frobenius_pair(x, y, symmetrize)
  ab, aa, bb = pair(pa, pb), pair(pa, pa), pair(pb, pb)
  return ab / jnp.sqrt(jnp.abs(aa * bb))


@functools.partial(jax.jit, static_argnums=(2,))
def depth_one_gaussian_inner(a, b, constant):
  pa, pb = _depth_one_pair_parts(a, b, "gaussian", True, constant, pairs=1)
  return _gaussian_pair(pa, pb)


@functools.lru_cache(maxsize=32)
def depth_one_matrix(measure: str, symmetrize: bool, constant: bool, slice_index: int | None):
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
