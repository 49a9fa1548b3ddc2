"""`python -m theory.linear_response` (in docs/results.md) over seeds: each member prints its
checks and PASS or FAIL, which the launcher records in ROOT/<id>/launch_result.json and the results
table.

    python -m launch.sweep --sweep=launch/sweeps/theory_linear_response.py \\
        --root=sweeps/theory_linear_response
"""

from launch.lib import product

EXPERIMENT = "theory.linear_response"
OUTPUT_FLAG = None  # the check writes nothing; the launcher keeps its verdict


def get_sweep():
  return product(seed=[0, 1])
