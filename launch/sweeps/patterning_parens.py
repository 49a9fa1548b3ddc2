"""The parenthesis-patterning results row (default 1000 steps) and its 3000-step rerun.

    python -m launch.sweep --sweep=launch/sweeps/patterning_parens.py \\
        --root=sweeps/patterning_parens
"""

from launch.lib import product

EXPERIMENT = "experiments.patterning_parens"


def get_sweep():
  return product(steps=[1000, 3000])
