"""The SLT calls on a (chains, model) mesh: the same estimates as one device, parameters split over
the model axis, and less memory per device as that axis grows (8 CPU devices, in a subprocess,
because the device count is fixed when JAX starts)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.helpers import ROOT

SCRIPT = textwrap.dedent("""
    import json, os
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh
    from mechjax import sharding, slt
    from mechjax.models import pretrained
    from mechjax.slt import sgld
    from mechjax.slt.settings import SGLDSettings

    # The tiny checkpoint's leaves have at most 2,048 entries: split those of 256 or more.
    sharding.MIN_MODEL_SHARDED = 256
    devs = jax.devices()
    mesh = lambda c, m: Mesh(np.array(devs[: c * m]).reshape(c, m), ("chains", "model"))
    # Both axes split (chains alone over devices: tests/slt/test_llc.py; the model axis alone is
    # placed below, where every leaf splits 8 ways).
    MESHES = [(2, 4)]
    out = {"devices": len(devs)}

    def per_sample(p, b):
      return jnp.mean((jnp.tanh(b["x"] @ p["w1"] + p["b1"][None]) @ p["w2"] - b["y"]) ** 2, -1)

    loss = lambda p, b: jnp.mean(per_sample(p, b))

    k = jax.random.split(jax.random.key(0), 3)
    params = {"w1": jax.random.normal(k[0], (8, 64)) / 3, "b1": jnp.zeros(64),
              "w2": jax.random.normal(k[1], (64, 16)) / 8}
    x = jax.random.normal(k[2], (128, 8))
    data = {"x": x, "y": jnp.tanh(x @ params["w1"]) @ params["w2"]}
    s = SGLDSettings(num_chains=8, num_draws=12, step_size=1e-4, localization=100.0,
                     batch_size=16)
    llc = lambda m: slt.estimate_llc(loss, params, data, key=jax.random.key(1), settings=s,
                                     mesh=m).llc_per_chain.tolist()
    # Each mesh is its own program: two threads compile and run them two at a time.
    from concurrent.futures import ThreadPoolExecutor
    ALL = [(1, 1), *MESHES]
    each = lambda f, meshes=ALL: dict(
        zip(map(str, meshes), ThreadPoolExecutor(2).map(lambda c: f(mesh(*c)), meshes)))
    out["llc"] = each(llc)

    probes = jax.tree.map(lambda a: a[:2], data)
    chi = lambda m: slt.estimate_susceptibilities(
        per_sample, params, data, probes, key=jax.random.key(0), num_chains=8, num_draws=6,
        step_size=1e-5, localization=100.0, batch_size=8, eval_size=32, mesh=m).chi.tolist()
    out["chi"] = each(chi)

    # Every split leaf holds 1/model of itself on each device: w* as placed (on the model axis
    # alone, and on both), and a chain's draws as an accumulator that keeps the running mean of w
    # sees them (on both axes).
    from tests.helpers import MeanDraw

    model, lm = pretrained.load(os.path.join("tests", "pretrained", "checkpoints", "llama_gqa"))
    fractions = {}
    for c, m in [(1, 8), (2, 4)]:
      trees = [("w*", sharding.place(lm, mesh(c, m)), 0)]
      if c > 1:
        trees.append(("draws", sgld.sample_chains(
            loss, params, data, jax.random.key(2), s, mesh=mesh(c, m), accumulator=MeanDraw()
        )["accumulated"], 1))
      for name, tree, lead in trees:
        for path, a in jax.tree_util.tree_flatten_with_path(tree)[0]:
          if a[(0,) * lead].size >= sharding.MIN_MODEL_SHARDED:
            frac = a.addressable_shards[0].data.size / a.size * (c if lead else 1)
            fractions.setdefault(f"{m}", []).append([name + jax.tree_util.keystr(path), frac])
    # What each chain's step constrains its draw, noise and preconditioner state to.
    with jax.set_mesh(mesh(2, 4)):
      y = jax.jit(sharding.model_constraint(mesh(2, 4)))(
          {"w": jnp.ones((16, 64)), "b": jnp.ones(8)})
    fractions["constraint"] = [[k, a.addressable_shards[0].data.size / a.size]
                               for k, a in y.items()]
    out["fractions"] = fractions

    # The compiled program's per-device argument bytes (w*, the data, the keys), by mesh: the
    # programs of the estimates above.
    out["argument_bytes"] = [
        sgld.chains_memory(loss, params, data, jax.random.key(1), s.resolved(128),
                           mesh=mesh(*cm)).argument_size_in_bytes for cm in ALL]
    out["study_mesh"] = dict(sharding.devices_mesh(4, 8).shape)
    errors = {}
    for name, bad in (("axes", Mesh(np.array(devs), ("data",))), ("chains", mesh(8, 1))):
      try:
        slt.estimate_llc(loss, params, data, key=jax.random.key(1), settings=s, num_chains=4,
                         mesh=bad)
      except ValueError as e:
        errors[name] = str(e)
    out["errors"] = errors
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_a_chains_by_model_mesh_gives_the_one_device_estimates_with_parameters_split():
  done = subprocess.run(
    [sys.executable, "-c", SCRIPT],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "PYTHONPATH": ROOT},
  )
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert out["devices"] == 8
  # Float tolerance: the partitioned matmuls and reductions round differently from one device's
  # (about 1e-7 relative per step), and twelve SGLD steps keep that small.
  one = np.array(out["llc"]["(1, 1)"])
  chi_one = np.array(out["chi"]["(1, 1)"])
  assert np.all(np.isfinite(one)) and np.all(np.abs(chi_one) > 0)
  assert list(out["llc"]) == ["(1, 1)", "(2, 4)"]
  np.testing.assert_allclose(out["llc"]["(2, 4)"], one, rtol=1e-4)
  assert list(out["chi"]) == ["(1, 1)", "(2, 4)"]
  np.testing.assert_allclose(
    out["chi"]["(2, 4)"], chi_one, rtol=1e-3, atol=1e-4 * abs(chi_one).max()
  )
  # Splitting over the model axis: 1/8 and 1/4 of every leaf large enough to split.
  assert dict(out["fractions"].pop("constraint")) == {"w": 1 / 4, "b": 1.0}
  assert {n[:2] for n, _ in out["fractions"]["8"]} == {"w*"}  # placed only
  assert {n[:2] for n, _ in out["fractions"]["4"]} == {"w*", "dr"}
  for m, rows in out["fractions"].items():
    assert len(rows) > 8, rows
    for name, frac in rows:
      assert frac == pytest.approx(1 / int(m)), (m, name, frac)
  args = out["argument_bytes"]
  assert args[0] - args[1] >= 3 / 4 * 4 * (512 + 1024), args  # 3/4 of w1 and w2 off each device
  assert out["study_mesh"] == {"chains": 2, "model": 4}
  assert "mesh axes must be named 'chains' and 'model'" in out["errors"]["axes"]
  assert "chains axis (8 devices) must divide the 4 chains" in out["errors"]["chains"]
