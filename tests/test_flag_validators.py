"""The shared flag validators that the benchmarks and experiments register."""

import pytest
from absl import flags

from mechjax import cli


def test_list_of_accepts_the_choices_and_names_them_when_refusing():
  fv = flags.FlagValues()
  flags.DEFINE_list("workloads", ["4x200"], "", flag_values=fv)
  cli.list_of("workloads", {"4x200": 1, "16x1000": 2}, flag_values=fv)
  fv(["prog", "--workloads=16x1000,4x200"])
  assert fv.workloads == ["16x1000", "4x200"]
  for bad in ("--workloads=4x200,9x9", "--workloads="):
    with pytest.raises(flags.IllegalFlagValueError, match="comma-separated list of 4x200, 16x1000"):
      fv(["prog", bad])
