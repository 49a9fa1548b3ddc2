"""The template study's sweep: its widths under three learning rates, each member a workdir of its
own under --root.

    python -m launch.sweep --sweep=launch/sweeps/template.py --root=sweeps/template --parallel=2
"""

from launch.lib import product

EXPERIMENT = "experiments.template"
FIGURE = {"x": "learning_rate", "y": "widths.8.final_test_acc_mean"}


def get_sweep():
  return product(learning_rate=[0.03, 0.1, 0.3], steps=[1000])
