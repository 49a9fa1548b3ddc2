"""The training core: a :class:`Problem` (init, loss, data) trained by :func:`train` as one
``lax.scan`` over steps, ``vmap`` over seeds, with orbax checkpoints, resume and ``metrics.jsonl``.

Example::

    from mechjax import train
    result = train.train(problem, optax.adam(1e-3), keys=train.seed_keys(0, 4), steps=1000,
                         workdir="runs/mine")
"""

from mechjax.train.checkpoint import Checkpointer
from mechjax.train.loop import NonFiniteError
from mechjax.train.loop import Problem
from mechjax.train.loop import TrainResult
from mechjax.train.loop import checkpoint_params
from mechjax.train.loop import init_state
from mechjax.train.loop import make_train_step
from mechjax.train.loop import seed_keys
from mechjax.train.loop import train
from mechjax.train.metrics import MetricsWriter
from mechjax.train.metrics import read_jsonl
from mechjax.train.schedule import power_schedule

__all__ = [
  "Checkpointer",
  "MetricsWriter",
  "NonFiniteError",
  "Problem",
  "TrainResult",
  "checkpoint_params",
  "init_state",
  "make_train_step",
  "power_schedule",
  "read_jsonl",
  "seed_keys",
  "train",
]
