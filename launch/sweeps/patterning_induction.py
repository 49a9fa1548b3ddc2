"""The induction-patterning results row, over base seeds (each run trains 4 seeds per condition).

    python -m launch.sweep --sweep=launch/sweeps/patterning_induction.py \\
        --root=sweeps/patterning_induction
"""

from launch.lib import product

EXPERIMENT = "experiments.patterning_induction"


def get_sweep():
  return product(seed=[0, 1])
