"""The Fourier-phase results rows at full scale, replicated over base seeds (each run has 4 vmapped
seeds).

    python -m launch.sweep --sweep=launch/sweeps/fourier_phase.py --root=sweeps/fourier_phase \\
        --parallel=2
"""

from launch.lib import product

EXPERIMENT = "experiments.fourier_phase"
FIGURE = {"x": "seed", "y": "conditions.spiked_principal_alpha2.final_test_acc_mean"}


def get_sweep():
  return product(seed=[0, 1, 2])
