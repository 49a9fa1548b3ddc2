"""Weights from elsewhere: a torch ``state_dict`` (or the same arrays in ``.npz`` or
``.safetensors``) as the params of mechjax's MLP, bilinear network and transformer.

Torch stores a linear layer's weight as ``(out, in)`` and flax as a ``(in, out)`` kernel; the
functions here transpose, reshape attention projections into heads, and fold a bilinear layer's
biases into its first column, so that the mechjax model computes what the torch model computes. Each
function names the ``state_dict`` keys it reads (the layout of the torch modules in
``docs/your_model.md``) and refuses a missing key or a wrong shape by name.

Example::

    sd = convert.load_state_dict("model.safetensors")           # or .npz, or .pt with torch
    params = convert.two_layer_params(sd)                        # for mechjax.models.TwoLayer
    model.apply({"params": params}, x)
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping

import numpy as np

StateDict = Mapping[str, Any]


def load_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """A ``state_dict`` as NumPy arrays, from ``.npz``, ``.safetensors`` or a torch ``.pt``/``.pth``
  file (``torch.save(model.state_dict(), path)``; needs torch, loaded with ``weights_only=True``).

  Args:
    path: the file; its suffix says the format.

  Returns:
    ``{key: array}``, float32 arrays as saved.
  """
  path = os.fspath(path)
  suffix = os.path.splitext(path)[1].lower()
  if suffix == ".npz":
    with np.load(path) as f:
      return {k: f[k] for k in f.files}
  if suffix == ".safetensors":
    try:
      from safetensors.numpy import load_file
    except ImportError as e:
      raise ImportError(
        "reading .safetensors needs the safetensors package: pip install safetensors"
      ) from e
    return dict(load_file(path))
  if suffix in (".pt", ".pth", ".bin"):
    try:
      import torch
    except ImportError as e:
      raise ImportError(
        f"reading {path} needs torch (pip install torch); or export the state_dict to .npz "
        "(np.savez(path, **{k: v.numpy() for k, v in sd.items()})) or .safetensors"
      ) from e
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.detach().cpu().numpy() for k, v in state.items()}
  raise ValueError(f"{path}: expected a .npz, .safetensors, .pt or .pth file")


def _get(sd: StateDict, key: str, ndim: int, shape: tuple | None = None) -> np.ndarray:
  if key not in sd:
    near = sorted(k for k in sd if k.split(".")[-1] == key.split(".")[-1])[:6]
    raise KeyError(f"state_dict has no {key!r}" + (f"; keys like it: {near}" if near else ""))
  a = np.asarray(sd[key].detach().cpu().numpy() if hasattr(sd[key], "detach") else sd[key])
  if a.ndim != ndim or (shape is not None and a.shape != shape):
    want = shape if shape is not None else f"{ndim} axes"
    raise ValueError(f"state_dict[{key!r}] has shape {a.shape}; expected {want}")
  return a.astype(np.float32)


def two_layer_params(sd: StateDict, hidden: str = "0", readout: str = "2") -> dict:
  """Params of :class:`mechjax.models.mlp.TwoLayer` from a torch two-layer network.

  The torch model is ``nn.Sequential(nn.Linear(D, H), activation, nn.Linear(H, 1))`` (keys
  ``0.weight``, ``0.bias``, ``2.weight``, ``2.bias``), or any module with two such layers.

  Args:
    sd: the ``state_dict``.
    hidden: the hidden layer's key prefix.
    readout: the readout layer's key prefix.
  """
  w1 = _get(sd, f"{hidden}.weight", 2)
  w2 = _get(sd, f"{readout}.weight", 2, (1, w1.shape[0]))
  return {
    "hidden": {"kernel": w1.T, "bias": _get(sd, f"{hidden}.bias", 1, (w1.shape[0],))},
    "readout": {"kernel": w2.T, "bias": _get(sd, f"{readout}.bias", 1, (1,))},
  }


def _bilinear_matrix(sd: StateDict, prefix: str, rows: int | None = None) -> np.ndarray:
  w = _get(sd, f"{prefix}.weight", 2)
  if rows is not None and w.shape[0] != rows:
    raise ValueError(f"state_dict[{prefix + '.weight'!r}] has {w.shape[0]} rows; expected {rows}")
  if f"{prefix}.bias" in sd:  # x̃ = [1; x]: the bias is the first column
    b = _get(sd, f"{prefix}.bias", 1, (w.shape[0],))
    return np.concatenate([b[:, None], w], axis=1)
  return w


def bilinear_net_params(sd: StateDict) -> dict:
  """Params of :class:`mechjax.models.bilinear.BilinearNet` from a torch bilinear network.

  Keys: ``embed.weight`` ``(d_model, in)``; for each block ``i``: ``blocks.{i}.left.weight`` and
  ``blocks.{i}.right.weight`` ``(hidden, d_model)`` (with ``.bias`` when the block has biases:
  ``use_bias=True``) and ``blocks.{i}.out.weight`` ``(d_model, hidden)``; ``head.weight``
  ``(features, d_model)``. Build the mechjax model with the same ``d_model``, ``hidden``,
  ``depth``, ``use_bias`` and ``residual``.

  Args:
    sd: the ``state_dict``.
  """
  depth = len({m.group(1) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k))})
  embed = _get(sd, "embed.weight", 2)
  params = {"embed": {"weight": embed}, "head": {"weight": _get(sd, "head.weight", 2)}}
  for i in range(depth):
    left = _bilinear_matrix(sd, f"blocks.{i}.left")
    params[f"block_{i}"] = {
      "mlp": {
        "left": left,
        "right": _bilinear_matrix(sd, f"blocks.{i}.right", left.shape[0]),
        "out": _get(sd, f"blocks.{i}.out.weight", 2, (embed.shape[0], left.shape[0])),
      }
    }
  return params


def transformer_params(sd: StateDict, num_heads: int, heads: tuple[str, ...] | None = None) -> dict:
  """Params of :class:`mechjax.models.transformer.Transformer` from a torch transformer of the same
  architecture (pre-norm RMSNorm with gains, no biases, ReLU MLP, learned positions).

  Keys: ``embed.weight`` ``(vocab, d)``, ``pos_embed`` ``(max_len, d)``, ``norm_final.weight``;
  for each layer ``l``: ``blocks.{l}.norm_attn.weight``; ``blocks.{l}.attn.query.weight``, ``.key``
  and ``.value`` ``(num_heads·head_dim, d)``; ``blocks.{l}.attn.out.weight``
  ``(d, num_heads·head_dim)``; and unless attention-only ``blocks.{l}.norm_mlp.weight``,
  ``blocks.{l}.mlp_in.weight`` ``(d_mlp, d)`` and ``blocks.{l}.mlp_out.weight`` ``(d, d_mlp)``;
  for each readout head ``heads.{name}.weight`` ``(size, d)``.

  Args:
    sd: the ``state_dict``.
    num_heads: attention heads per layer (the projections are split into them).
    heads: the readout heads to convert; by default every ``heads.<name>``.
  """
  embed = _get(sd, "embed.weight", 2)
  d = embed.shape[1]
  layers = sorted({int(m.group(1)) for k in sd if (m := re.match(r"blocks\.(\d+)\.", k))})
  if layers != list(range(len(layers))):
    raise ValueError(f"state_dict blocks must be numbered 0, 1, …; got {layers}")
  if heads is None:
    heads = tuple(sorted({m.group(1) for k in sd if (m := re.match(r"heads\.(\w+)\.weight", k))}))
  params = {
    "embed": {"embedding": embed},
    "pos_embed": _get(sd, "pos_embed", 2),
    "norm_final": {"gain": _get(sd, "norm_final.weight", 1, (d,))},
  }
  for name in heads:
    params[f"head_{name}"] = {"kernel": _get(sd, f"heads.{name}.weight", 2).T}
  for l in layers:  # noqa: E741
    p = f"blocks.{l}"
    q = _get(sd, f"{p}.attn.query.weight", 2)
    if q.shape[0] % num_heads:
      raise ValueError(
        f"{p}.attn.query.weight has {q.shape[0]} rows, not a multiple of {num_heads}"
      )
    h = q.shape[0] // num_heads
    attn = {
      name: {
        "kernel": _get(sd, f"{p}.attn.{name}.weight", 2, (num_heads * h, d)).T.reshape(
          d, num_heads, h
        )
      }
      for name in ("query", "key", "value")
    }
    attn["out"] = {
      "kernel": _get(sd, f"{p}.attn.out.weight", 2, (d, num_heads * h)).T.reshape(num_heads, h, d)
    }
    params[f"attn_{l}"] = attn
    params[f"norm_attn_{l}"] = {"gain": _get(sd, f"{p}.norm_attn.weight", 1, (d,))}
    if f"{p}.mlp_in.weight" in sd:
      w_in = _get(sd, f"{p}.mlp_in.weight", 2)
      params[f"norm_mlp_{l}"] = {"gain": _get(sd, f"{p}.norm_mlp.weight", 1, (d,))}
      params[f"mlp_in_{l}"] = {"kernel": w_in.T}
      params[f"mlp_out_{l}"] = {"kernel": _get(sd, f"{p}.mlp_out.weight", 2, (d, w_in.shape[0])).T}
  return params
