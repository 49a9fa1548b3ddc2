"""`python -m benchmarks.train_throughput` (docs/benchmarks.md), run once with its defaults; its
printed table is kept in ROOT/<id>/launch_result.json and ROOT/logs/.

    python -m launch.sweep --sweep=launch/sweeps/benchmark_train_throughput.py \\
        --root=sweeps/benchmark_train_throughput
"""

EXPERIMENT = "benchmarks.train_throughput"
OUTPUT_FLAG = None  # benchmarks print their measurements


def get_sweep():
  return [{}]
