"""Two local CPU processes (a coordinator on 127.0.0.1, 2 CPU devices each) train one seed-sharded
sweep: the result equals one process's, only process 0 writes metrics, and the run resumes across
both processes. Left unsharded, the state is replicated over both processes, with the same
result."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT
from tests.helpers import compile_setting

SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    pid, n, port, wd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    steps, shard = int(sys.argv[5]), n > 1 and sys.argv[6] == "shard"
    if n > 1:
      jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n,
                                 process_id=pid)
    import numpy as np, optax
    from mechjax.train import loop
    from tests.toy_problem import linear_problem

    problem = linear_problem()
    keys = loop.seed_keys(0, 8)
    r = loop.train(problem, optax.adam(0.1), keys=keys, steps=steps, workdir=wd, log_every=20,
                   checkpoint_every=20, progress=False, shard_seeds=shard)
    w = np.asarray(r.state["params"]["w"])  # whole, on every process
    kept = loop.checkpoint_params(problem, optax.adam(0.1), keys=keys, workdir=wd,
                                  steps=sorted({40, steps}), shard_seeds=shard)
    saved = kept[steps]["w"]
    if pid == 0:
      print(json.dumps({"devices": len(jax.devices()), "w": w.tolist(),
                        "w_at_40": np.asarray(kept[40]["w"]).tolist(),
                        "resumed_from": r.resumed_from,
                        "saved_equals_final": bool(np.array_equal(np.asarray(saved), w)),
                        "err": [np.asarray(h["err"]).tolist() for h in r.history]}))
""")


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _run(n, workdir, steps, shard="shard"):
  port = str(_free_port())
  path = os.environ.get("PATH", "/usr/bin:/bin")
  env = {"PYTHONPATH": ROOT, "PATH": path, **compile_setting()}
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", SCRIPT, str(i), str(n), port, str(workdir), str(steps), shard],
      cwd=ROOT,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(n)
  ]
  outs = [p.communicate(timeout=240) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return json.loads(outs[0][0].strip().splitlines()[-1])


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
  # One process runs 60 steps once: its checkpoint at 40 is the reference for the 40-step runs.
  one = _run(1, tmp_path / "one", 60)
  two = _run(2, tmp_path / "two", 40)
  assert one["devices"] == 2 and two["devices"] == 4 and two["saved_equals_final"]
  assert (
    two["w"] == one["w_at_40"] and two["err"] == one["err"][:2]
  )  # bitwise: each seed runs the same program (metrics at steps 20 and 40)
  lines = (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()
  assert [json.loads(line)["step"] for line in lines] == [20, 40]  # written once, by process 0
  # Both processes resume from the shared checkpoint, restored straight into the sharded layout.
  resumed = _run(2, tmp_path / "two", 60)
  assert resumed["resumed_from"] == 40 and resumed["w"] == one["w"]
  # Unsharded across processes: the state is replicated (a global array orbax can save), same
  # result.
  replicated = _run(2, tmp_path / "replicated", 40, shard="replicate")
  assert replicated["w"] == one["w_at_40"] and replicated["saved_equals_final"]
