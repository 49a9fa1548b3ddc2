"""Changes of a pretrained model's weights that keep its function: every norm's gain folded into the
maps that read it (:func:`fold_norms`), the residual stream in another basis
(:func:`rotate_residual`); and the boxes of one attention head's or one MLP's weights
(:func:`component_boxes`), with their 0/1 masks (:func:`component_masks`).
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.models.pretrained.arch import Arch
from mechjax.models.pretrained.checkpoint import param_shapes
from mechjax.models.pretrained.model import DecoderLM


def _readers(arch: Arch, params: dict) -> dict[str, list[dict]]:
  """Each norm's name and the linear maps that read its output (kernels with ``d_model`` first)."""
  out = {}
  for l in range(arch.num_layers):
    out[f"norm_attn_{l}"] = [params[f"attn_{l}"][n] for n in ("query", "key", "value")]
    mlp = params[f"mlp_{l}"]
    out[f"norm_mlp_{l}"] = [mlp[n] for n in ("gate", "up") if n in mlp]
  out["norm_final"] = [params["unembed"]]
  return out


def _writers(arch: Arch, params: dict) -> list[tuple[dict, str]]:
  """``(container, key)`` of every array that writes to the stream (``d_model`` last)."""
  out = [(params["embed"], "embedding")]
  if arch.learned_positions:
    out.append((params, "pos_embed"))
  for l in range(arch.num_layers):
    for container in (params[f"attn_{l}"]["out"], params[f"mlp_{l}"]["down"]):
      out += [(container, k) for k in ("kernel", "bias") if k in container]
  return out


def _copy(params: dict) -> dict:
  return jax.tree.map(lambda x: np.array(x, np.float64), params)


def fold_norms(model: DecoderLM, params: dict) -> tuple[DecoderLM, dict]:
  """The same function with every norm's gain (and bias) moved into the maps that read it, so each
  norm is the bare normalisation; for LayerNorm models every write to the stream is also centred.

  ``(N(x)·g + b) W + c = N(x)·(diag(g) W) + (b W + c)``: the gains go into the readers' kernels and
  the biases into their biases (the unembedding gains one; tied embeddings are untied). A
  LayerNorm subtracts the mean of its input, and only norms read the stream, so subtracting each
  written vector's mean over ``d_model`` (embeddings, attention and MLP outputs) changes no norm's
  output: afterwards the stream lies in the mean-zero subspace. Computed in float64, returned in
  the model's dtype.
  """
  a = model.arch
  p = _copy(params)
  layernorm = a.norm == "layernorm"
  if a.tied_embeddings:
    p["unembed"] = {"kernel": p["embed"]["embedding"].T.copy()}
  changes = dict(tied_embeddings=False)
  if layernorm:  # the norms' biases need somewhere to go
    changes.update(qkv_bias=True, mlp_bias=True, unembed_bias=True)
  arch = dataclasses.replace(a, **changes)
  for norm, readers in _readers(a, p).items():
    gain, bias = p[norm]["scale"], p[norm].get("bias")
    for reader in readers:
      kernel = reader["kernel"]
      if layernorm:
        shift = np.tensordot(bias, kernel, axes=(0, 0))
        reader["bias"] = reader.get("bias", np.zeros(kernel.shape[1:])) + shift
      reader["kernel"] = kernel * gain.reshape((-1,) + (1,) * (kernel.ndim - 1))
    p[norm]["scale"] = np.ones_like(gain)
    if bias is not None:
      p[norm]["bias"] = np.zeros_like(bias)
  if layernorm:
    for container, key in _writers(a, p):
      container[key] = container[key] - container[key].mean(axis=-1, keepdims=True)
  new = DecoderLM(arch, model.dtype)
  return new, _as_params(new, p)


def _as_params(model: DecoderLM, p: dict) -> dict:
  """``p`` in the model's dtype, with zeros for any bias the model has and ``p`` lacks."""
  shapes = param_shapes(model)
  flat = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(p)}
  return jax.tree_util.tree_map_with_path(
    lambda k, s: jnp.asarray(flat.get(jax.tree_util.keystr(k), np.zeros(s.shape)), model.dtype),
    shapes,
  )


def mean_preserving(r: jax.Array | np.ndarray) -> np.ndarray:
  """The ``d × d`` orthogonal matrix that fixes the all-ones direction and acts as ``r``
  (``(d − 1) × (d − 1)``, orthogonal) on an orthonormal basis of its complement: the rotations a
  LayerNorm model's stream allows (:func:`rotate_residual`)."""
  r = np.asarray(r, np.float64)
  d = r.shape[0] + 1
  u = np.full(d, 1 / np.sqrt(d))
  v = u - np.eye(d)[0]  # a Householder reflection taking e_0 to u
  h = np.eye(d) - 2 * np.outer(v, v) / (v @ v)
  basis = h[:, 1:]  # orthonormal, orthogonal to u
  return np.outer(u, u) + basis @ r @ basis.T


def rotate_residual(model: DecoderLM, params: dict, q) -> tuple[DecoderLM, dict]:
  """The same function with its residual stream in another basis: after :func:`fold_norms`, every
  site of the new model is the folded model's site times ``q``.

  Writers (embeddings, attention and MLP outputs, their biases) are multiplied by ``q`` on their
  ``d_model`` side, readers (query, key, value, MLP inputs, unembedding) by ``qᵀ``. Bare RMSNorm
  commutes with every orthogonal ``q``; bare LayerNorm on the mean-zero stream commutes with the
  ``q`` that fix the all-ones direction (:func:`mean_preserving`), and others are refused.
  """
  q = np.asarray(q, np.float64)
  d = model.arch.d_model
  if q.shape != (d, d) or not np.allclose(q @ q.T, np.eye(d), atol=1e-5):
    raise ValueError(f"q must be an orthogonal ({d}, {d}) matrix; got shape {q.shape}")
  if model.arch.norm == "layernorm" and not np.allclose(q @ np.ones(d), np.ones(d), atol=1e-5):
    raise ValueError(
      "a LayerNorm model's stream can only be rotated by a q that fixes the all-ones direction "
      "(q @ 1 = 1); build one with pretrained.mean_preserving(r)"
    )
  folded, p = fold_norms(model, params)
  a = folded.arch
  p = _copy(p)
  for container, key in _writers(a, p):
    container[key] = np.tensordot(container[key], q, axes=(-1, 0))
  for readers in _readers(a, p).values():
    for reader in readers:
      reader["kernel"] = np.tensordot(q.T, reader["kernel"], axes=(1, 0))
  return folded, _as_params(folded, p)


def component_boxes(model: DecoderLM) -> dict[str, dict[str, tuple | None]]:
  """Each component's weights as boxes: ``{component: {leaf path: slices}}``, the path's keys
  joined by ``/`` (``attn_0/query/kernel``; a prefix such as ``mlp_1`` names every leaf under it),
  the slices cutting the leading axes (None: the whole leaf). What
  :func:`mechjax.slt.restriction.from_boxes` turns into the restrictions a chain samples, without a
  mask.

  ``"attn_{l}.head_{h}"`` is query head ``h``'s slice of the query kernel and bias and of the output
  kernel, and the key and value slices of the key/value head it reads (head ``h // (heads /
  kv_heads)``; under grouped-query attention that slice is shared by the group). ``"mlp_{l}"`` is
  every weight of layer ``l``'s MLP. The projections are stored per head, so each is exactly one
  head's weights, however the checkpoint fused them.
  """
  a = model.arch
  out = {}
  for l in range(a.num_layers):
    for h in range(a.num_heads):
      out[f"attn_{l}.head_{h}"] = _head_boxes(
        a, l, slice(h, h + 1), h // (a.num_heads // a.num_kv_heads)
      )
    out[f"mlp_{l}"] = {f"mlp_{l}": None}
  return out


def _head_boxes(a: Arch, layer: int, heads: slice, kv: int) -> dict[str, tuple]:
  """The query heads ``heads`` of layer ``layer`` (query and output slices, and biases) and the key
  and value slices of key/value head ``kv``."""
  every, kv_slice = slice(None), slice(kv, kv + 1)
  boxes = {f"attn_{layer}/query/kernel": (every, heads), f"attn_{layer}/out/kernel": (heads,)}
  boxes |= {f"attn_{layer}/{n}/kernel": (every, kv_slice) for n in ("key", "value")}
  if a.qkv_bias:
    boxes[f"attn_{layer}/query/bias"] = (heads,)
    boxes |= {f"attn_{layer}/{n}/bias": (kv_slice,) for n in ("key", "value")}
  return boxes


def component_masks(model: DecoderLM, params: dict) -> dict[str, dict]:
  """0/1 float32 masks like ``params``, one per component of :func:`component_boxes` (the heads and
  the MLPs), for ``param_mask=`` of :func:`mechjax.slt.estimate_llc`. Each is a full-size copy of
  the parameters: for a large model pass the restrictions of the boxes instead."""
  flat = jax.tree_util.tree_flatten_with_path(params)
  names = ["/".join(str(k.key) for k in path) for path, _ in flat[0]]
  out = {}
  for component, boxes in component_boxes(model).items():
    leaves = []
    for name, leaf in zip(names, jax.tree.leaves(params)):
      m = np.zeros(np.shape(leaf), np.float32)
      for key, cut in boxes.items():
        if name == key or name.startswith(key + "/"):
          m[tuple(cut or ())] = 1
      leaves.append(m)
    out[component] = jax.tree.unflatten(flat[1], leaves)
  return out


RESTRICTION_FORMS = (
  "all, embed, unembed, l<L>h<H> (one head), l<L>g<G> (one key/value group and its query heads), "
  "'l<L> attn', 'l<L> mlp', and unions of them joined by +"
)
_ATOM = re.compile(r"^l(\d+)\s*(?:h(\d+)|g(\d+)|(attn|mlp))$")


def restriction_boxes(model: DecoderLM, spec: str) -> dict[str, list[dict] | None]:
  """The weight restrictions named in ``spec``, in the form devinterp's users write them:
  comma-separated, each ``all``, ``embed`` (the token embedding, and the learned positions where
  there are any), ``unembed``, ``l0h1`` (layer 0's head 1, as :func:`component_boxes`), ``l0g0``
  (layer 0's key/value group 0: its key and value slices and the query and output slices of every
  head that reads them), ``l2 attn`` and ``l2 mlp`` (every weight of layer 2's attention or MLP), or
  a union of them joined by ``+``. Returns ``{restriction: [boxes, ...]}`` (a union's boxes, for
  :func:`mechjax.slt.restriction.from_boxes`), None for ``all``; a form it does not know, or a
  layer, head or group the model does not have, is refused in one line."""
  a = model.arch
  group = a.num_heads // a.num_kv_heads
  out: dict[str, list[dict] | None] = {}
  for name in (p.strip() for p in spec.split(",")):
    if not name:
      raise ValueError(f"empty restriction in {spec!r}; the forms are {RESTRICTION_FORMS}")
    atoms = [_atom_boxes(model, group, t.strip()) for t in name.split("+")]
    out[name] = None if any(x is None for x in atoms) else atoms
  return out


def _atom_boxes(model: DecoderLM, group: int, atom: str) -> dict | None:
  a = model.arch
  if atom == "all":
    return None
  if atom == "embed":
    return {"embed": None, **({"pos_embed": None} if a.learned_positions else {})}
  if atom == "unembed":
    if a.tied_embeddings:
      raise ValueError(
        "restriction 'unembed': this checkpoint ties its unembedding to the embedding "
        "(tie_word_embeddings); restrict 'embed'"
      )
    return {"unembed": None}
  m = _ATOM.match(atom)
  if m is None:
    raise ValueError(f"unknown restriction {atom!r}; the forms are {RESTRICTION_FORMS}")
  layer, head, kv, part = int(m[1]), m[2], m[3], m[4]
  if layer >= a.num_layers:
    raise ValueError(f"restriction {atom!r}: the model has layers 0–{a.num_layers - 1}")
  if part is not None:
    return {f"{'attn' if part == 'attn' else 'mlp'}_{layer}": None}
  if head is not None:
    if int(head) >= a.num_heads:
      raise ValueError(f"restriction {atom!r}: the model has heads 0–{a.num_heads - 1}")
    return _head_boxes(a, layer, slice(int(head), int(head) + 1), int(head) // group)
  if int(kv) >= a.num_kv_heads:
    raise ValueError(f"restriction {atom!r}: the model has key/value groups 0–{a.num_kv_heads - 1}")
  return _head_boxes(a, layer, slice(int(kv) * group, (int(kv) + 1) * group), int(kv))
