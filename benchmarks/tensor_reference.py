"""The reference implementation of tensor similarity (Cohen et al. 2026, the repository
tdooms/tensor-similarity), called on its own ``DeepMLP`` networks and on mechjax's bare bilinear
layers, for ``python -m benchmarks.tensor_similarity --reference=PATH``.

The reference is imported from a checkout (``PATH`` is the folder that holds its ``src/``), not
installed: its packaging asks for Python ≥ 3.13, but its modules import on 3.11. It needs torch,
quimb and cotengra (``benchmarks/requirements.txt``). Run from any folder but the checkout: its
``.python-version`` makes a pyenv shim pick another interpreter there.

**The reference's own networks** (:func:`deep_mlp`): ``DeepMLP(in, d_model, hidden, out,
n_layers)`` with ``bias=False`` and ``scale=1`` (its defaults; no residual), built from the weights
``{"embed": E, "body": [(L, R, D), …], "head": U}``: ``f(x) = U D₂[(L₂ h) ⊙ (R₂ h)]``,
``h = D₁[(L₁ E x) ⊙ (R₁ E x)]``, which is mechjax's ``[E, (L₁, R₁, D₁), …, U]`` exactly.

**A bare bilinear layer** ``f(x) = D[(Lx) ⊙ (Rx)]`` becomes the reference's ``DeepMLP`` (embed →
bilinear ``MLP`` → head, ``bias=False``, ``scale=1``, so no residual) with ``d_model = max(in,
out)``: an identity embed ``[I; 0]``, ``D`` padded with zero rows, and the head ``[I_out 0]``
(:func:`model`; the benchmark's second table). That computes exactly
``f``; the reference then carries its own layout (the MLP's hidden index also holds the residual
stream and the constant, ``1 + h + d_model`` rows). A network that is already a ``DeepMLP`` (a
linear embed, the bilinear layer back to the embed's width, a linear head) is loaded as it is.

* ``measure="gaussian"``: the reference's own API, ``cosine_from_parts(*similarity_parts(a, b))``
  after its ``precompile(a, b)`` (a cotengra path search, cached on disk under
  ``~/.cache/tensor-mars``). It equals mechjax's ``tensor_similarity(a, b, measure="gaussian")``.
* ``measure="frobenius"``: the Gram chain. The reference's model-level function for it was removed
  from its repository; its primitive ``Component.contract(other, inner=G)`` remains, and
  :func:`_gram_chain` chains it over the components from ``G = I`` and takes the trace without the
  constant coordinate. Unsymmetrised it equals ``tensor_similarity(a, b, symmetrize=False)``. The
  node-wise symmetrised chain averages, at each bilinear layer, the contraction with ``b`` and with
  ``b``'s layer with ``L`` and ``R`` exchanged (:func:`swapped`, built once per network outside any
  timing): ``D_a[½((L_a G L_bᵀ) ⊙ (R_a G R_bᵀ) + (L_a G R_bᵀ) ⊙ (R_a G L_bᵀ))]D_bᵀ``, which equals
  ``tensor_similarity(a, b)``. The residual and constant rows of the reference's hidden index have
  zero output weights at ``scale=1``, so the exchange leaves them out of the result.
"""

from __future__ import annotations

import math
import sys
import time
import types

import numpy as np

_REF: types.SimpleNamespace | None = None


def load(path: str) -> types.SimpleNamespace:
  """Imports the reference from the checkout at ``path`` (once)."""
  global _REF
  if _REF is None:
    if path not in sys.path:
      sys.path.insert(0, path)
    try:
      import src.components.similarity as sim
      from src.components.base import Component
      from src.figures import cosine_from_parts
      from src.models.deep_mlp import DeepMLP
    except ImportError as e:
      raise ImportError(
        f"cannot import the reference from {path!r} ({e}): pass the folder of a checkout of "
        "tdooms/tensor-similarity (the one holding src/), and install benchmarks/requirements.txt"
      ) from e
    _REF = types.SimpleNamespace(
      sim=sim, Component=Component, cosine_from_parts=cosine_from_parts, DeepMLP=DeepMLP
    )
  return _REF


def _f64(x) -> np.ndarray:
  return np.asarray(x, np.float64)


def _as_deep_mlp(layers) -> tuple[np.ndarray, ...]:
  """``(E, L, R, D, U)`` of a ``DeepMLP`` that computes the network ``layers``."""
  kinds = ["bilinear" if "left" in x else "linear" for x in layers]
  if kinds == ["linear", "bilinear", "linear"]:
    e, u = _f64(layers[0]["weight"]), _f64(layers[2]["weight"])
    l, r, d = (_f64(layers[1][k]) for k in ("left", "right", "out"))
    if d.shape[0] == e.shape[0] == u.shape[1]:
      return e, l, r, d, u
  if kinds != ["bilinear"]:
    raise ValueError(f"a bare bilinear layer or a DeepMLP (linear, bilinear, linear); got {kinds}")
  l, r, d = (_f64(layers[0][k]) for k in ("left", "right", "out"))
  (h, n), o = l.shape, d.shape[0]
  m = max(n, o)
  lp, rp, dp = np.zeros((h, m)), np.zeros((h, m)), np.zeros((m, h))
  lp[:, :n], rp[:, :n], dp[:o] = l, r, d
  return np.eye(m, n), lp, rp, dp, np.eye(o, m)


def model(layers, dtype: str):
  """The reference's ``DeepMLP`` (one layer, no bias, no residual) computing ``layers``."""
  import torch

  ref = _REF
  e, l, r, d, u = _as_deep_mlp(layers)
  tdt = getattr(torch, dtype)
  net = ref.DeepMLP(e.shape[1], e.shape[0], l.shape[0], u.shape[0], n_layers=1, bias=False, scale=1)
  net = net.to(tdt).eval()
  mlp = net.body[0]
  with torch.no_grad():
    for p, v in (
      (net.embed.weight, e),
      (mlp.l.weight, l),
      (mlp.r.weight, r),
      (mlp.d.weight, d),
      (net.head.weight, u),
    ):
      p.copy_(torch.as_tensor(v, dtype=tdt))
  return net


def deep_mlp(weights: dict, dtype: str):
  """The reference's ``DeepMLP`` (``bias=False``, ``scale=1``) with the weights ``{"embed": E,
  "body": [(L, R, D), …], "head": U}`` (NumPy, ``(out, in)`` like torch's ``Linear``)."""
  import torch

  e, body, u = weights["embed"], weights["body"], weights["head"]
  h = body[0][0].shape[0]
  tdt = getattr(torch, dtype)
  net = _REF.DeepMLP(e.shape[1], e.shape[0], h, u.shape[0], n_layers=len(body), bias=False, scale=1)
  net = net.to(tdt).eval()
  pairs = [(net.embed.weight, e), (net.head.weight, u)]
  for mlp, (l, r, d) in zip(net.body, body):
    pairs += [(mlp.l.weight, l), (mlp.r.weight, r), (mlp.d.weight, d)]
  with torch.no_grad():
    for p, v in pairs:
      p.copy_(torch.as_tensor(np.asarray(v), dtype=tdt))
  return net


def swapped(net):
  """A copy of a reference ``DeepMLP`` with ``L`` and ``R`` exchanged in every bilinear layer (the
  same function; the other term of the node-wise symmetrisation)."""
  import copy

  import torch

  out = copy.deepcopy(net)
  with torch.no_grad():
    for mlp in out.body:
      left = mlp.l.weight.clone()
      mlp.l.weight.copy_(mlp.r.weight)
      mlp.r.weight.copy_(left)
  return out


class _AsComponent:
  """The reference's ``Linear`` has ``network()`` but not the ``Component`` methods: this lends it
  ``Component.input_inds`` and ``Component.contract`` (and wraps the MLP too, so every step runs the
  reference's own code)."""

  def __init__(self, module):
    self.module = module

  def network(self):
    return self.module.network()

  def input_inds(self, only_dims=True):
    return _REF.Component.input_inds(self, only_dims)

  def contract(self, other=None, inner=None, out="out:d"):
    return _REF.Component.contract(self, other, inner, out)


def _gram_chain(a, b, b_swapped=None):
  """``(c, g)``: the padded output Gram matrix of the two tensors is ``10**c · g``; node-wise
  symmetrised when ``b_swapped`` (:func:`swapped` of ``b``) is given."""
  import torch

  with torch.no_grad():
    g = torch.eye(a.components()[0].network().ind_size("in:d0"), dtype=next(a.parameters()).dtype)
    c = 0.0
    others = b.components() if b_swapped is None else zip(b.components(), b_swapped.components())
    for ca, cb in zip(a.components(), others):
      ca = _AsComponent(ca)
      cb, cs = (cb, None) if b_swapped is None else cb
      legs = len(ca.input_inds())  # the inner Gram enters once per input leg
      g_next, e = ca.contract(_AsComponent(cb), inner=g)
      e = float(e)
      if cs is not None and legs == 2:  # a bilinear layer: average with the exchanged one
        g_swap, e_swap = ca.contract(_AsComponent(cs), inner=g)
        g_next = 0.5 * (g_next + g_swap * 10.0 ** (float(e_swap) - e))
      g = g_next
      c = legs * c + e
  return c, g


def _trace(g) -> float:
  import torch

  return float(torch.diagonal(g[1:, 1:]).sum())  # without the padded constant coordinate


def frobenius(a, b, self_a=None, self_b=None, b_swapped=None, a_swapped=None) -> float:
  """The Frobenius cosine; node-wise symmetrised when the exchanged copies are given (``a``'s is
  needed only when ``self_a`` is not)."""
  symmetric = b_swapped is not None
  (cab, gab) = _gram_chain(a, b, b_swapped)
  caa, taa = self_a or _self_frobenius(a, a_swapped if symmetric else None)
  cbb, tbb = self_b or _self_frobenius(b, b_swapped)
  return _trace(gab) / math.sqrt(abs(taa * tbb)) * 10.0 ** (cab - 0.5 * (caa + cbb))


def _self_frobenius(a, a_swapped=None) -> tuple[float, float]:
  c, g = _gram_chain(a, a, a_swapped)
  return c, _trace(g)


def gaussian(a, b) -> float:
  return float(_REF.cosine_from_parts(*_REF.sim.similarity_parts(a, b)))


def similarity(a, b, measure: str, b_swapped=None, a_swapped=None) -> float:
  """The reference's similarity of two of its models (see the module docstring); the Frobenius
  one is symmetrised when the exchanged copies are given."""
  if measure == "gaussian":
    return gaussian(a, b)
  if measure == "frobenius":
    return frobenius(a, b, b_swapped=b_swapped, a_swapped=a_swapped)
  raise ValueError(f"measure must be 'gaussian' or 'frobenius'; got {measure!r}")


def matrix(models, measure: str, swaps=None) -> np.ndarray:
  """The ``K × K`` matrix as a user of the reference computes it: one call per pair ``i < j``
  (the Frobenius self terms computed once per network); symmetrised Frobenius with ``swaps``, the
  exchanged copies of ``models``."""
  k = len(models)
  out = np.eye(k)
  swaps = swaps or [None] * k
  selfs = [_self_frobenius(m, s) for m, s in zip(models, swaps)] if measure == "frobenius" else None
  for i in range(k):
    for j in range(i + 1, k):
      if measure == "frobenius":
        v = frobenius(models[i], models[j], selfs[i], selfs[j], b_swapped=swaps[j])
      else:
        v = gaussian(models[i], models[j])
      out[i, j] = out[j, i] = v
  return out


def precompile(models) -> float:
  """The reference's path search for the Gaussian topologies of ``models``; returns seconds."""
  t = time.perf_counter()
  _REF.sim.precompile(*models[:2])
  return time.perf_counter() - t
