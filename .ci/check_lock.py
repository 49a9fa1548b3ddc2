"""Checks that requirements.txt is a complete lock for the environment a fresh install made.

    python .ci/check_lock.py requirements.txt   # with the venv's own interpreter, right after
                                                # `pip install -r requirements.txt` into it

Every distribution installed in the running interpreter's environment must be pinned in the
requirements file (``name==version``) at exactly the installed version; the installers themselves
(pip, setuptools, wheel) are not part of the lock. Prints one line per problem and exits 1 when
there is any, so a new transitive dependency, or one whose version moved, fails CI instead of
entering the lock unseen.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

INSTALLERS = frozenset({"pip", "setuptools", "wheel"})
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def normalize(name: str) -> str:
  """A distribution name in PEP 503's normal form (``PyYAML`` and ``pyyaml`` are one name)."""
  return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
  """The ``name==version`` lines of a requirements file, by normalized name."""
  out = {}
  for line in text.splitlines():
    match = _PIN.match(line.split("#", 1)[0].strip())
    if match:
      out[normalize(match.group(1))] = match.group(2)
  return out


def problems(installed: dict[str, str], pinned: dict[str, str]) -> list[str]:
  """One line for each installed distribution that the lock does not pin, or pins at another
  version. ``installed`` maps names (any spelling) to versions."""
  out = []
  for name, version in sorted(installed.items(), key=lambda kv: normalize(kv[0])):
    key = normalize(name)
    if key in INSTALLERS:
      continue
    if key not in pinned:
      out.append(f"{name}=={version} is installed but requirements.txt does not pin it")
    elif pinned[key] != version:
      out.append(f"{name} is installed at {version} but requirements.txt pins {pinned[key]}")
  return out


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print("usage: python .ci/check_lock.py REQUIREMENTS_FILE", file=sys.stderr)
    return 2
  with open(argv[1]) as f:
    pinned = pins(f.read())
  installed = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions()}
  found = problems(installed, pinned)
  for line in found:
    print(f"CI: lock: {line}", file=sys.stderr)
  if found:
    return 1
  print(f"lock complete: {len(installed)} installed distributions, each pinned in {argv[1]}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
