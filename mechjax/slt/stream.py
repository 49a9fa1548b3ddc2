"""SGLD chains on data that stay on the host: a corpus larger than device (or host) memory, such as
a memory-mapped token file's windows (:func:`mechjax.data.tokens.disk_windows`).

The chains run in parts of ``steps_per_chunk`` steps, each part one compiled ``scan`` that carries
the chains' state on. Step ``t`` of chain ``c`` uses the samples that the in-memory sampler would
draw, ``randint(split(fold_in(key_c, t))[0], (batch_size,), 0, n)``: a function of the key and the
step alone. Before a part runs, the host gathers its samples (``array[idx]``, which reads only those
rows of a memory map); while the device runs it, the host gathers the next part's. So a streamed
estimate is the in-memory one with the same key (tested), at the cost of the gathers that the
device does not hide (docs/benchmarks.md, "Streaming a corpus from disk").

Each step's ``L_B(w*)`` takes the path that :func:`mechjax.slt.llc.star_loss_path` chooses, as in
memory: with the per-sample path the corpus is streamed once through the loss at ``w*``
(:func:`star_losses`), and each part's per-sample losses are gathered beside its samples.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import sharding as sharding_lib
from mechjax.slt import placement
from mechjax.slt.chain import Chain
from mechjax.slt.chain import chain_start
from mechjax.slt.inputs import Streamed  # the data these chains read; importable from here too


def star_losses(loss_fn, params_star, data: Streamed, rows: int = 4096) -> jax.Array:
  """``(n,)``: every streamed sample's loss at ``w*``
  (:func:`mechjax.slt.placement.per_sample_star_losses`), ``rows`` samples gathered and evaluated
  at a time (a shorter last group)."""
  n = data.num_samples
  parts = [
    placement.per_sample_star_losses(
      loss_fn, params_star, data.gather(np.arange(a, min(a + rows, n)))
    )
    for a in range(0, n, rows)
  ]
  return jnp.concatenate(parts)


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _indices_program(batch_size: int, n: int):
  """``(chains, steps) -> (C, S, batch_size)``: the samples each chain's step draws, as
  :func:`mechjax.slt.chain.sample_chain` draws them from in-memory data."""

  @jax.jit
  def run(keys, steps):
    def one(key, t):
      k_batch, _ = jax.random.split(jax.random.fold_in(key, t))
      return jax.random.randint(k_batch, (batch_size,), 0, n)

    return jax.vmap(lambda k: jax.vmap(lambda t: one(k, t))(steps))(keys)

  return run


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _start_program(settings, masked: bool, accumulator, layout, support):
  """Every chain's first carry (:func:`mechjax.slt.chain.chain_start`), stacked."""

  def run(params_star, keys, param_mask, accumulator_data):
    constrain = sharding_lib.model_constraint(layout) or (lambda tree: tree)
    start = lambda _: chain_start(  # noqa: E731
      params_star, param_mask if masked else None, support, accumulator, accumulator_data,
      constrain, settings.rmsprop is not None,
    )  # fmt: skip
    return jax.vmap(start)(keys)

  return placement.jit_over_chains(run, layout, num_args=4, split_args=(1,))


@functools.lru_cache(maxsize=placement.PROGRAM_CACHE_SIZE)
def _part_program(loss_fn, settings, masked: bool, accumulator, layout, support):
  """One part of every chain: ``scan`` over the given steps from the given carries, on the
  gathered batches."""

  def run(params_star, keys, carry, steps, batches, star, param_mask, accumulator_data):
    def chain(key, carry, batches, star):
      return Chain(
        loss_fn,
        params_star,
        key,
        settings,
        param_mask if masked else None,
        accumulator,
        accumulator_data,
        support=support,
        constrain=sharding_lib.model_constraint(layout),
      ).run_steps(carry, steps, batches, star)

    how = placement.chain_loop(settings)
    return placement.over_chains(chain, how, keys, carry, batches, star)

  return placement.jit_over_chains(run, layout, num_args=8, split_args=(1, 2, 4, 5))


def part_length(num_steps: int, steps_per_chunk: int) -> int:
  """The steps of one part: the largest divisor of ``num_steps`` that is at most
  ``steps_per_chunk``, when it is at least half of that (every part then has the same length and
  one program runs them all); else ``steps_per_chunk``, with a shorter last part (a second
  program)."""
  size = min(steps_per_chunk, num_steps)
  divisor = max(d for d in range(1, size + 1) if num_steps % d == 0)
  return divisor if 2 * divisor >= size else size


class StreamedRun:
  """The streamed chains of :func:`mechjax.slt.sgld.sample_chains` for ``settings.num_chains``
  chains on ``layout``: called as ``run(params_star, streamed, keys, param_mask,
  accumulator_data, star_losses)`` (``star_losses`` every sample's loss at ``w*``, ``(n,)``, or
  None), it returns the traces the in-memory program returns. Its programs are made
  once, when it is made, so that the CPU thread groups share them."""

  def __init__(self, loss_fn, settings, accumulator, layout, support, masked: bool):
    args = (settings, masked, accumulator, layout, support)
    self.settings, self.accumulator = settings, accumulator
    self.start = _start_program(*args)
    self.part = _part_program(loss_fn, *args)

  def __call__(
    self, params_star, streamed: Streamed, keys, param_mask, accumulator_data, star_losses
  ):
    carry = self.start(params_star, keys, param_mask, accumulator_data)

    def part(carry, steps, batches, star_batches):
      return self.part(
        params_star, keys, carry, steps, batches, star_batches, param_mask, accumulator_data
      )

    carry, traces = run_parts(streamed, keys, self.settings, carry, part, star_losses)
    joined = {k: jnp.concatenate([t[k] for t in traces], axis=1) for k in traces[0]}
    if self.accumulator is not None:
      joined["accumulated"] = carry[2]
    return joined


def run_parts(streamed: Streamed, keys, settings, carry, part, star_losses=None):
  """The chains of ``keys`` through ``settings.num_steps`` steps in parts (:func:`part_length`):
  ``part(carry, steps, batches, star_batches) -> (carry, traces)`` runs one on the samples the
  in-memory sampler would draw (``(chains, len(steps), batch_size, ...)``, gathered on the host
  while the previous part runs; ``star_batches`` their entries of ``star_losses``, or None).
  Returns the last carry and the parts' traces, in order."""
  s = settings
  indices = _indices_program(s.batch_size, streamed.num_samples)
  size = part_length(s.num_steps, streamed.steps_per_chunk)
  parts = [np.arange(a, min(a + size, s.num_steps)) for a in range(0, s.num_steps, size)]
  # A part's indices are computed before the previous part is dispatched (a device runs its
  # programs in order), so the host gathers them while that part runs.
  star = None if star_losses is None else np.asarray(star_losses)

  def gather(idx):
    idx = np.asarray(idx)
    return streamed.gather(idx), None if star is None else star[idx]

  traces = []
  with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mechjax-stream") as pool:
    pending = pool.submit(gather, indices(keys, parts[0]))
    for i, steps in enumerate(parts):
      batches, star_batches = pending.result()
      following = indices(keys, parts[i + 1]) if i + 1 < len(parts) else None
      carry, out = part(carry, steps, batches, star_batches)
      if following is not None:
        pending = pool.submit(gather, following)
      traces.append(out)
  return carry, traces
