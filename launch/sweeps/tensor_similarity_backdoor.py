"""The backdoor results row (10% poison) and its neighbours: how strongly does the target-class
slice respond, relative to the unpoisoned drift, as the poison fraction changes?

    python -m launch.sweep --sweep=launch/sweeps/tensor_similarity_backdoor.py \\
        --root=sweeps/backdoor --parallel=2
"""

from launch.lib import product

EXPERIMENT = "experiments.tensor_similarity_backdoor"
FIGURE = {"x": "poison_fraction", "y": "mean_at_onset.signal_over_drift.tensor_target_slice"}


def get_sweep():
  return product(poison_fraction=[0.02, 0.05, 0.1, 0.2])
