"""The grokking results row (weight decay 0.3) and its neighbours: how does the tensor-similarity /
logit-cosine correlation depend on the weight decay that drives grokking?

    python -m launch.sweep --sweep=launch/sweeps/tensor_similarity_grokking.py \\
        --root=sweeps/grokking --parallel=2

The same three weight decays also fit in one process and one compiled program:
``python -m experiments.tensor_similarity_grokking --weight_decays=0.1,0.3,1.0``.
"""

from launch.lib import product

EXPERIMENT = "experiments.tensor_similarity_grokking"
FIGURE = {"x": "weight_decay", "y": "pearson_r_tensor_vs_logit_cosine"}


def get_sweep():
  return product(weight_decay=[0.1, 0.3, 1.0])
