"""Every component's LLC and susceptibilities of Pythia-410m and Pythia-1.4B on a TPU v5e-8 (16 GiB
of HBM per chip): 8 chains of Pythia-410m, one per chip (mesh (8, 1)), and 2 chains of Pythia-1.4B,
each split over 4 chips (mesh (2, 4)); docs/benchmarks.md "Running at scale" gives the per-device
memory (10.3 and 9.5 GiB by benchmarks/scale_plan.py).

    python -m launch.sweep --sweep=launch/sweeps/pretrained_llc_v5e8.py --root=sweeps/pythia \\
        --backend=tpu_vm --tpu_name=my-v5e-8 --zone=us-west4-a \\
        --repo=https://github.com/ORG/mechjax.git --dry_run

The checkpoints and the token file must be on the TPU VM's disk (nothing is downloaded).
"""

from launch.sweeps.pretrained_llc_8gpu import pythia

EXPERIMENT = "experiments.pretrained_llc"


def get_sweep():
  return pythia(num_chains=[8, 2], model_axis=[1, 4])
