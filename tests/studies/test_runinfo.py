"""Run metadata: every workdir records what it ran on, and a resume elsewhere warns."""

import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import pytest

import mechjax
from mechjax.studies import runinfo
from mechjax.studies import workdir as workdir_lib
from tests.helpers import ROOT


def test_a_new_workdir_records_versions_commit_devices_and_command(tmp_path):
  folder = str(tmp_path / "run")
  assert workdir_lib.prepare(folder, {"steps": 3}) is workdir_lib.Status.NEW
  with open(os.path.join(folder, "metadata.json")) as f:
    meta = json.load(f)
  assert meta["mechjax"]["version"] == mechjax.__version__
  if os.path.isdir(os.path.join(ROOT, ".git")):  # the tests run from a checkout
    assert re.fullmatch(r"[0-9a-f]{40}", meta["mechjax"]["commit"] or "")
    assert isinstance(meta["mechjax"]["dirty"], bool)
  packages = meta["packages"]
  assert packages["jax"] == jax.__version__
  assert set(packages) >= {"python", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint"}
  assert all(packages[k] for k in packages), packages
  devices = meta["devices"]
  assert devices["count"] == jax.device_count()
  assert devices["backend"] == jax.default_backend()
  assert devices["process_count"] == 1 and devices["kind"]
  assert meta["command"]["argv"] == sys.argv and meta["command"]["started"]
  assert meta["resumes"] == []


def test_a_resume_is_recorded_and_warns_only_on_a_difference(tmp_path, capsys):
  folder = str(tmp_path / "run")
  workdir_lib.prepare(folder, {"steps": 3})
  assert workdir_lib.prepare(folder, {"steps": 3}) is workdir_lib.Status.RESUME
  assert capsys.readouterr().err == ""  # same machine, same versions: silent
  path = os.path.join(folder, "metadata.json")
  with open(path) as f:
    meta = json.load(f)
  assert len(meta["resumes"]) == 1
  meta["devices"]["count"] += 3
  meta["packages"]["jax"] = "0.0.1"
  with open(path, "w") as f:
    json.dump(meta, f)
  workdir_lib.prepare(folder, {"steps": 3})
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err  # one line
  assert "warning" in err and "device count" in err and "jax 0.0.1 ->" in err
  with open(path) as f:
    assert len(json.load(f)["resumes"]) == 2


def test_a_finished_run_is_not_touched(tmp_path, capsys):
  folder = str(tmp_path / "run")
  workdir_lib.prepare(folder, {"steps": 3})
  pathlib.Path(folder, "summary.json").write_text("{}")
  before = pathlib.Path(folder, "metadata.json").read_text()
  assert workdir_lib.prepare(folder, {"steps": 3}) is workdir_lib.Status.COMPLETE
  assert pathlib.Path(folder, "metadata.json").read_text() == before


def test_differences_names_what_can_change_the_numbers():
  now = runinfo.collect()
  assert runinfo.differences(now, now) == []
  other = json.loads(json.dumps(now))
  other["devices"]["count"] = now["devices"]["count"] + 1
  other["command"]["argv"] = ["something", "else"]  # not a reason to warn
  assert runinfo.differences(other, now) == [
    f"device count {now['devices']['count'] + 1} -> {now['devices']['count']}"
  ]


_PREPARE = (
  "import sys, jax; jax.config.update('jax_num_cpu_devices', int(sys.argv[1]));"
  "from mechjax.studies import workdir; print(workdir.prepare(sys.argv[2], {'steps': 3}).value)"
)


@pytest.mark.slow
def test_resuming_on_another_device_count_warns_across_processes(tmp_path):
  folder = str(tmp_path / "run")
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}

  def prepare(devices):
    return subprocess.run(
      [sys.executable, "-c", _PREPARE, str(devices), folder],
      env=env,
      capture_output=True,
      text=True,
      check=True,
    )

  first = prepare(2)
  assert first.stdout.strip() == "new" and "warning" not in first.stderr
  same = prepare(2)
  assert same.stdout.strip() == "resume" and "warning" not in same.stderr
  other = prepare(1)
  assert other.stdout.strip() == "resume"
  assert "warning: resuming" in other.stderr and "device count 2 -> 1" in other.stderr
