"""The earlier parenthesis-patterning design's results row (its earlier defaults: 2 heads, Adam) and
its 3000-step rerun.

    python -m launch.sweep --sweep=launch/sweeps/patterning_parens_probe.py \\
        --root=sweeps/patterning_parens_probe
"""

from launch.lib import product
from launch.lib import with_all

EXPERIMENT = "experiments.patterning_parens_probe"


def get_sweep():
  return with_all(product(steps=[1000, 3000]), num_heads=2, weight_decay=0)
