"""Sweeps: building, hashing, the local backend (kill and re-run, failures), aggregation, and the
commands the TPU VM and SLURM backends generate."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from launch import lib
from launch import slurm
from launch import tpu_vm
from mechjax import config
from mechjax import studies
from tests.helpers import ROOT
from tests.helpers import check_report
from tests.helpers import run_module

# A stand-in experiment with the same contract as the real ones (resume a workdir, skip a finished
# one, write summary.json), cheap enough to run many times: it "trains" for --steps steps of
# --step_seconds, keeping a checkpoint file, and records every start in runs.txt.
FAKE = textwrap.dedent("""
    import argparse, json, os, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--workdir")
    p.add_argument("--x", type=float)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--step_seconds", type=float, default=0.0)
    p.add_argument("--fail", default="no")
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    if os.path.exists(os.path.join(a.workdir, "summary.json")):
      sys.exit(0)
    ck = os.path.join(a.workdir, "checkpoint")
    start = int(open(ck).read()) if os.path.exists(ck) else 0
    with open(os.path.join(a.workdir, "runs.txt"), "a") as f:
      f.write(f"start {start}\\n")
    if a.fail == "yes":
      print("something went wrong in this member", file=sys.stderr)
      sys.exit(3)
    for step in range(start, a.steps):
      time.sleep(a.step_seconds)
      open(ck, "w").write(str(step + 1))
    summary = {"y": a.x ** 2, "nested": {"steps": a.steps}}
    json.dump(summary, open(os.path.join(a.workdir, "summary.json"), "w"))
""")


@pytest.fixture
def fake(tmp_path, monkeypatch):
  pkg = tmp_path / "fakepkg"
  pkg.mkdir()
  (pkg / "fake_experiment.py").write_text(FAKE)
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pkg), ROOT]))
  monkeypatch.syspath_prepend(str(pkg))
  return "fake_experiment"


def _sweep_file(path, experiment, members, figure=None):
  path.write_text(
    f"EXPERIMENT = {experiment!r}\nFIGURE = {figure!r}\n\ndef get_sweep():\n  return {members!r}\n"
  )
  return str(path)


def test_product_zipped_and_stable_ids():
  assert lib.product(a=[1, 2], b=["x"]) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
  assert lib.zipped(a=[1, 2], b=[3, 4]) == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
  assert lib.with_all([{"a": 1}, {"a": 2, "c": 0}], c=5) == [{"a": 1, "c": 5}, {"a": 2, "c": 0}]
  with pytest.raises(lib.SweepError, match="equal lengths"):
    lib.zipped(a=[1, 2], b=[3])
  m1 = lib.Member("experiments.fourier_phase", {"a": 1, "b": [1, 2], "c": True})
  m2 = lib.Member("experiments.fourier_phase", {"c": True, "b": [1, 2], "a": 1})
  assert m1.id == m2.id == "b76361f999e4"  # stable across processes and flag order
  assert m1.id != lib.Member("experiments.fourier_phase", {"a": 2, "b": [1, 2], "c": True}).id
  assert m1.args("R") == ["--a=1", "--b=1,2", "--c", f"--workdir={os.path.join('R', m1.id)}"]
  assert lib.flag_arg("c", False) == "--noc"


@pytest.mark.parametrize(
  "body, message",
  [
    ("def get_sweep():\n  return [{}]\n", "EXPERIMENT must be"),
    (
      "EXPERIMENT = 'experiments.no_such_thing'\ndef get_sweep():\n  return [{}]\n",
      "not an importable module",
    ),
    ("EXPERIMENT = 'experiments.fourier_phase'\n", "define get_sweep"),
    ("EXPERIMENT = 'experiments.fourier_phase'\ndef get_sweep():\n  return []\n", "non-empty list"),
    (
      "EXPERIMENT = 'experiments.fourier_phase'\ndef get_sweep():\n  return [{'workdir': 'x'}]\n",
      "launcher owns",
    ),
    (
      "EXPERIMENT = 'experiments.fourier_phase'\ndef get_sweep():\n  return [{'a': 1}, {'a': 1}]\n",
      "appears twice",
    ),
    (
      "EXPERIMENT = 'experiments.fourier_phase'\ndef get_sweep():\n  return [{'a': None}]\n",
      "member 0, flag 'a'",
    ),
  ],
)
def test_malformed_sweep_files_are_refused(tmp_path, body, message):
  path = tmp_path / "s.py"
  path.write_text(body)
  with pytest.raises(lib.SweepError, match=message):
    lib.load_sweep(str(path))


def test_a_figure_function_draws_the_sweep_s_figure_from_its_rows(tmp_path):
  path = tmp_path / "s.py"
  path.write_text(
    "EXPERIMENT = 'experiments.fourier_phase'\n"
    "def get_sweep():\n  return [{'alpha': 0.0}, {'alpha': 2.0}]\n"
    "def FIGURE(root, rows):\n"
    "  with open(root + '/results.png', 'w') as f:\n"
    "    f.write(','.join(r['state'] for r in rows))\n"
  )
  _, members, figure = lib.load_sweep(str(path))
  assert callable(figure)
  lib.aggregate(str(tmp_path), members, {members[0].id: "done"}, figure)
  assert (tmp_path / "results.png").read_text() == "done,pending"
  path.write_text(
    path.read_text().replace("def FIGURE(root, rows)", "FIGURE = 3\ndef f(root, rows)")
  )
  with pytest.raises(lib.SweepError, match="or a function"):
    lib.load_sweep(str(path))


def test_shipped_sweep_files_load():
  folder = os.path.join(ROOT, "launch", "sweeps")
  names = sorted(f for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")
  assert names
  for name in names:
    experiment, members, _ = lib.load_sweep(os.path.join(folder, name))
    assert experiment.startswith(("experiments.", "theory.", "benchmarks.")) and members, name
    unknown = {k for m in members for k in m.flags} - _defined_flags(experiment)
    assert not unknown, (name, unknown)


def _defined_flags(module: str) -> set[str]:
  """The flags a module defines, read without importing it (importing every experiment into one
  process would define their flags twice): an experiment's come from its study's Config, a script's
  from its DEFINE_ calls."""
  with open(os.path.join(ROOT, *module.split(".")) + ".py") as f:
    source = f.read()
  names = re.findall(r"from mechjax\.studies(?:\.\w+)? import (\w+)", source)
  if module.startswith("experiments."):
    assert len(names) == 1, module
    study = studies.find(names[0])
    return {"workdir", "overwrite"} | {s.flag for s in config.flat_specs(study.Config) if s.flag}
  return set(re.findall(r'DEFINE_\w+\(\s*"(\w+)"', source))


def _launch(sweep, root, *extra, **kwargs):
  return subprocess.Popen(
    [sys.executable, "-m", "launch.sweep", f"--sweep={sweep}", f"--root={root}", *extra],
    cwd=ROOT,
    env={**os.environ},
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
    **kwargs,
  )


@pytest.mark.slow
def test_local_sweep_killed_midway_resumes_without_redoing_finished_members(tmp_path, fake):
  members = [{"x": float(i), "steps": 6, "step_seconds": 0.25} for i in range(4)]
  sweep = _sweep_file(tmp_path / "sweep.py", fake, members, figure={"x": "x", "y": "y"})
  root = tmp_path / "root"
  ids = [lib.Member(fake, m).id for m in members]
  proc = _launch(sweep, root, "--parallel=1")
  # Wait until the first member is done and the second has a checkpoint, then kill the launcher
  # (-9).
  deadline = time.time() + 120
  while time.time() < deadline:
    if (root / ids[0] / "summary.json").exists() and (root / ids[1] / "checkpoint").exists():
      break
    time.sleep(0.05)
  else:
    proc.kill()
    pytest.fail(f"the sweep did not get going: {proc.communicate()[0]}")
  os.kill(proc.pid, signal.SIGKILL)
  proc.communicate()  # waits, and closes the pipe
  time.sleep(0.5)  # the member is killed with its launcher (PR_SET_PDEATHSIG)
  assert not (root / ids[3] / "summary.json").exists()

  again = _launch(sweep, root, "--parallel=2")
  out = again.communicate(timeout=120)[0]
  assert again.returncode == 0, out
  # The finished member was not run again; the interrupted one resumed from its checkpoint.
  assert (root / ids[0] / "runs.txt").read_text() == "start 0\n"
  starts = (root / ids[1] / "runs.txt").read_text().split()
  assert starts[:2] == ["start", "0"] and len(starts) == 4 and int(starts[3]) > 0, starts
  rows = json.loads((root / "results.json").read_text())
  assert [r["id"] for r in rows] == ids and all(r["state"] == "done" for r in rows)
  assert [r["y"] for r in rows] == [0.0, 1.0, 4.0, 9.0] and rows[0]["nested.steps"] == 6
  header = (root / "results.csv").read_text().splitlines()[0].split(",")
  assert {"id", "state", "flag.x", "y", "nested.steps"} <= set(header)
  assert (root / "results.png").stat().st_size > 0
  assert "sweep: pending 0 | running 0 | done 4 | failed 0" in out


@pytest.mark.slow
def test_a_failing_member_is_reported_and_the_others_complete(tmp_path, fake):
  members = [{"x": 1.0}, {"x": 2.0, "fail": "yes"}, {"x": 3.0}, {"x": 4.0}]
  sweep = _sweep_file(tmp_path / "sweep.py", fake, members)
  root = tmp_path / "root"
  r = run_module("launch.sweep", f"--sweep={sweep}", f"--root={root}", "--parallel=2", timeout=120)
  assert r.returncode == 1, r.stdout + r.stderr
  bad = lib.Member(fake, members[1]).id
  assert (
    f"{bad}: failed (exit status 3)" in r.stdout
    and "something went wrong in this member" in r.stdout
  )
  assert f"1 member(s) failed: {bad}" in r.stderr
  rows = {row["id"]: row for row in json.loads((root / "results.json").read_text())}
  assert (
    rows[bad]["state"] == "failed" and sum(row["state"] == "done" for row in rows.values()) == 3
  )


@pytest.mark.slow
def test_a_real_experiment_in_a_sweep(tmp_path):
  """One real member (aggregated from its summary.json) and one with a bad flag (failed, others
  unaffected)."""
  small = {
    "tasks": "amplitude",
    "width": 8,
    "eval_samples": 64,
    "num_seeds": 1,
    "batch_size": 16,
    "steps": 40,
    "log_every": 20,
    "checkpoint_every": 40,
  }
  sweep = _sweep_file(
    tmp_path / "sweep.py", "experiments.fourier_phase", [small, {**small, "steps": 0}]
  )
  root = tmp_path / "root"
  r = run_module("launch.sweep", f"--sweep={sweep}", f"--root={root}", timeout=300)
  assert r.returncode == 1
  rows = json.loads((root / "results.json").read_text())
  assert [row["state"] for row in rows] == ["done", "failed"]
  assert 0 <= rows[0]["conditions.amplitude_alpha0_vs_1.final_test_acc_mean"] <= 1
  assert "--steps=0: must be an integer >= 1" in r.stdout
  # The root's report links the finished member's own report, and only that one.
  page = (root / "report.html").read_text()
  links = re.findall(r'href="([^"]+/report\.html)"', page)
  assert links == [f"{rows[0]['id']}/report.html"] and (root / links[0]).exists()
  assert "1 done" in page and "1 failed" in page
  check_report(root / rows[0]["id"])


@pytest.mark.slow
def test_a_check_that_only_prints_gets_its_verdict_recorded(tmp_path, fake):
  (tmp_path / "fakepkg" / "fake_check.py").write_text(
    "import sys\nseed = int(sys.argv[1].split('=')[1])\nprint('check 1 ...')\nprint('PASS' if seed "
    "else 'FAIL')\nsys.exit(0 if seed else 1)\n"
  )
  sweep = tmp_path / "sweep.py"
  sweep.write_text(
    "EXPERIMENT = 'fake_check'\nOUTPUT_FLAG = None\n\ndef get_sweep():\n  return [{'seed': 0}, "
    "{'seed': 1}]\n"
  )
  root = tmp_path / "root"
  r = run_module("launch.sweep", f"--sweep={sweep}", f"--root={root}", timeout=120)
  assert r.returncode == 1  # the FAIL member
  rows = json.loads((root / "results.json").read_text())
  assert [row["state"] for row in rows] == ["failed", "done"]
  assert rows[1]["verdict"] == "PASS" and "check 1" in rows[1]["output_tail"]
  m = lib.Member("fake_check", {"seed": 1}, None, lib.LAUNCH_RESULT)
  assert m.args(str(root)) == ["--seed=1"]  # no output flag


@pytest.mark.slow
def test_tpu_vm_dry_run_prints_setup_and_one_command_per_member(tmp_path):
  sweep = _sweep_file(
    tmp_path / "sweep.py", "experiments.fourier_phase", [{"seed": 0}, {"seed": 1, "alpha": [0, 2]}]
  )
  r = run_module(
    "launch.sweep",
    f"--sweep={sweep}",
    "--root=/data/sw",
    "--backend=tpu_vm",
    "--tpu_name=pod-16",
    "--zone=us-west4-a",
    "--project=proj",
    "--repo=https://example.org/mechjax.git",
    "--dry_run",
  )
  assert r.returncode == 0, r.stderr
  lines = [shlex.split(line) for line in r.stdout.splitlines() if line.startswith("gcloud ")]
  assert len(lines) == 3
  for cmd in lines:
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod-16"]
    assert "--zone=us-west4-a" in cmd and "--project=proj" in cmd and "--worker=all" in cmd
  setup = lines[0][-1].removeprefix("--command=")
  assert "git clone https://example.org/mechjax.git mechjax" in setup
  # The environment is uv's, with Python >= 3.11 whatever the image ships, and the pinned stack is
  # installed into it, not into the system python3.
  assert "uv venv --allow-existing --python '>=3.11' mechjax/.venv" in setup
  venv = "--python mechjax/.venv/bin/python"
  assert f"pip install {venv} 'jax[tpu]=={tpu_vm.jax_version()}'" in setup
  assert f"pip install {venv} -r mechjax/requirements.txt" in setup
  assert "assert sys.version_info >= (3, 11)" in setup
  assert "python3 -m pip install -r" not in setup
  m = lib.Member("experiments.fourier_phase", {"seed": 1, "alpha": [0, 2]})
  run = lines[2][-1].removeprefix("--command=")
  assert run == (
    "cd mechjax && MECHJAX_DISTRIBUTED=1 .venv/bin/python -m experiments.fourier_phase --alpha=0,2 "
    f"--seed=1 --workdir=/data/sw/{m.id}"
  )
  missing = run_module(
    "launch.sweep", f"--sweep={sweep}", "--root=/data/sw", "--backend=tpu_vm", "--dry_run"
  )
  assert missing.returncode == 2 and "needs --tpu_name, --zone, --repo" in missing.stderr


# submitit's debug executor leaves its job's log file open, which Python reports when it is freed.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.slow
def test_slurm_dry_run_and_a_debug_array(tmp_path, fake):
  sweep = _sweep_file(tmp_path / "sweep.py", fake, [{"x": 1.0}, {"x": 2.0}])
  root = tmp_path / "root"
  r = run_module(
    "launch.sweep",
    f"--sweep={sweep}",
    f"--root={root}",
    "--backend=slurm",
    "--partition=gpu",
    "--gpus_per_node=2",
    "--dry_run",
  )
  assert r.returncode == 0, r.stderr
  assert (
    "slurm_partition='gpu'" in r.stdout
    and "gpus_per_node=2" in r.stdout
    and "job array of 2 task(s)" in r.stdout
  )
  for x in ("1.0", "2.0"):
    m = lib.Member(fake, {"x": float(x)})
    assert f"python3 -m {fake} --x={x} --workdir={root / m.id}" in r.stdout
  # The same array through submitit's debug executor (in this process, no cluster).
  members = [lib.Member(fake, {"x": 1.0}), lib.Member(fake, {"x": 2.0})]
  jobs = slurm.submit(members, str(root), {}, executor="debug")
  assert [j.result() for j in jobs] == [0, 0]
  assert [json.loads((root / m.id / "summary.json").read_text())["y"] for m in members] == [
    1.0,
    4.0,
  ]


def test_slurm_parameters_reach_the_batch_script_through_submitit(tmp_path, monkeypatch):
  # submitit's own SLURM executor, submitting to a stand-in sbatch that keeps the batch script.
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "sbatch").write_text(
    '#!/bin/sh\ncp "$1" "$SBATCH_COPY"\necho Submitted batch job 4242\n'
  )
  (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
  for tool in ("sbatch", "srun"):
    os.chmod(bin_dir / tool, 0o755)
  monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  monkeypatch.setenv("SBATCH_COPY", str(tmp_path / "script.sh"))
  params = slurm.parameters(
    partition="gpu",
    timeout_min=90,
    gpus_per_node=4,
    cpus_per_task=8,
    array_parallelism=1,
    job_name="mechjax-fourier_phase",
    account="my-lab",
    qos="high",
    mem="64G",
    constraint="a100",
    setup=["module load cuda/12.4", "export FOO=1"],
    additional=slurm.parse_params(["reservation=r1"]),
    nodes=2,
    tasks_per_node=4,
  )
  members = [lib.Member("experiments.fourier_phase", {"seed": s}) for s in (0, 1)]
  jobs = slurm.submit(members, str(tmp_path / "root"), params, executor="slurm")
  assert len(jobs) == 2 and jobs[0].job_id.startswith("4242")
  script = (tmp_path / "script.sh").read_text()
  for line in (
    "#SBATCH --account=my-lab",
    "#SBATCH --qos=high",
    "#SBATCH --mem=64G",
    "#SBATCH --constraint=a100",
    "#SBATCH --partition=gpu",
    "#SBATCH --nodes=2",
    "#SBATCH --ntasks-per-node=4",
    "#SBATCH --gpus-per-node=4",
    "#SBATCH --time=90",
    "#SBATCH --array=0-1%1",
    "#SBATCH --reservation=r1",
  ):
    assert line in script, (line, script)
  assert script.index("module load cuda/12.4") < script.index("srun")
  assert "export FOO=1" in script


def test_a_multi_task_member_runs_under_jax_distributed():
  check = [
    sys.executable,
    "-c",
    "import os, sys; sys.exit(os.environ.get('MECHJAX_DISTRIBUTED') != '1')",
  ]
  assert slurm.run_member(check, distributed=True) == 0
  with pytest.raises(RuntimeError, match="exit status 1"):
    slurm.run_member(check, distributed=False)
  assert slurm.is_distributed({"nodes": 2, "tasks_per_node": 1})
  assert not slurm.is_distributed({"nodes": 1, "tasks_per_node": 1})


@pytest.mark.slow
def test_slurm_dry_run_shows_account_qos_and_multi_node_members(tmp_path):
  sweep = _sweep_file(tmp_path / "sweep.py", "experiments.fourier_phase", [{"seed": 0}])
  args = [f"--sweep={sweep}", f"--root={tmp_path / 'root'}", "--backend=slurm", "--dry_run"]
  r = run_module(
    "launch.sweep",
    *args,
    "--account=my-lab",
    "--qos=high",
    "--mem=64G",
    "--slurm_setup=module load cuda",
    "--slurm_param=reservation=r1",
    "--nodes=2",
    "--tasks_per_node=4",
  )
  assert r.returncode == 0, r.stderr
  for shown in (
    "slurm_account='my-lab'",
    "slurm_qos='high'",
    "slurm_mem='64G'",
    "slurm_setup=['module load cuda']",
    "slurm_additional_parameters={'reservation': 'r1'}",
    "nodes=2",
    "tasks_per_node=4",
    "MECHJAX_DISTRIBUTED=1",
  ):
    assert shown in r.stdout, (shown, r.stdout)
  bad = run_module("launch.sweep", *args, "--slurm_param=reservation")
  assert bad.returncode == 2 and "is not key=value" in bad.stderr
