"""`python -m benchmarks.procrustes` (docs/benchmarks.md), run once with its defaults; its printed
table is kept in ROOT/<id>/launch_result.json and ROOT/logs/.

    python -m launch.sweep --sweep=launch/sweeps/benchmark_procrustes.py \\
        --root=sweeps/benchmark_procrustes
"""

EXPERIMENT = "benchmarks.procrustes"
OUTPUT_FLAG = None  # benchmarks print their measurements


def get_sweep():
  return [{}]
