"""Every component's LLC and susceptibilities of Pythia-410m and Pythia-1.4B on one node of 8 GPUs
of 80 GB: 8 chains, one per GPU (mesh (8, 1)); docs/benchmarks.md "Running at scale" gives the
per-device memory (10.3 and 34.3 GiB by benchmarks/scale_plan.py).

    python -m launch.sweep --sweep=launch/sweeps/pretrained_llc_8gpu.py \\
        --root=/shared/sweeps/pythia --backend=slurm --partition=gpu --gpus_per_node=8 \\
        --cpus_per_task=32 --mem=256G --dry_run

The checkpoints and the token file must be on disk where the jobs run (nothing is downloaded).
"""

from launch.lib import zipped

EXPERIMENT = "experiments.pretrained_llc"


def pythia(num_chains: list[int], model_axis: list[int]):
  """Pythia-410m and Pythia-1.4B on the token file, windows of 256, batch 8, with each model's
  chains and model axis (the v5e-8 sweep uses it too)."""
  return zipped(
    model=["checkpoints/pythia-410m", "checkpoints/pythia-1.4b"],
    corpus=["corpus.tokens", "corpus.tokens"],
    seq_len=[256, 256],
    batch_size=[8, 8],
    num_chains=num_chains,
    model_axis=model_axis,
  )


def get_sweep():
  return pythia(num_chains=[8, 8], model_axis=[1, 1])
