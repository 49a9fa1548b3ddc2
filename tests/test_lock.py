"""The lock check that .ci/run applies to a fresh install (.ci/check_lock.py)."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def check_lock():
  spec = importlib.util.spec_from_file_location("check_lock", ROOT / ".ci" / "check_lock.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_pins_reads_names_versions_and_markers(check_lock):
  text = (
    "# comment\njax==0.10.2\nPyYAML==6.0.4  # why\n"
    "uvloop==0.23.0; platform_system != 'Windows'\n-e .\n"
  )
  assert check_lock.pins(text) == {"jax": "0.10.2", "pyyaml": "6.0.4", "uvloop": "0.23.0"}


def test_unpinned_and_moved_packages_are_reported(check_lock):
  pinned = {"jax": "0.10.2", "pyyaml": "6.0.4"}
  installed = {
    "jax": "0.10.2",
    "PyYAML": "6.0.5",
    "rich": "15.0.0",
    "pip": "25.0",
    "setuptools": "80",
  }
  found = check_lock.problems(installed, pinned)
  assert len(found) == 2, found
  assert "PyYAML is installed at 6.0.5 but requirements.txt pins 6.0.4" in found
  assert "rich==15.0.0 is installed but requirements.txt does not pin it" in found
  assert (
    check_lock.problems({"jax": "0.10.2", "py_yaml": "1"}, {"jax": "0.10.2", "py-yaml": "1"}) == []
  )


def test_main_fails_on_an_incomplete_lock(check_lock, tmp_path, capsys):
  # This interpreter holds pytest, which an empty lock does not pin.
  empty = tmp_path / "requirements.txt"
  empty.write_text("# nothing pinned\n")
  assert check_lock.main(["check_lock.py", str(empty)]) == 1
  assert "pytest==" in capsys.readouterr().err


def test_ci_checks_the_fresh_install_before_installing_mechjax():
  lines = [s for s in (ROOT / ".ci" / "run").read_text().splitlines() if not s.startswith("#")]
  install = next(
    i
    for i, s in enumerate(lines)
    if 'venv/bin/python" -m pip install' in s and "-r requirements.txt" in s
  )
  check = next(i for i, s in enumerate(lines) if "check_lock.py requirements.txt" in s)
  package = next(i for i, s in enumerate(lines) if "--no-deps ." in s)
  assert install < check < package
  assert "|| {" in lines[check] or "|| exit 1" in lines[check]
