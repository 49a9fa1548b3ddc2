"""The seed axis sharded over devices with a Mesh gives the run of one device, and a learning-rate
sweep in one sharded program gives the lone runs (8 CPU devices, in a subprocess, because the device
count is fixed when JAX starts)."""

import json
import subprocess
import sys
import textwrap

import pytest

from mechjax.train import distributed
from tests.helpers import ROOT
from tests.helpers import compile_setting

SCRIPT = textwrap.dedent("""
    import json, sys, tempfile
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import numpy as np, optax
    from mechjax.train import distributed, loop
    from tests.toy_problem import linear_problem

    problem = linear_problem()
    keys = loop.seed_keys(0, 8)
    out = {"devices": len(jax.devices())}
    with tempfile.TemporaryDirectory() as d:
      kw = dict(keys=keys, log_every=20, checkpoint_every=40, progress=False)
      a = loop.train(problem, optax.adam(0.1), steps=60, workdir=d + "/a", shard_seeds=True, **kw)
      b = loop.train(problem, optax.adam(0.1), steps=60, workdir=d + "/b", shard_seeds=False, **kw)
      out["sharded_over"] = len(a.state["params"]["w"].sharding.device_set)
      out["unsharded_over"] = len(b.state["params"]["w"].sharding.device_set)
      w_a, w_b = np.asarray(a.state["params"]["w"]), np.asarray(b.state["params"]["w"])
      out["max_param_diff"] = float(np.max(np.abs(w_a - w_b)))
      out["max_err_diff"] = max(float(np.max(np.abs(np.asarray(x["err"]) - np.asarray(y["err"]))))
                                for x, y in zip(a.history, b.history))
      out["final_err"] = float(np.max(a.history[-1]["err"]))
      # resumed at 60
      c = loop.train(problem, optax.adam(0.1), steps=80, workdir=d + "/a", shard_seeds=True, **kw)
      out["resumed_from"] = c.resumed_from
      out["resumed_over"] = len(c.state["params"]["w"].sharding.device_set)
      # A learning-rate sweep as one sharded program: member i equals a lone run at rate i.
      lrs = [0.01 * 2 ** i for i in range(8)]
      opt = optax.inject_hyperparams(optax.adam)(learning_rate=0.0)
      swept = loop.train(problem, opt, steps=40, workdir=d + "/lr", shard_seeds=True,
                         hyperparams={"learning_rate": lrs}, **{**kw, "keys": keys})
      w = np.asarray(swept.state["params"]["w"])
      lone = lambda i: np.asarray(loop.train(
          problem, optax.adam(lrs[i]), keys=keys[i:i + 1], steps=40, workdir=d + f"/lone{i}",
          log_every=20, checkpoint_every=40, progress=False).state["params"]["w"][0])
      out["lr_sweep_vs_lone"] = float(max(np.max(np.abs(w[i] - lone(i))) for i in (0, 7)))
      out["lr_sweep_spread"] = float(np.max(np.abs(w[0] - w[7])))
      try:
        loop.train(problem, optax.adam(0.1), steps=40, workdir=d + "/bad",
                   hyperparams={"learning_rate": lrs}, **kw)
      except ValueError as e:
        out["not_injected"] = str(e)
      try:
        distributed.seed_sharding(6, True)
      except ValueError as e:
        out["indivisible"] = str(e)
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_sharded_seeds_equal_the_unsharded_run():
  done = subprocess.run(
    [sys.executable, "-c", SCRIPT],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin", **compile_setting()},
  )
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert out["devices"] == 8 and out["sharded_over"] == 8 and out["unsharded_over"] == 1
  assert out["max_param_diff"] < 1e-5 and out["max_err_diff"] < 1e-5, out  # float rounding only
  assert out["final_err"] < 4.0  # it trained (from |w_true| = 5.5)
  assert out["resumed_from"] == 60 and out["resumed_over"] == 8
  assert "cannot shard 6 seeds over 8 devices" in out["indivisible"]
  assert out["lr_sweep_vs_lone"] < 1e-5 and out["lr_sweep_spread"] > 0.1, out
  assert "not injected into the optimizer" in out["not_injected"]


def test_one_device_never_shards():
  assert distributed.seed_sharding(8, True) is None and distributed.seed_sharding(8, None) is None


def test_the_model_axis_splits_large_leaves_along_a_divisible_dimension():
  import jax
  import jax.numpy as jnp
  from jax.sharding import AbstractMesh
  from jax.sharding import PartitionSpec as P

  from mechjax import sharding

  assert sharding.model_axis_spec((64, 256), 4) == P(None, "model")  # the largest divisible
  assert sharding.model_axis_spec((256, 64), 4) == P("model")
  assert sharding.model_axis_spec((96, 96), 4) == P("model")  # equal ones: the first
  assert sharding.model_axis_spec((90, 101), 4) == P()  # nothing divisible: replicated
  assert sharding.model_axis_spec((16,), 4) == P()  # small: replicated
  assert sharding.model_axis_spec((6, 4096), 4, axis="m") == P(None, "m")
  with pytest.raises(ValueError, match="model_size must be >= 1; got 0"):
    sharding.model_axis_spec((64, 64), 0)
  params = {"w": jax.ShapeDtypeStruct((48, 512), jnp.float32), "b": jnp.zeros(512)}
  mesh = AbstractMesh((2, 4), ("chains", "model"))
  shardings = sharding.model_axis_shardings(params, mesh)
  assert shardings["w"].shard_shape((48, 512)) == (48, 128)  # 1/4 of the leaf on each device
  assert shardings["b"].shard_shape((512,)) == (512,)  # small: whole on every device
  no_model = sharding.model_axis_shardings(params, AbstractMesh((8,), ("chains",)))
  assert no_model["w"].shard_shape((48, 512)) == (48, 512)


def test_a_sampler_mesh_is_put_in_chains_model_order_and_bad_ones_are_refused():
  import jax
  import numpy as np
  from jax.sharding import Mesh

  from mechjax import sharding

  one = np.array(jax.devices()[:1])
  swapped = sharding.sampler_mesh(Mesh(one.reshape(1, 1), ("model", "chains")), 4)
  assert swapped.axis_names == ("chains", "model") and swapped.devices.shape == (1, 1)
  assert sharding.sampler_mesh(Mesh(one, ("model",))).axis_names == ("chains", "model")
  assert sharding.model_size(None) == 1 and sharding.model_size(swapped) == 1
  assert sharding.model_constraint(swapped) is None  # nothing to split
  with pytest.raises(ValueError, match=r"named 'chains' and 'model' .* got \('data',\)"):
    sharding.sampler_mesh(Mesh(one, ("data",)))
  with pytest.raises(TypeError, match="mesh must be a jax.sharding.Mesh; got tuple"):
    sharding.sampler_mesh((1, 8))


def test_a_studys_model_axis_of_one_is_no_mesh_and_a_bad_one_is_refused():
  from mechjax import sharding

  assert sharding.devices_mesh(1, 4) is None
  with pytest.raises(ValueError, match="model_axis=2 must divide the 1 devices and leave a chains"):
    sharding.devices_mesh(2, 4)
