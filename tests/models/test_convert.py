"""Weights in torch's layout become mechjax params that compute the same function (checked against
formulas written out in NumPy here; tests/test_docs.py checks against torch itself where it is
installed)."""

import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.models import BilinearNet
from mechjax.models import TwoLayer
from mechjax.models import convert


def _bilinear_state_dict(rng, inputs=5, d=6, hidden=7, outputs=3, depth=2, bias=True):
  sd = {"embed.weight": rng.normal(size=(d, inputs)), "head.weight": rng.normal(size=(outputs, d))}
  for i in range(depth):
    for side in ("left", "right"):
      sd[f"blocks.{i}.{side}.weight"] = rng.normal(size=(hidden, d)) / np.sqrt(d)
      if bias:
        sd[f"blocks.{i}.{side}.bias"] = rng.normal(size=hidden)
    sd[f"blocks.{i}.out.weight"] = rng.normal(size=(d, hidden)) / np.sqrt(hidden)
  return {k: v.astype(np.float32) for k, v in sd.items()}


def _bilinear_by_hand(sd, x, depth):
  h = x @ sd["embed.weight"].T
  for i in range(depth):
    p = f"blocks.{i}"
    left = h @ sd[f"{p}.left.weight"].T + sd.get(f"{p}.left.bias", 0.0)
    right = h @ sd[f"{p}.right.weight"].T + sd.get(f"{p}.right.bias", 0.0)
    h = h + (left * right) @ sd[f"{p}.out.weight"].T
  return h @ sd["head.weight"].T


@pytest.mark.parametrize("bias", [False, True])
def test_bilinear_net_computes_the_torch_layout_formula(bias):
  rng = np.random.default_rng(0)
  sd = _bilinear_state_dict(rng, bias=bias)
  x = rng.normal(size=(9, 5)).astype(np.float32)
  net = BilinearNet(features=3, d_model=6, hidden=7, depth=2, use_bias=bias)
  out = net.apply({"params": convert.bilinear_net_params(sd)}, jnp.asarray(x))
  np.testing.assert_allclose(out, _bilinear_by_hand(sd, x, 2), rtol=1e-4, atol=1e-4)


def test_safetensors_and_npz_files_load_the_same_arrays(tmp_path):
  safetensors_numpy = pytest.importorskip("safetensors.numpy")
  sd = _bilinear_state_dict(np.random.default_rng(1))
  np.savez(tmp_path / "w.npz", **sd)
  safetensors_numpy.save_file(sd, str(tmp_path / "w.safetensors"))
  for name in ("w.npz", "w.safetensors"):
    loaded = convert.load_state_dict(tmp_path / name)
    assert sorted(loaded) == sorted(sd)
    for k in sd:
      np.testing.assert_array_equal(loaded[k], sd[k])


def test_missing_keys_and_wrong_shapes_are_named():
  sd = {"0.weight": np.zeros((16, 4)), "0.bias": np.zeros(16), "2.weight": np.zeros((1, 16))}
  with pytest.raises(KeyError, match=r"no '2.bias'"):
    convert.two_layer_params(sd)
  with pytest.raises(ValueError, match=r"state_dict\['2.weight'\] has shape \(2, 16\)"):
    convert.two_layer_params({**sd, "2.weight": np.zeros((2, 16)), "2.bias": np.zeros(1)})
  with pytest.raises(ValueError, match=r"expected a .npz, .safetensors, .pt or .pth file"):
    convert.load_state_dict("weights.h5")


def test_two_layer_params_apply():
  rng = np.random.default_rng(2)
  sd = {
    "0.weight": rng.normal(size=(8, 3)),
    "0.bias": rng.normal(size=8),
    "2.weight": rng.normal(size=(1, 8)),
    "2.bias": rng.normal(size=1),
  }
  x = rng.normal(size=(4, 3)).astype(np.float32)
  out = TwoLayer(width=8, activation="tanh").apply(
    {"params": convert.two_layer_params(sd)}, jnp.asarray(x)
  )
  by_hand = np.tanh(x @ sd["0.weight"].T + sd["0.bias"]) @ sd["2.weight"].T + sd["2.bias"]
  np.testing.assert_allclose(out, by_hand[:, 0], rtol=1e-4, atol=1e-5)
