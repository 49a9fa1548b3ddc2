"""The N³ weak-recovery exponent and the power-law speed-up (results rows), over independent base
seeds.

    python -m launch.sweep --sweep=launch/sweeps/phase_sample_complexity.py \\
        --root=sweeps/phase_sample_complexity
"""

from launch.lib import product

EXPERIMENT = "theory.phase_sample_complexity"
OUTPUT_FLAG = "out"
DONE_FILE = "result.json"


def get_sweep():
  return product(seed=[0, 1, 2])
