"""`python -m benchmarks.llc_vs_devinterp` (docs/benchmarks.md), run once with its defaults; its
printed table is kept in ROOT/<id>/launch_result.json and ROOT/logs/. It needs `pip install -r
benchmarks/requirements.txt` first (torch and devinterp).

    python -m launch.sweep --sweep=launch/sweeps/benchmark_llc_vs_devinterp.py \\
        --root=sweeps/benchmark_llc_vs_devinterp
"""

EXPERIMENT = "benchmarks.llc_vs_devinterp"
OUTPUT_FLAG = None  # benchmarks print their measurements


def get_sweep():
  return [{}]
