"""`python -m benchmarks.tensor_similarity` (docs/benchmarks.md), run once with its defaults; its
printed table is kept in ROOT/<id>/launch_result.json and ROOT/logs/.

    python -m launch.sweep --sweep=launch/sweeps/benchmark_tensor_similarity.py \\
        --root=sweeps/benchmark_tensor_similarity
"""

EXPERIMENT = "benchmarks.tensor_similarity"
OUTPUT_FLAG = None  # benchmarks print their measurements


def get_sweep():
  return [{}]
