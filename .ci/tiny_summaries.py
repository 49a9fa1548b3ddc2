"""Runs every study at a tiny config and writes its summary without timings, for before/after diffs.

A refactor that should change no number shows it as "the summaries before and after differ in
nothing but timings"::

  python3 .ci/tiny_summaries.py OUT_DIR [--only=name1,name2]
  python3 .ci/tiny_summaries.py --compare DIR_A DIR_B

Run from the repository root (any folder works: the script puts its own checkout first on
``sys.path``). The first form runs each study of ``mechjax/studies/`` that exports a ``STUDY`` at
its tiny config, the one its end-to-end test runs (the ``TINY_CONFIGS`` of the test modules,
:func:`tests.helpers.tiny_configs`), ``module.STUDY.run(module.Config().replace(**tiny),
OUT_DIR/<study>, progress=False)``, each in a process of its own started from this script (the
hidden ``--one=NAME OUT_DIR``) so that the studies cannot affect one another; a study whose
``STUDY.cpu_cores_as_devices`` is set makes every CPU core a JAX device first, as the command line
does (:func:`mechjax.use_all_cpu_cores`). JAX runs with its default compile settings:
``JAX_DISABLE_MOST_OPTIMIZATIONS`` (which the tests set) is removed from the studies' environment;
everything else (``XLA_FLAGS``, ...) is inherited, so run the before and the after in the same
environment. It writes

* ``OUT_DIR/<study>/``: the study's workdir, removed first if it exists (a finished workdir would
  otherwise be read back, not recomputed);
* ``OUT_DIR/<study>.json``: its ``summary.json`` with the wall-clock timings dropped, as sorted JSON
  with indent 1;
* ``OUT_DIR/<study>.log``: the study process's output; ``OUT_DIR/_inputs/<study>/``: the inputs
  the pretrained studies read (a copy of tiny checkpoints from tests/pretrained/checkpoints/, a
  token corpus and a rotated checkpoint, made as tests/pretrained/test_studies.py makes them).

It prints each study's wall time and the total, and exits 1 if any study failed (2 if a study
module with a ``STUDY`` has no tiny config, or a tiny config names no study). The studies run
with OUT_DIR as their working directory and get their inputs as relative paths
(``_inputs/pretrained_polymorphism/llama_gqa``), so the paths that pretrained_polymorphism records
in its summary (``models.a.directory``) are the same in every OUT_DIR and every checkout.

Dropped from every summary: every key named ``"seconds"``, at any depth, which is the frame's
``summary["seconds"]`` (wall-clock seconds per stage and training run, and ``"total"``). It is the
only timing the studies write: among all the keys of the eleven summaries, the only other one whose
name contains "time", "eta", "sec", "elapsed", "dur", "wall" or "clock" is ``nbeta`` (nβ, the
sampler's inverse temperature times n; kept). Nothing else differs from run to run: two runs of
this script on the same checkout give identical files.

``--only=name1,name2`` runs just those studies, by name (e.g. ``tensor_similarity_backdoor``).

The second form prints a unified diff of ``DIR_A/<study>.json`` and ``DIR_B/<study>.json`` for every
study whose cleaned summary differs (or that only one folder has) and exits 1 if any does, 0 if
none. The comparison is of the JSON text, whose floats are the shortest repr that reads back
exactly, so a change in the last bit shows.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKPOINTS = os.path.join(ROOT, "tests", "pretrained", "checkpoints")
INPUTS = "_inputs"  # under OUT_DIR; the studies' working directory is OUT_DIR

# Keys dropped at any depth: wall-clock timings (see the module docstring).
TIMING_KEYS = frozenset({"seconds"})


def tiny_configs() -> dict[str, dict]:
  """Every study's tiny config, by study name: the ``TINY_CONFIGS`` that the test modules define,
  each the config of that module's end-to-end test (``tests.helpers.tiny_configs``)."""
  sys.path.insert(0, ROOT)
  from tests import helpers

  return helpers.tiny_configs()


def study_modules() -> list[str]:
  """The studies' names (:func:`mechjax.studies.all_studies`; a study's module name is its
  ``NAME``, which tests/studies/test_frame.py checks)."""
  sys.path.insert(0, ROOT)
  from mechjax import studies

  return sorted(studies.all_studies())


def clean(tree):
  """``tree`` without the keys in ``TIMING_KEYS``, at any depth."""
  if isinstance(tree, dict):
    return {k: clean(v) for k, v in tree.items() if k not in TIMING_KEYS}
  if isinstance(tree, list):
    return [clean(v) for v in tree]
  return tree


def dumps(tree) -> str:
  return json.dumps(tree, sort_keys=True, indent=1) + "\n"


def pretrained_inputs(name: str) -> dict:
  """The checkpoint and corpus settings of a pretrained study, as paths relative to OUT_DIR (the
  working directory), made under ``_inputs/`` as tests/pretrained/test_studies.py makes them."""
  import jax
  import numpy as np

  from mechjax.align import haar
  from mechjax.data import tokens
  from mechjax.models import pretrained

  folder = os.path.join(INPUTS, name)
  shutil.rmtree(folder, ignore_errors=True)
  os.makedirs(folder)
  corpus = os.path.join(folder, "corpus.tokens")
  docs = np.random.default_rng(0).integers(1, 61, (20, 40))
  tokens.write_tokens(corpus, docs, eos_id=0)

  def checkpoint(family: str) -> str:
    path = os.path.join(folder, family)
    shutil.copytree(os.path.join(CHECKPOINTS, family), path)
    return path

  if name == "pretrained_llc":
    return dict(model=checkpoint("gpt_neox"), corpus=corpus)
  # pretrained_polymorphism: llama_gqa and the same function with its residual stream rotated by a
  # Haar q (a planted rotation).
  model_a = checkpoint("llama_gqa")
  model, params = pretrained.load(model_a)
  q = np.asarray(haar.haar_orthogonal(jax.random.key(5), 32))
  model_b = os.path.join(folder, "rotated")
  pretrained.save(model_b, *pretrained.rotate_residual(model, params, q))
  return dict(model_a=model_a, model_b=model_b, corpus=corpus)


def run_one(name: str, out_dir: str) -> None:
  """Runs study ``name`` into ``out_dir/<name>/`` in this process and writes
  ``out_dir/<name>.json``."""
  import jax  # importing JAX does not start it: the device count can still be set
  from absl import logging

  import mechjax
  from mechjax import studies

  logging.set_verbosity(logging.WARNING)  # as the command line: orbax logs every save at INFO
  module = studies.find(name)
  if module.STUDY.cpu_cores_as_devices:
    mechjax.use_all_cpu_cores()  # before JAX runs anything, as mechjax.cli.experiment does
  os.chdir(out_dir)
  tiny = dict(tiny_configs()[name])
  if name.startswith("pretrained_"):
    tiny.update(pretrained_inputs(name))
  cfg = module.Config().replace(**tiny)
  shutil.rmtree(name, ignore_errors=True)
  module.STUDY.run(cfg, name, progress=False)
  print(f"{name}: {jax.device_count()} JAX device(s), {jax.default_backend()}")  # for the log
  with open(os.path.join(name, "summary.json")) as f:
    summary = json.load(f)
  with open(f"{name}.json", "w") as f:
    f.write(dumps(clean(summary)))


def run_all(out_dir: str, only: list[str] | None) -> int:
  modules, tiny = study_modules(), tiny_configs()
  missing = [m for m in modules if m not in tiny]
  unknown = [m for m in tiny if m not in modules]
  if missing or unknown:
    print(
      f"error: studies without a tiny config here: {missing}; tiny configs of no study: {unknown}",
      file=sys.stderr,
    )
    return 2
  if only is not None:
    chosen = [m for m in modules if m in only]
    bad = [o for o in only if o not in modules]
    if bad:
      print(f"error: --only names no study: {bad}; studies: {modules}", file=sys.stderr)
      return 2
    modules = chosen
  os.makedirs(out_dir, exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k != "JAX_DISABLE_MOST_OPTIMIZATIONS"}
  failed, start = [], time.perf_counter()
  for name in modules:
    for stale in (f"{name}.json", f"{name}.log"):
      if os.path.exists(os.path.join(out_dir, stale)):
        os.remove(os.path.join(out_dir, stale))
    log = os.path.join(out_dir, f"{name}.log")
    t0 = time.perf_counter()
    with open(log, "w") as f:
      r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), f"--one={name}", out_dir],
        cwd=ROOT,
        env=env,
        stdout=f,
        stderr=subprocess.STDOUT,
      )
    seconds = time.perf_counter() - t0
    status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode}; see {log})"
    print(f"{name:<26} {seconds:7.1f} s  {status}", flush=True)
    if r.returncode != 0:
      failed.append(name)
      with open(log) as f:
        tail = f.read().splitlines()[-20:]
      print("\n".join("    " + line for line in tail), flush=True)
  total = time.perf_counter() - start
  print(f"{'total':<26} {total:7.1f} s  {len(modules) - len(failed)}/{len(modules)} studies ok")
  if failed:
    print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1
  return 0


def compare(dir_a: str, dir_b: str) -> int:
  def summaries(folder):
    return {f[:-5] for f in os.listdir(folder) if f.endswith(".json")}

  names = sorted(summaries(dir_a) | summaries(dir_b))
  differ = []
  for name in names:
    texts = []
    for folder in (dir_a, dir_b):
      path = os.path.join(folder, f"{name}.json")
      if os.path.exists(path):
        with open(path) as f:
          texts.append(dumps(clean(json.load(f))).splitlines(keepends=True))
      else:
        texts.append([])
    if texts[0] != texts[1]:
      differ.append(name)
      for folder, text in zip((dir_a, dir_b), texts):
        if not text:
          print(f"{name}: no {name}.json in {folder}")
      a, b = (os.path.join(d, f"{name}.json") for d in (dir_a, dir_b))
      sys.stdout.writelines(difflib.unified_diff(*texts, fromfile=a, tofile=b))
  same = len(names) - len(differ)
  print(
    f"{same}/{len(names)} summaries the same" + (f"; differ: {', '.join(differ)}" * bool(differ))
  )
  return 1 if differ else 0


def main(argv: list[str]) -> int:
  usage = (
    "usage: python3 .ci/tiny_summaries.py OUT_DIR [--only=name1,name2]\n"
    "       python3 .ci/tiny_summaries.py --compare DIR_A DIR_B"
  )
  if argv[:1] == ["--compare"]:
    if len(argv) != 3:
      print(usage, file=sys.stderr)
      return 2
    return compare(argv[1], argv[2])
  one = [a for a in argv if a.startswith("--one=")]
  only = [a for a in argv if a.startswith("--only=")]
  rest = [a for a in argv if a not in one + only]
  if len(rest) != 1 or rest[0].startswith("-") or len(one) > 1 or len(only) > 1:
    print(usage, file=sys.stderr)
    return 2
  out_dir = os.path.abspath(rest[0])
  if one:
    run_one(one[0].split("=", 1)[1], out_dir)
    return 0
  names = [n for n in only[0].split("=", 1)[1].split(",") if n] if only else None
  return run_all(out_dir, names)


if __name__ == "__main__":
  sys.path.insert(0, ROOT)  # this checkout's mechjax, wherever the script is started from
  sys.exit(main(sys.argv[1:]))
