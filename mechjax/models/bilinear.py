"""Bilinear (tensor) networks and their weight format.

A bilinear layer computes ``y = D[(L x) ⊙ (R x)]`` (Pearce et al. 2024, arXiv:2410.08417): no
activation function, so a network of such layers and linear maps is a polynomial whose coefficients
are a tensor network of its weights. That is what :mod:`mechjax.similarity.tensor` compares.

Modules (flax.linen; matrices are stored ``(out, in)``, as in the equations, not flax's ``(in,
out)``):

* :class:`Linear`: ``y = W x``, no bias.
* :class:`Bilinear`: ``y = D[(L x̃) ⊙ (R x̃)]`` with ``x̃ = [1; x]`` when ``use_bias`` (a bias
  folded into ``L`` and ``R``) and ``x̃ = x`` otherwise; ``project=False`` drops ``D`` (``D = I``,
  the layer's output is the hidden product itself, as in ``Bilinear(226→64) → Linear(64→113)``).
* :class:`BilinearBlock`: a bilinear MLP, optionally residual: ``x + D[(L x̃) ⊙ (R x̃)]``.
* :class:`BilinearNet`: a linear embedding, ``depth`` residual bilinear blocks and a linear head.

The weight format is a list of layers, each a dict:

* ``{"weight": W}`` with ``W`` of shape ``(out, in)``, a linear layer;
* ``{"left": L, "right": R, "out": D}`` with shapes ``(h, in)``, ``(h, in)``, ``(out, h)``, a
  bilinear layer.

:func:`to_layers` converts a module's params to that list. Biases and residual streams are not layer
kinds: the conversion writes them *homogeneously*, by carrying a constant coordinate ``1`` in front
of every activation (the input is ``[1; x]``). A constant is carried through a bilinear layer by one
hidden unit ``1·1`` and the residual ``x_i`` by the unit ``x_i·1``, so the converted list computes
exactly the module's function with nothing but linear and bilinear layers. :func:`needs_constant`
says whether a converted list expects ``[1; x]``; :func:`apply_layers` evaluates a list.
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Layer = dict[str, Any]
Network = list[Layer]

LINEAR_KEYS = ("weight",)
BILINEAR_KEYS = ("left", "right", "out")

# Weights are (out, in): the fan-in is the last axis.
_init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=-1, out_axis=-2)


def _pad(x: jax.Array) -> jax.Array:
  return jnp.concatenate([jnp.ones(x.shape[:-1] + (1,), x.dtype), x], axis=-1)


class Linear(nn.Module):
  """``y = W x`` with ``W`` of shape ``(features, in)``."""

  features: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    w = self.param("weight", _init, (self.features, x.shape[-1]))
    return x @ w.T


class Bilinear(nn.Module):
  """``y = D[(L x̃) ⊙ (R x̃)]``; ``x̃ = [1; x]`` with ``use_bias``. ``D`` is ``(features, hidden)``.

  ``project=False`` has no ``D``: then ``hidden`` must equal ``features`` (or be None) and ``y = (L
  x̃) ⊙ (R x̃)``.

  Attributes:
    features: output width (the rows of ``D``).
    hidden: number of hidden units, the rows of ``L`` and ``R``; None means ``features``.
    use_bias: read ``x̃ = [1; x]``, a bias folded into ``L`` and ``R`` as an extra first column.
    project: apply the output matrix ``D``; False returns the hidden products themselves.
  """

  features: int
  hidden: int | None = None
  use_bias: bool = False
  project: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    hidden = self.hidden or self.features
    if not self.project and hidden != self.features:
      raise ValueError(
        f"Bilinear without a projection has hidden == features; got hidden={hidden}, "
        f"features={self.features}"
      )
    xt = _pad(x) if self.use_bias else x
    left = self.param("left", _init, (hidden, xt.shape[-1]))
    right = self.param("right", _init, (hidden, xt.shape[-1]))
    h = (xt @ left.T) * (xt @ right.T)
    if not self.project:
      return h
    return h @ self.param("out", _init, (self.features, hidden)).T

  def hidden_activations(self, x: jax.Array) -> jax.Array:
    """``(L x̃) ⊙ (R x̃)``: the hidden products (call through ``module.apply(..., method=...)``)."""
    p = self.variables["params"]
    xt = _pad(x) if self.use_bias else x
    return (xt @ p["left"].T) * (xt @ p["right"].T)


class BilinearBlock(nn.Module):
  """A bilinear MLP ``D[(L x̃) ⊙ (R x̃)]`` of width ``hidden``, added to ``x`` when ``residual``.

  Attributes:
    hidden: number of hidden units of the bilinear MLP.
    use_bias: read ``x̃ = [1; x]`` (a bias folded into ``L`` and ``R``), as in :class:`Bilinear`.
    residual: add the MLP's output to its input; the output width must then equal the input's.
    features: output width; None keeps the input's width (required when ``residual``).
  """

  hidden: int
  use_bias: bool = False
  residual: bool = True
  features: int | None = None  # output width; defaults to the input's (required when residual)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    features = self.features or x.shape[-1]
    if self.residual and features != x.shape[-1]:
      raise ValueError(
        f"a residual bilinear block keeps the width: features={features} != input {x.shape[-1]}"
      )
    y = Bilinear(features, hidden=self.hidden, use_bias=self.use_bias, name="mlp")(x)
    return x + y if self.residual else y


class BilinearNet(nn.Module):
  """``head ∘ block_depth ∘ … ∘ block_1 ∘ embed``: a linear embedding to ``d_model``, ``depth``
  bilinear blocks of width ``hidden`` (residual unless ``residual=False``) and a linear head to
  ``features``.

  Attributes:
    features: output width of the linear head (e.g. the number of classes).
    d_model: width of the embedding and of the stream between blocks.
    hidden: number of hidden units in each bilinear block.
    depth: number of bilinear blocks.
    use_bias: fold a bias into every block's ``L`` and ``R`` (the embedding and head have none).
    residual: add each block's output to its input (a residual stream).
  """

  features: int
  d_model: int = 32
  hidden: int = 64
  depth: int = 1
  use_bias: bool = False
  residual: bool = True

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    h = Linear(self.d_model, name="embed")(x)
    for i in range(self.depth):
      h = BilinearBlock(
        self.hidden, use_bias=self.use_bias, residual=self.residual, name=f"block_{i}"
      )(h)
    return Linear(self.features, name="head")(h)


# ----------------------------------------------------------------------------------------------
# The weight format.


def layer_kind(layer: Any, index: int | None = None) -> str:
  """``"linear"`` or ``"bilinear"``; a ValueError naming the layer and the expected keys
  otherwise."""
  where = f"layer {index}" if index is not None else "layer"
  if isinstance(layer, dict):
    keys = set(layer)
    if keys == set(LINEAR_KEYS):
      return "linear"
    if keys == set(BILINEAR_KEYS):
      return "bilinear"
    got = sorted(keys)
  else:
    got = type(layer).__name__
  raise ValueError(
    f"{where}: unknown layer kind {got}; expected {{'weight': (out, in)}} for a linear layer or "
    f"{{'left': (h, in), 'right': (h, in), 'out': (out, h)}} for a bilinear layer"
  )


def validate(layers: Sequence[Layer] | Layer, input_dim: int | None = None) -> Network:
  """Checks a network in the weight format and returns it as a list (a single layer dict is
  accepted).

  Every matrix must be 2-D, a bilinear layer's ``left`` and ``right`` must have the same shape and
  ``out`` as many columns as they have rows, and each layer's input width must be the previous
  layer's output width (and ``input_dim``, if given). Errors name the layer and the expected shapes.
  """
  if isinstance(layers, dict):
    layers = [layers]
  layers = list(layers)
  if not layers:
    raise ValueError("a network needs at least one layer; got an empty list")
  prev = input_dim
  for i, layer in enumerate(layers):
    kind = layer_kind(layer, i)
    shapes = {k: np.shape(v) for k, v in layer.items()}
    bad = [k for k, s in shapes.items() if len(s) != 2]
    if bad:
      raise ValueError(f"layer {i} ({kind}): {bad[0]} must be a matrix; got shape {shapes[bad[0]]}")
    if kind == "linear":
      out, inp = shapes["weight"]
    else:
      (h, inp), (h_r, in_r), (out, h_d) = shapes["left"], shapes["right"], shapes["out"]
      if (h_r, in_r) != (h, inp) or h_d != h:
        raise ValueError(
          f"layer {i} (bilinear): expected left (h, in), right (h, in), out (out, h) with one h "
          "and "
          f"one in; got left {shapes['left']}, right {shapes['right']}, out {shapes['out']}"
        )
    if prev is not None and inp != prev:
      what = "the input width" if i == 0 else f"layer {i - 1}'s output width"
      raise ValueError(f"layer {i} ({kind}): input width {inp} does not match {what} {prev}")
    prev = out
  return layers


def input_dim(layers: Sequence[Layer]) -> int:
  first = layers[0]
  return int(np.shape(first["weight"] if "weight" in first else first["left"])[1])


def output_dim(layers: Sequence[Layer]) -> int:
  last = layers[-1]
  return int(np.shape(last["weight"] if "weight" in last else last["out"])[0])


def num_bilinear(layers: Sequence[Layer]) -> int:
  return sum(layer_kind(layer) == "bilinear" for layer in layers)


def apply_layers(
  layers: Sequence[Layer] | Layer, x: jax.Array, *, constant: bool = False
) -> jax.Array:
  """Evaluates a weight-format network on ``x`` of shape ``(..., in)``; ``constant`` prepends the
  ``1``."""
  layers = validate(layers)
  h = _pad(x) if constant else x
  for layer in layers:
    if "weight" in layer:
      h = h @ jnp.asarray(layer["weight"]).T
    else:
      h = ((h @ jnp.asarray(layer["left"]).T) * (h @ jnp.asarray(layer["right"]).T)) @ jnp.asarray(
        layer["out"]
      ).T
  return h


# ----------------------------------------------------------------------------------------------
# Conversion from flax params.


def _carry_linear(w: jax.Array) -> jax.Array:
  """``[1; x] ↦ [1; W x]``: ``W`` with the constant carried (block-diagonal ``1 ⊕ W``)."""
  out, inp = w.shape
  top = jnp.zeros((1, inp + 1), w.dtype).at[0, 0].set(1.0)
  return jnp.concatenate([top, jnp.concatenate([jnp.zeros((out, 1), w.dtype), w], axis=1)], axis=0)


def _carry_bilinear(p: dict, *, padded: bool, residual: bool, project: bool = True) -> Layer:
  """A bilinear MLP on ``z = [1; x]`` (``x`` of width ``d``) as one bilinear layer ``z ↦ [1; y]``.

  Hidden units: the module's own (reading ``z`` directly when ``padded``, else ``x``), one unit
  ``1·1`` that carries the constant, and with ``residual`` ``d`` units ``x_i·1`` that carry ``x``
  through.
  """
  left, right = p["left"], p["right"]
  h = left.shape[0]
  d = left.shape[1] - 1 if padded else left.shape[1]
  dt = left.dtype
  if not padded:  # the module reads x only: a zero column for the constant
    left = jnp.concatenate([jnp.zeros((h, 1), dt), left], axis=1)
    right = jnp.concatenate([jnp.zeros((h, 1), dt), right], axis=1)
  d_out = jnp.eye(h, dtype=dt) if not project else p["out"]
  o = d_out.shape[0]
  e0 = jnp.zeros((1, d + 1), dt).at[0, 0].set(1.0)
  lefts, rights = [left, e0], [right, e0]
  out_cols = [
    jnp.concatenate([jnp.zeros((1, h), dt), d_out], axis=0),  # y = D(...)
    jnp.zeros((o + 1, 1), dt).at[0, 0].set(1.0),
  ]  # the constant
  if residual:
    if o != d:
      raise ValueError(f"a residual block keeps the width; got input {d}, output {o}")
    lefts.append(jnp.concatenate([jnp.zeros((d, 1), dt), jnp.eye(d, dtype=dt)], axis=1))  # x_i
    rights.append(jnp.tile(e0, (d, 1)))  # · 1
    out_cols.append(jnp.concatenate([jnp.zeros((1, d), dt), jnp.eye(d, dtype=dt)], axis=0))
  return {
    "left": jnp.concatenate(lefts),
    "right": jnp.concatenate(rights),
    "out": jnp.concatenate(out_cols, axis=1),
  }


def needs_constant(model: nn.Module) -> bool:
  """Whether :func:`to_layers` of ``model`` writes the homogeneous form, which expects ``[1;
  x]``."""
  if isinstance(model, (Linear,)):
    return False
  if isinstance(model, Bilinear):
    return model.use_bias
  if isinstance(model, BilinearBlock):
    return model.use_bias or model.residual
  if isinstance(model, BilinearNet):
    return model.use_bias or model.residual
  if isinstance(model, nn.Sequential):
    return any(needs_constant(m) for m in model.layers)
  raise ValueError(
    f"to_layers knows Linear, Bilinear, BilinearBlock, BilinearNet and nn.Sequential of them; "
    f"got {type(model).__name__}"
  )


def to_layers(model: nn.Module, params: dict) -> Network:
  """The weight-format list of a trained module (``params`` as returned by ``model.init``, with or
  without the outer ``{"params": ...}``).

  Without biases or residual streams the list is the module's own matrices (``project=False`` gets
  ``out = I``). Otherwise it is the homogeneous form described in the module docstring, and it
  expects ``[1; x]`` (``apply_layers(..., constant=True)``); :func:`needs_constant` says which.
  """
  p = params.get("params", params)
  homogeneous = needs_constant(model)
  if isinstance(model, nn.Sequential):
    names = [f"layers_{i}" for i in range(len(model.layers))]
    missing = [n for n in names if n not in p]
    if missing:
      raise ValueError(
        f"params lack {missing}; expected one entry per layer of the nn.Sequential, got {sorted(p)}"
      )
    out: Network = []
    for i, (m, n) in enumerate(zip(model.layers, names)):
      out += _module_layers(m, p[n], homogeneous=homogeneous, last=i == len(model.layers) - 1)
    return validate(out)
  return validate(_module_layers(model, p, homogeneous=homogeneous, last=True))


def _module_layers(model: nn.Module, p: dict, *, homogeneous: bool, last: bool) -> Network:
  if isinstance(model, Linear):
    w = jnp.asarray(p["weight"])
    if not homogeneous:
      return [{"weight": w}]
    # The last layer drops the constant; earlier ones carry it.
    return (
      [{"weight": jnp.concatenate([jnp.zeros((w.shape[0], 1), w.dtype), w], axis=1)}]
      if last
      else [{"weight": _carry_linear(w)}]
    )
  if isinstance(model, Bilinear):
    if not homogeneous:
      out = p["out"] if model.project else jnp.eye(p["left"].shape[0], dtype=p["left"].dtype)
      return [{"left": p["left"], "right": p["right"], "out": out}]
    layer = _carry_bilinear(p, padded=model.use_bias, residual=False, project=model.project)
    return [_drop_constant(layer) if last else layer]
  if isinstance(model, BilinearBlock):
    if not homogeneous:
      return _module_layers(Bilinear(1, use_bias=False), p["mlp"], homogeneous=False, last=last)
    layer = _carry_bilinear(p["mlp"], padded=model.use_bias, residual=model.residual)
    return [_drop_constant(layer) if last else layer]
  if isinstance(model, BilinearNet):
    layers = _module_layers(Linear(model.d_model), p["embed"], homogeneous=homogeneous, last=False)
    for i in range(model.depth):
      block = BilinearBlock(model.hidden, use_bias=model.use_bias, residual=model.residual)
      layers += _module_layers(block, p[f"block_{i}"], homogeneous=homogeneous, last=False)
    return layers + _module_layers(
      Linear(model.features), p["head"], homogeneous=homogeneous, last=last
    )
  raise ValueError(
    f"to_layers knows Linear, Bilinear, BilinearBlock, BilinearNet and nn.Sequential of them; "
    f"got {type(model).__name__}"
  )


def _drop_constant(layer: Layer) -> Layer:
  return {**layer, "out": layer["out"][1:]}


# ----------------------------------------------------------------------------------------------
# Weight symmetries: transformations that leave a network's function unchanged.


def permute_hidden(layer: Layer, perm) -> Layer:
  """A bilinear layer with its hidden units reordered by ``perm`` (rows of ``L``, ``R``; columns of
  ``D``)."""
  perm = jnp.asarray(perm)
  return {"left": layer["left"][perm], "right": layer["right"][perm], "out": layer["out"][:, perm]}


def rescale_hidden(layer: Layer, a, b) -> Layer:
  """``(l_h, r_h, d_h) → (a_h l_h, b_h r_h, d_h / (a_h b_h))`` for every hidden unit ``h``."""
  a, b = jnp.asarray(a), jnp.asarray(b)
  return {
    "left": layer["left"] * a[:, None],
    "right": layer["right"] * b[:, None],
    "out": layer["out"] / (a * b)[None, :],
  }


def swap_left_right(layer: Layer, mask) -> Layer:
  """Exchanges ``l_h`` and ``r_h`` for the hidden units where ``mask`` is true."""
  m = jnp.asarray(mask, bool)[:, None]
  return {
    "left": jnp.where(m, layer["right"], layer["left"]),
    "right": jnp.where(m, layer["left"], layer["right"]),
    "out": layer["out"],
  }


def rotate_residual(model: BilinearNet, params: dict, q: jax.Array) -> tuple[BilinearNet, dict]:
  """``(model, params)`` with the residual stream written in the basis ``q`` (orthogonal
  ``d_model × d_model``): ``embed → q·embed``, every block reads through ``qᵀ`` (``L, R → L qᵀ, R
  qᵀ``, the bias column untouched) and writes through ``q`` (``D → q D``), and ``head → head·qᵀ``.
  The function is unchanged, and so is the model."""
  if not isinstance(model, BilinearNet):
    raise ValueError(f"rotate_residual needs a BilinearNet; got {type(model).__name__}")
  if q.shape != (model.d_model, model.d_model):
    raise ValueError(f"q must be ({model.d_model}, {model.d_model}); got {q.shape}")
  outer = "params" in params
  p = dict(params["params"] if outer else params)
  p["embed"] = {"weight": q @ p["embed"]["weight"]}
  for i in range(model.depth):
    mlp = dict(p[f"block_{i}"]["mlp"])
    for k in ("left", "right"):
      w = mlp[k]
      mlp[k] = jnp.concatenate([w[:, :1], w[:, 1:] @ q.T], axis=1) if model.use_bias else w @ q.T
    mlp["out"] = q @ mlp["out"]
    p[f"block_{i}"] = {"mlp": mlp}
  p["head"] = {"weight": p["head"]["weight"] @ q.T}
  return model, ({"params": p} if outer else p)
