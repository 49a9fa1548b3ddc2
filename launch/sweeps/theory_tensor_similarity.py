"""`python -m theory.tensor_similarity` (in docs/results.md) over seeds: each member prints its
checks and PASS or FAIL, which the launcher records in ROOT/<id>/launch_result.json and the results
table.

    python -m launch.sweep --sweep=launch/sweeps/theory_tensor_similarity.py \\
        --root=sweeps/theory_tensor_similarity
"""

from launch.lib import product

EXPERIMENT = "theory.tensor_similarity"
OUTPUT_FLAG = None  # the check writes nothing; the launcher keeps its verdict


def get_sweep():
  return product(seed=[0, 1, 2])
