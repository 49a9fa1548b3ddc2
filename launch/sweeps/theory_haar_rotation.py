"""`python -m theory.haar_rotation` (in docs/results.md) over seeds: each member prints its checks
and PASS or FAIL, which the launcher records in ROOT/<id>/launch_result.json and the results table.

    python -m launch.sweep --sweep=launch/sweeps/theory_haar_rotation.py \\
        --root=sweeps/theory_haar_rotation
"""

from launch.lib import product

EXPERIMENT = "theory.haar_rotation"
OUTPUT_FLAG = None  # the check writes nothing; the launcher keeps its verdict


def get_sweep():
  return product(seed=[0, 1])
