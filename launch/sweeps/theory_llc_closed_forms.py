"""`python -m theory.llc_closed_forms` (in docs/results.md) over seeds: each member prints its
checks and PASS or FAIL, which the launcher records in ROOT/<id>/launch_result.json and the results
table.

    python -m launch.sweep --sweep=launch/sweeps/theory_llc_closed_forms.py \\
        --root=sweeps/theory_llc_closed_forms
"""

from launch.lib import product

EXPERIMENT = "theory.llc_closed_forms"
OUTPUT_FLAG = None  # the check writes nothing; the launcher keeps its verdict


def get_sweep():
  return product(seed=[1, 2, 3])
