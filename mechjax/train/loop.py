"""The training core: pure steps, ``lax.scan`` chunks, ``vmap`` over seeds, a host loop over chunks.

The pieces, from the inside out:

* :func:`make_train_step` turns a problem's ``loss(params, key)`` and an optax optimizer into a pure
  ``step(state, key) -> (state, metrics)``. Data is generated *inside* the loss from ``key``.
* :func:`scan_steps` runs ``num_steps`` steps with ``jax.lax.scan``; step ``t`` uses the key
  ``fold_in(state["key"], t)``, so the randomness of a step depends only on the seed and the step
  number, never on how the run was cut into chunks or resumed.
* :func:`make_chunk_fn` compiles ``vmap(scan_steps + evaluate)`` over the seed axis into one
  program.
* :func:`train` is the host loop: it resumes from the latest checkpoint, runs chunks, and between
  chunks writes ``metrics.jsonl``, prints progress, checks for non-finite values and saves
  checkpoints.

A train state is a plain dict pytree ``{"params", "opt_state", "step", "key", "eval_key"}``; with
seeds vmapped every leaf has a leading seed axis ``S``. A run whose members differ by more than
their key (a teacher per member, say) passes ``member_data`` to :func:`train`: it is stored in the
state under ``"member_data"``, checkpointed with it, and handed to the problem's ``loss`` and
``evaluate`` as a third argument.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax.train import checkpoint as ckpt_lib
from mechjax.train import distributed
from mechjax.train import metrics as metrics_lib
from mechjax.train import schedule
from mechjax.train.progress import Plan
from mechjax.train.progress import Progress

Params = Any
State = dict[str, Any]
Metrics = dict[str, jax.Array]


class NonFiniteError(RuntimeError):
  """A loss or a parameter became NaN or infinite; the message names the step and the seed."""


@dataclasses.dataclass(frozen=True)
class Problem:
  """What the core needs to know about a learning problem.

  Attributes:
    init: ``init(key) -> params``.
    loss: ``loss(params, key) -> (scalar loss, dict of scalar metrics)``; draws its own batch from
      ``key``. A run given ``member_data`` calls ``loss(params, key, member_data)`` with this
      member's slice of it.
    evaluate: optional ``evaluate(params, key) -> dict of scalars`` (``evaluate(params, key,
      member_data)`` with ``member_data``), run at every logged step with a key fixed per seed (so a
      fixed test set can be drawn from it inside the compiled program).
  """

  init: Callable[[jax.Array], Params]
  loss: Callable[[Params, jax.Array], tuple[jax.Array, Metrics]]
  evaluate: Callable[[Params, jax.Array], Metrics] | None = None


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
  """Per-seed keys ``fold_in(PRNGKey(seed), i)``: seed ``i`` of a vmapped run is the same run
  alone."""
  base = jax.random.PRNGKey(seed)
  return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_seeds))


def init_state(
  problem: Problem,
  optimizer: optax.GradientTransformation,
  key: jax.Array,
  params: Params = None,
  member_data: Any = None,
) -> State:
  """The initial state of one seed (vmap it over :func:`seed_keys` for many).

  Args:
    problem: the :class:`Problem`.
    optimizer: the optax transformation whose state is initialised.
    key: this seed's key, split into the init, training and evaluation streams.
    params: replaces ``problem.init`` (fine-tuning starts from given weights with a fresh optimizer
      state).
    member_data: this member's fixed data (e.g. its teacher), kept in the state and passed to the
      problem's ``loss`` and ``evaluate``; None for none.
  """
  k_init, k_train, k_eval = jax.random.split(key, 3)
  params = problem.init(k_init) if params is None else params
  state = {
    "params": params,
    "opt_state": optimizer.init(params),
    "step": jnp.zeros((), jnp.int32),
    "key": k_train,
    "eval_key": k_eval,
  }
  if member_data is not None:
    state["member_data"] = member_data
  return state


def _member_args(state: State) -> tuple:
  """The problem functions' extra arguments: ``(member_data,)`` when the state holds it."""
  return (state["member_data"],) if "member_data" in state else ()


def make_train_step(problem: Problem, optimizer: optax.GradientTransformation):
  """``step(state, key) -> (state, metrics)``: one optimizer update on a batch drawn from
  ``key``."""

  def step(state: State, key: jax.Array) -> tuple[State, Metrics]:
    (loss, aux), grads = jax.value_and_grad(problem.loss, has_aux=True)(
      state["params"], key, *_member_args(state)
    )
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    new_state = {**state, "params": params, "opt_state": opt_state, "step": state["step"] + 1}
    return new_state, {"loss": loss, **aux}

  return step


def scan_steps(step_fn, state: State, num_steps: int) -> tuple[State, Metrics]:
  """Runs ``num_steps`` steps of ``step_fn`` with ``lax.scan``; returns per-step metrics
  ``(num_steps, ...)``."""

  def body(state, _):
    return step_fn(state, jax.random.fold_in(state["key"], state["step"]))

  return jax.lax.scan(body, state, None, length=num_steps)


def _all_finite(tree) -> jax.Array:
  leaves = [
    jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)
  ]
  return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def make_chunk_fn(
  problem: Problem,
  optimizer: optax.GradientTransformation,
  *,
  vmapped: bool = True,
  donate: bool = True,
):
  """``chunk(state, num_steps) -> (state, per_step_metrics, end_metrics)``, jitted (``num_steps``
  static).

  ``end_metrics`` holds ``evaluate`` at the end of the chunk and ``params_finite``. With ``vmapped``
  the state carries a leading seed axis and the whole chunk for all seeds is one compiled program.
  """
  step_fn = make_train_step(problem, optimizer)

  def chunk(state: State, num_steps: int):
    state, per_step = scan_steps(step_fn, state, num_steps)
    end = {"params_finite": _all_finite(state["params"])}
    if problem.evaluate is not None:
      end.update(problem.evaluate(state["params"], state["eval_key"], *_member_args(state)))
    return state, per_step, end

  if vmapped:
    chunk_v = lambda state, num_steps: jax.vmap(functools.partial(chunk, num_steps=num_steps))(
      state
    )
  else:
    chunk_v = chunk
  return jax.jit(chunk_v, static_argnums=1, donate_argnums=0 if donate else ())


@dataclasses.dataclass
class TrainResult:
  """What :func:`train` returns.

  Attributes:
    state: the final train state (``params``, ``opt_state``, ``step``, keys), seed axis in front.
    history: this run's ``metrics.jsonl`` rows.
    resumed_from: the step it resumed from, or None for a fresh start.
    restore: reads checkpoints back; call it through :meth:`params_at`.
  """

  state: State
  history: list[dict]
  resumed_from: int | None
  restore: Callable[..., dict[int, Params]] | None = None

  def params_at(self, steps: Sequence[int] | None = None) -> dict[int, Params]:
    """The (seed-stacked) params saved at ``steps`` (all committed steps by default), by step:
    restored with the problem, optimizer, keys and sharding this run trained with
    (:func:`checkpoint_params`)."""
    return self.restore(steps=steps)

  def params_of(self, seed: int, step: int | None = None) -> Params:
    """The params of seed ``seed`` (its index in ``keys``) at checkpoint ``step``, or at the end of
    training when ``step`` is None."""
    stacked = self.state["params"] if step is None else self.params_at([step])[step]
    return jax.tree.map(lambda a: a[seed], stacked)


def train(
  problem: Problem,
  optimizer: optax.GradientTransformation,
  *,
  keys: jax.Array,
  steps: int,
  workdir: str | os.PathLike,
  name: str = "main",
  log_every: int = 100,
  checkpoint_every: int = 1000,
  progress: bool = True,
  summarize: Callable[[dict], str] | None = None,
  keep_checkpoints: int | None = 2,
  checkpoint_steps: Sequence[int] = (),
  initial_params: Params = None,
  binary_chunks: bool = False,
  shard_seeds: bool | None = None,
  hyperparams: dict[str, Sequence[float]] | None = None,
  tensorboard: bool = False,
  member_data: Any = None,
  plan: Plan | None = None,
  on_save: Callable[[int, State], None] | None = None,
) -> TrainResult:
  """Trains ``len(keys)`` seeds of ``problem`` in one vmapped program for ``steps`` steps.

  Resumes from ``workdir/checkpoints/<name>`` if it holds a checkpoint (a finished run returns at
  once), bitwise equal to the run that was never stopped. Every chunk end writes a line of per-seed
  metrics to ``workdir/metrics.jsonl``: the chunk means of the per-step metrics, prefixed
  ``train_``, and the ``evaluate`` metrics. Across processes (``jax.distributed``), the returned
  state is whole on every process's host, so the analysis after training needs no multi-host code.

  Args:
    problem: the :class:`Problem` (init, loss, data, evaluate).
    optimizer: an optax transformation; its state is checkpointed with the params.
    keys: one PRNG key per seed, shape ``(num_seeds, ...)`` (:func:`seed_keys`).
    steps: the total number of steps (a resumed run trains the rest).
    workdir: the run folder (metrics and checkpoints are written under it).
    name: the name of this training run in the folder (``checkpoints/<name>``, the ``run`` field of
      each metrics row), so one study can train several.
    log_every: steps between metrics rows (chunk ends).
    checkpoint_every: steps between checkpoints; one is also saved at ``steps``.
    progress: print a progress line per chunk.
    summarize: ``summarize(row) -> str`` adds to the progress line.
    keep_checkpoints: how many of the latest checkpoints to keep; None keeps all (for studies that
      analyse every checkpoint afterwards).
    checkpoint_steps: extra checkpoints (and chunk ends, hence metric rows) at these steps, e.g. a
      power schedule.
    initial_params: start from these weights (with the seed axis) instead of ``problem.init``, with
      a fresh optimizer state: fine-tuning.
    binary_chunks: run each chunk as pieces of power-of-two lengths
      (:func:`mechjax.train.schedule.binary_pieces`). A chunk's length is static in the compiled
      program, so irregular chunk ends (``checkpoint_steps``) would otherwise compile one program
      per distinct length.
    shard_seeds: split the seed axis over all devices (:func:`mechjax.sharding.leading_axis`): the
      same single program, partitioned by XLA. None (the default) does so whenever there are several
      devices and they divide the seed count; False never does.
    hyperparams: numeric optimizer hyperparameters swept inside the same program:
      ``{"learning_rate": [...]}`` gives seed ``i`` the ``i``-th value. The optimizer must expose
      them through ``optax.inject_hyperparams`` (:func:`set_hyperparams`); a checkpoint restores
      them with the state.
    tensorboard: also write the metrics as TensorBoard event files under
      ``workdir/tensorboard/<name>/`` (:class:`~mechjax.train.metrics.MetricsWriter`).
    member_data: fixed per-member data, a pytree whose leaves have the seed axis in front (e.g. a
      teacher per member, so that several teachers train in the one program); the problem's
      ``loss`` and ``evaluate`` get each member's slice as a third argument. It is checkpointed
      with the state, and a resume with different ``member_data`` is refused.
    plan: the study's :class:`~mechjax.train.progress.Plan` of training runs; the progress line
      then also gives this run's position among them and the whole study's ETA. The caller calls
      its ``begin`` and ``end`` around this run (:meth:`mechjax.studies.frame.Context.train` does).
    on_save: ``on_save(step, state)`` is called before each checkpoint is saved, with the state
      (seed axis in front) on the host, e.g. to export the params in another format. It runs before
      the save, so a run stopped in between repeats the step on resume and calls it again: make it
      skip what it already wrote.

  Returns:
    A :class:`TrainResult`: the final state, this run's metrics rows, the step it resumed from, and
    :meth:`TrainResult.params_at` to read any checkpoint back.

  Raises:
    NonFiniteError: a loss or a parameter became non-finite. Nothing from the bad chunk is written,
      and the last good checkpoint is kept.
  """
  workdir = os.fspath(workdir)
  restore = functools.partial(
    checkpoint_params,
    problem,
    optimizer,
    keys=keys,
    workdir=workdir,
    name=name,
    shard_seeds=shard_seeds,
    initial_params=initial_params,
    member_data=member_data,
  )
  _check_member_data(member_data, keys.shape[0])
  init_fn = _init_fn(problem, optimizer, initial_params, member_data)
  abstract_state = jax.eval_shape(init_fn, keys)
  sharding = distributed.state_sharding(keys.shape[0], shard_seeds)

  with (
    metrics_lib.MetricsWriter(os.path.join(workdir, "metrics.jsonl"), name, tensorboard) as writer,
    ckpt_lib.Checkpointer(
      os.path.join(workdir, "checkpoints", name), max_to_keep=keep_checkpoints
    ) as checkpointer,
  ):
    start = checkpointer.latest_step()
    if start is not None:
      if sharding is not None:  # restore straight into the sharded layout (needed across processes)
        abstract_state = jax.tree.map(
          lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), abstract_state
        )
      state = checkpointer.restore(abstract_state, start)
      _check_restored_member_data(state, member_data, name)
      writer.truncate_after(start)
    else:
      state = init_fn(keys)
      if hyperparams:
        state = {
          **state,
          "opt_state": set_hyperparams(state["opt_state"], hyperparams, keys.shape[0]),
        }
      writer.truncate_after(0)
      start = 0
      if sharding is not None:
        state = distributed.to_global(state, sharding)
    resumed_from = start if start > 0 else None
    if start >= steps:
      return TrainResult(
        distributed.host_if_multiprocess(state), writer.history(), resumed_from, restore
      )

    chunk_fn = make_chunk_fn(problem, optimizer)
    bar = Progress(name, steps, start, enabled=progress, plan=plan)
    step = start
    saves = {int(e) for e in checkpoint_steps}
    for end in schedule.chunk_ends(start, steps, log_every, checkpoint_every, saves):
      pieces = schedule.binary_pieces(end - step, log_every) if binary_chunks else [end - step]
      per_steps = []
      for n in pieces:
        state, per_step, end_metrics = chunk_fn(state, n)
        per_steps.append(per_step)
      per_step = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *distributed.fetch(per_steps))
      end_metrics = distributed.fetch(end_metrics)
      _check_finite(
        per_step["loss"],
        end_metrics.pop("params_finite"),
        first_step=step + 1,
        name=name,
        last_good=checkpointer.latest_step(),
      )
      row = {f"train_{k}": np.mean(v, axis=1) for k, v in per_step.items()}
      row.update(end_metrics)
      row = writer.write(end, row)
      step = end
      if end % checkpoint_every == 0 or end == steps or end in saves:
        if on_save is not None:
          on_save(end, distributed.host_if_multiprocess(state))
        checkpointer.save(end, state)
      bar.update(end, summarize(row) if summarize else f"loss {np.mean(row['train_loss']):.4f}")
  return TrainResult(
    distributed.host_if_multiprocess(state), writer.history(), resumed_from, restore
  )


def _init_fn(
  problem: Problem,
  optimizer: optax.GradientTransformation,
  initial_params: Params = None,
  member_data: Any = None,
):
  """``init(keys) -> state`` with the seed axis: from ``problem.init``, or from
  ``initial_params``; with ``member_data`` in the state when given."""
  init = jax.vmap(functools.partial(init_state, problem, optimizer))
  if initial_params is None and member_data is None:
    return jax.jit(init)
  return jax.jit(lambda keys: init(keys, initial_params, member_data))


def _abstract_state(problem, optimizer, keys, initial_params=None, member_data=None):
  return jax.eval_shape(_init_fn(problem, optimizer, initial_params, member_data), keys)


def _check_member_data(member_data, num_seeds: int) -> None:
  """Every leaf of ``member_data`` must carry the seed axis in front."""
  if member_data is None:
    return
  leaves = jax.tree_util.tree_leaves_with_path(member_data)
  if not leaves:
    raise ValueError("member_data has no arrays; pass None for a run without member data")
  for path, leaf in leaves:
    shape = np.shape(leaf)
    if not shape or shape[0] != num_seeds:
      raise ValueError(
        f"member_data{jax.tree_util.keystr(path)} must have the seed axis ({num_seeds}, one entry "
        f"per key) in front; got shape {shape}"
      )


def _check_restored_member_data(state: State, member_data, name: str) -> None:
  """A checkpoint resumes only with the member data it was trained with."""
  saved = state.get("member_data")
  if member_data is None:
    return
  same = jax.tree.all(
    jax.tree.map(
      lambda a, b: bool(np.array_equal(np.asarray(distributed.fetch(a)), np.asarray(b))),
      saved,
      member_data,
    )
  )
  if not same:
    raise ValueError(
      f"the checkpoint of run '{name}' was trained with other member_data than the one given; "
      "use a new workdir (or overwrite) to train with this member data"
    )


def set_hyperparams(opt_state, values: dict[str, Sequence[float]], num_seeds: int):
  """``opt_state`` (with the seed axis) with per-seed hyperparameter ``values`` written into every
  ``optax.inject_hyperparams`` state that has them. A ValueError names a hyperparameter that no
  injected state holds, or a list whose length is not the number of seeds."""
  for name, v in values.items():
    if len(v) != num_seeds:
      raise ValueError(
        f"hyperparams[{name!r}] has {len(v)} values; it needs one per seed ({num_seeds})"
      )
  found = set()

  def visit(node):
    if hasattr(node, "hyperparams") and isinstance(node.hyperparams, dict):
      hp = dict(node.hyperparams)
      for name, v in values.items():
        if name in hp:
          hp[name] = jnp.asarray(v, jnp.result_type(hp[name]))
          found.add(name)
      return node._replace(hyperparams=hp)
    if isinstance(node, tuple) and not hasattr(node, "_fields"):
      return tuple(visit(n) for n in node)
    if isinstance(node, tuple):  # other named-tuple states may nest inner states
      return type(node)(*(visit(n) for n in node))
    return node

  new = visit(opt_state)
  missing = sorted(set(values) - found)
  if missing:
    raise ValueError(
      f"hyperparams {missing} are not injected into the optimizer; build it with "
      f"optax.inject_hyperparams(...)({missing[0]}=...)"
    )
  return new


def first_nonfinite(values_SxT: np.ndarray) -> tuple[int, int] | None:
  """``(row, column)`` of the earliest (smallest column) non-finite entry of a per-seed or per-chain
  trace."""
  bad = ~np.isfinite(values_SxT)
  if not bad.any():
    return None
  rows, cols = np.nonzero(bad)
  i = np.argmin(cols)
  return int(rows[i]), int(cols[i])


def _check_finite(
  loss_SxT: np.ndarray,
  params_finite_S: np.ndarray,
  *,
  first_step: int,
  name: str,
  last_good: int | None,
):
  kept = (
    f"last good checkpoint: step {last_good}"
    if last_good is not None
    else "no checkpoint was saved"
  )
  first = first_nonfinite(loss_SxT)
  if first is not None:
    seed, offset = first
    raise NonFiniteError(
      f"non-finite loss at step {first_step + offset} (seed {seed}) in run '{name}'; "
      f"training stopped, {kept}"
    )
  if not np.all(params_finite_S):
    seed = int(np.argmin(params_finite_S))
    raise NonFiniteError(
      f"non-finite parameters after step {first_step + loss_SxT.shape[1] - 1} (seed {seed}) in run "
      f"'{name}'; training stopped, {kept}"
    )


def checkpoint_params(
  problem: Problem,
  optimizer: optax.GradientTransformation,
  *,
  keys: jax.Array,
  workdir: str | os.PathLike,
  name: str = "main",
  steps: Sequence[int] | None = None,
  shard_seeds: bool | None = None,
  initial_params: Params = None,
  member_data: Any = None,
) -> dict[int, Params]:
  """The (seed-stacked) params saved by :func:`train`, by step.

  :meth:`TrainResult.params_at` calls this with the arguments the run trained with. Across processes
  the params come back whole on every host.

  Args:
    problem: the :class:`Problem` the run trained.
    optimizer: the optimizer it trained with (its state is part of the checkpoint, so the restore
      needs its structure).
    keys: the run's seed keys.
    workdir: the run folder.
    name: the training run's name in the folder.
    steps: the steps to read; all committed steps by default.
    shard_seeds: as given to :func:`train`.
    initial_params: as given to :func:`train`.
    member_data: as given to :func:`train` (the checkpoint holds it, so the restore needs its
      structure).
  """
  abstract = _abstract_state(problem, optimizer, keys, initial_params, member_data)
  sharding = distributed.state_sharding(keys.shape[0], shard_seeds)
  if sharding is not None:
    abstract = jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), abstract
    )
  with ckpt_lib.Checkpointer(
    os.path.join(os.fspath(workdir), "checkpoints", name), max_to_keep=None
  ) as ck:
    available = ck.all_steps()
    wanted = available if steps is None else [int(s) for s in steps]
    missing = sorted(set(wanted) - set(available))
    if missing:
      raise FileNotFoundError(
        f"no checkpoint for steps {missing} of run '{name}' in {workdir}; saved: {available}"
      )
    return {s: distributed.host_if_multiprocess(ck.restore(abstract, s)["params"]) for s in wanted}
