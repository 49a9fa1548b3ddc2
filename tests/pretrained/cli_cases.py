"""Runs a study's command-line entry point on many argument lists in one process, and records
what each printed on stderr and its exit status (tests/pretrained/test_bad_inputs.py).

    python -m tests.pretrained.cli_cases pretrained_llc cases.json out.json

``cases.json`` is ``{case: [--flag=value, ...]}``; ``out.json`` gets ``{case: {"status",
"stderr", "traceback"}}``, where ``traceback`` is true when the entry point raised past its
one-line error handling (a defect) or printed one. One process per study keeps JAX's start-up
cost out of each case; absl's flags are reset to their defaults between cases.
"""

import contextlib
import importlib
import io
import json
import re
import sys
import traceback

ABSL_LOG = re.compile(r"[IW]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")


def main(study: str, cases_path: str, out_path: str) -> None:
  module = importlib.import_module(f"experiments.{study}")
  from absl import flags

  with open(cases_path) as f:
    cases = json.load(f)
  out = {}
  for name, args in cases.items():
    flags.FLAGS.unparse_flags()
    sys.argv = [f"experiments/{study}.py", *args]
    err, status, raised = io.StringIO(), 0, False
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
      try:
        module.main()
      except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
      except BaseException:
        raised, status = True, 1
        err.write(traceback.format_exc())
    text = err.getvalue()
    # absl's INFO and WARNING log lines (JAX's probe for a TPU) are not the error.
    lines = [line for line in text.splitlines() if line and not ABSL_LOG.match(line)]
    out[name] = {
      "status": status,
      "stderr": "\n".join(lines),
      "traceback": raised or "Traceback (most recent call last)" in text,
    }
  with open(out_path, "w") as f:
    json.dump(out, f, indent=1)


if __name__ == "__main__":
  main(*sys.argv[1:])
