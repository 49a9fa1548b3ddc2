"""The LLC-over-training docs/results.md row, over base seeds (each run trains 2 seeds).

    python -m launch.sweep --sweep=launch/sweeps/llc_dynamics.py --root=sweeps/llc_dynamics \\
        --parallel=2
"""

from launch.lib import product

EXPERIMENT = "experiments.llc_dynamics"


def get_sweep():
  return product(seed=[0, 1, 2])
