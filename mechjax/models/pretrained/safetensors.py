"""The ``.safetensors`` format, read as memory maps and written, with numpy alone.

A file is an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}}``, then the bytes.
"""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np

from mechjax.models.pretrained.arch import CheckpointError

_SAFETENSORS_DTYPES = {
  "F64": np.float64,
  "F32": np.float32,
  "F16": np.float16,
  "BF16": ml_dtypes.bfloat16,
  "I64": np.int64,
  "I32": np.int32,
  "U8": np.uint8,
  "BOOL": np.bool_,
}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """Every tensor of a ``.safetensors`` file as a read-only memory map (nothing is read until it
  is used). The format: an 8-byte little-endian header length, a JSON header
  ``{name: {"dtype", "shape", "data_offsets": [begin, end]}}``, then the bytes."""
  size = os.path.getsize(path)
  damaged = f"{path} is truncated or damaged"
  with open(path, "rb") as f:
    head = f.read(8)
    if len(head) < 8:
      raise CheckpointError(f"{damaged}: it has {size} bytes, fewer than a header; copy it again")
    (n,) = np.frombuffer(head, "<u8")
    if 8 + int(n) > size:
      raise CheckpointError(
        f"{damaged}: its header says {int(n):,} bytes of JSON and the file has {size:,} bytes; "
        "copy it again"
      )
    try:
      header = json.loads(f.read(int(n)))
    except (json.JSONDecodeError, UnicodeDecodeError):
      raise CheckpointError(f"{damaged}: its header is not JSON; copy it again") from None
  header.pop("__metadata__", None)
  out = {}
  for name, info in header.items():
    if info["dtype"] not in _SAFETENSORS_DTYPES:
      raise CheckpointError(f"{path}: tensor {name} has dtype {info['dtype']}, which is not read")
    begin, end = info["data_offsets"]
    dtype = np.dtype(_SAFETENSORS_DTYPES[info["dtype"]])
    shape = tuple(info["shape"])
    if end - begin != dtype.itemsize * int(np.prod(shape)) or 8 + int(n) + end > size:
      raise CheckpointError(
        f"{damaged}: tensor {name} ({info['dtype']} {list(shape)}) needs bytes {begin:,} to "
        f"{end:,} of the data and the file holds {size - 8 - int(n):,}; copy it again"
      )
    if end == begin:
      out[name] = np.zeros(shape, dtype)
      continue
    out[name] = np.memmap(path, dtype=dtype, mode="r", offset=8 + int(n) + begin, shape=shape)
  return out


_SAFETENSORS_NAMES = {np.dtype(v).name: k for k, v in _SAFETENSORS_DTYPES.items()}


def write_safetensors(
  path: str | os.PathLike, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None
) -> None:
  """Writes ``{name: array}`` as a ``.safetensors`` file (the format :func:`read_safetensors`
  describes; tensors in name order, each contiguous, little-endian). ``metadata`` (strings) goes
  in the header's ``__metadata__``: ``{"format": "pt"}`` is what transformers looks for."""
  header, offset, arrays = {}, 0, []
  if metadata:
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  for name in sorted(tensors):
    a = np.ascontiguousarray(tensors[name])
    if a.dtype.name not in _SAFETENSORS_NAMES:
      raise ValueError(f"tensor {name} has dtype {a.dtype}; writable: {sorted(_SAFETENSORS_NAMES)}")
    a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    header[name] = {
      "dtype": _SAFETENSORS_NAMES[a.dtype.name],
      "shape": list(a.shape),
      "data_offsets": [offset, offset + a.nbytes],
    }
    offset += a.nbytes
    arrays.append(a)
  blob = json.dumps(header).encode()
  blob += b" " * (-len(blob) % 8)  # the data start 8-byte aligned
  with open(path, "wb") as f:
    f.write(np.uint64(len(blob)).astype("<u8").tobytes())
    f.write(blob)
    for a in arrays:
      f.write(a.tobytes())
