"""The polymorphism results rows, per optimizer and over base seeds (each run trains 4 seeds).

    python -m launch.sweep --sweep=launch/sweeps/polymorphism.py --root=sweeps/polymorphism \\
        --parallel=2
"""

from launch.lib import product

EXPERIMENT = "experiments.polymorphism"


def get_sweep():
  return product(optimizer=["adam", "sgd"], seed=[0, 1])
