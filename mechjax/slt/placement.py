"""Where chains run: over the devices, on a mesh or in CPU thread groups, as ``vmap`` or ``lax.map``
on each device, and the caches of the compiled sampler programs.

**How the chains of one device run** (:func:`chain_loop`). ``vmap`` makes every array op of a
step one op over all the chains; ``map`` (``lax.map``) runs the chains' scans one after another,
each with unbatched ops. On accelerators ``vmap`` fills the chip. On a CPU ``map`` is faster for
models of some size (docs/benchmarks.md has the measurements); a small model's step is a few ops
whose fixed cost ``vmap`` shares out. ``auto`` (the default) picks ``map`` on a CPU for models of
at least :data:`MAP_MIN_PARAMS` parameters and ``vmap`` otherwise. Each chain's arithmetic is the
same either way up to rounding; the random numbers are identical.

**One program per computation.** :func:`chains_program` compiles one ``jit(vmap(scan))`` program per
loss function, settings, mask presence, accumulator and device layout, and keeps the latest
:data:`PROGRAM_CACHE_SIZE` of them: another key, another ``w*`` or other data of the same shapes
reuse the program. The cache compares loss functions and accumulators by equality, so pass the same
function each time (a module-level function, a bound method, or a hashable callable such as
:class:`mechjax.slt.langevin.MeanLoss`), not a new lambda per call: a new lambda is a new program,
and the cache holds it until it is evicted.

**Compiled for how it runs.** On a CPU a program that runs alone (one device, called from one
thread) keeps XLA's defaults; one that runs on several devices, or from several threads at once, is
compiled without XLA's YNNPACK fusions, whose memory grows there (:data:`mechjax.sharding.
CPU_COMPILER_OPTIONS`). :func:`over_chains_on_devices` knows which, and a one-device program
(:class:`OneDeviceProgram`) is compiled for it; called from anywhere else, it assumes company.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import dataclasses
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import mechjax
from mechjax import sharding as sharding_lib
from mechjax.slt.chain import sample_chain
from mechjax.slt.params import is_float_leaf
from mechjax.slt.settings import SGLDSettings

Params = Any
PROGRAM_CACHE_SIZE = 16
MAP_MIN_PARAMS = 10_000
# Models at least this large run their chains in one program on one CPU device, not in thread
# groups: the groups gained 1.45x with a 37k-parameter model and nothing with a 70M-parameter one
# (docs/benchmarks.md), where each group's program holds its own parameter-sized temporaries.
THREAD_GROUPS_MAX_PARAMS = 5_000_000
# Models at least this large have the C heap released after their sampler compiles (below it the
# compiler's leftovers are small, and the release costs a walk of the heap).
RELEASE_HEAP_MIN_PARAMS = 1_000_000


def chain_loop(settings: SGLDSettings, params: Params = None) -> str:
  """``"vmap"`` or ``"map"``: ``settings.chain_loop`` with ``auto`` resolved: ``map`` on a CPU when
  ``params`` has at least :data:`MAP_MIN_PARAMS` float entries (or is not given), ``vmap``
  otherwise. A step of a small model is a few ops on small arrays, whose fixed cost ``vmap``
  shares out (docs/benchmarks.md compares the two)."""
  if settings.chain_loop != "auto":
    return settings.chain_loop
  if jax.default_backend() != "cpu":
    return "vmap"
  if params is None:
    return "map"
  return "map" if float_size(params) >= MAP_MIN_PARAMS else "vmap"


def float_size(params: Params) -> int:
  """The number of float entries of ``params`` (the weights a sampler can move)."""
  return sum(int(np.size(a)) for a in jax.tree.leaves(params) if is_float_leaf(a))


def with_chain_loop(settings: SGLDSettings, params: Params) -> SGLDSettings:
  """``settings`` with ``chain_loop`` resolved for ``params`` (:func:`chain_loop`), so that the
  compiled program is keyed on what it runs."""
  return dataclasses.replace(settings, chain_loop=chain_loop(settings, params))


def over_chains(fn: Callable, how: str, *xs):
  """``fn`` applied to every row of the arrays ``xs`` (a leading chain axis), stacked: ``vmap(fn)``
  or ``lax.map`` by ``how`` (see the module docstring)."""
  if how == "vmap":
    return jax.vmap(fn)(*xs)
  return jax.lax.map(lambda row: fn(*row), xs)


def over_chains_on_devices(
  num_chains: int,
  build: Callable[[Any, int], Callable],
  run: Callable[[Callable, slice], Any],
  shard: bool | None = None,
  axis: int = 0,
  mesh: Mesh | None = None,
  analyze: bool = False,
  size: int = 0,
):
  """Runs ``num_chains`` chains where they run fastest, the one place that decides it: on the
  caller's ``mesh`` when one is given; else sharded over the devices when their number divides
  ``num_chains`` (:func:`mechjax.sharding.leading_axis`), else, on one CPU device, in equal groups
  called from one thread each (:func:`cpu_thread_groups`). On CPU devices, a model of at least
  :data:`THREAD_GROUPS_MAX_PARAMS` float parameters runs its chains in one program on one device
  unless ``shard`` is True: each device's program held its own parameter-sized temporaries (2.15
  against 1.56 GB peak for a pythia-14m-shaped model's four chains) for 7% more speed.

  Args:
    num_chains: the chains in all.
    build: ``build(layout, per) -> program`` for ``per`` chains with the device ``layout`` (None
      for one device).
    run: ``run(program, part) -> traces``, the chains ``part`` (a slice of the chain axis, for the
      callers' keys) through ``program``.
    shard: as for :func:`mechjax.slt.sgld.sample_chains`.
    axis: the chain axis of the traces, along which the groups' outputs are joined.
    mesh: a mesh with axes ``chains`` and ``model`` (:func:`mechjax.sharding.sampler_mesh`), or
      None. ``build`` gets it as the layout.
    analyze: instead of running, compile the program that would run and return its memory
      analysis (``run`` gets a stand-in for the program that lowers and compiles); a later run
      reuses the compiled program. On one CPU device in thread groups that is one group's
      program, and :func:`cpu_thread_groups` of them run at once.
    size: the model's float parameters (:func:`float_size`), for :func:`cpu_thread_groups`.
  """
  if mesh is not None:
    layout = sharding_lib.sampler_mesh(mesh, num_chains)
  else:
    lead = sharding_lib.leading_axis(num_chains, "chains", chains_shard(shard, size))
    layout = None if lead is None else lead.mesh
  groups = 1 if layout is not None else cpu_thread_groups(num_chains, shard, size)
  per = num_chains // groups
  with running(concurrent=layout is not None or groups > 1):
    program = build(layout, per)
    if isinstance(program, OneDeviceProgram):  # compiled variant fixed here, one per heap release
      program = program.jitted()
    if analyze:
      return run(lambda *args: program.lower(*args).compile().memory_analysis(), slice(0, per))
    if size >= RELEASE_HEAP_MIN_PARAMS and hasattr(program, "lower"):
      program = _heap_released_after_compiling(program)
    return _in_groups(lambda g: run(program, slice(g * per, (g + 1) * per)), groups, axis)


# Whether the programs called in this context may run beside others (several devices or threads).
# A new thread starts with the default, True: the thread groups' workers see it.
_CONCURRENT = contextvars.ContextVar("mechjax_concurrent_programs", default=True)


@contextlib.contextmanager
def running(concurrent: bool):
  """Within it, :class:`OneDeviceProgram` compiles for a program that runs beside others
  (``concurrent``) or alone; outside any, it assumes company."""
  token = _CONCURRENT.set(concurrent)
  try:
    yield
  finally:
    _CONCURRENT.reset(token)


def running_concurrently() -> bool:
  """Whether the programs called here may run beside others (:func:`running`; True by default)."""
  return _CONCURRENT.get()


class OneDeviceProgram:
  """``jax.jit(run)`` on one device, compiled (once each) with
  :func:`mechjax.sharding.compiler_options` for how the caller's context runs it (:func:`running`):
  alone, with XLA's defaults, or beside other programs, without the YNNPACK fusions. Called and
  lowered like the jitted function."""

  def __init__(self, run: Callable):
    self._run = run
    self._jitted: dict[bool, Any] = {}
    self._lock = threading.Lock()

  def jitted(self, concurrent: bool | None = None):
    """The jitted function for ``concurrent`` (default: the context's)."""
    concurrent = _CONCURRENT.get() if concurrent is None else concurrent
    with self._lock:
      if concurrent not in self._jitted:
        options = sharding_lib.compiler_options(concurrent)
        self._jitted[concurrent] = jax.jit(self._run, compiler_options=options)
      return self._jitted[concurrent]

  def __call__(self, *args):
    return self.jitted()(*args)

  def lower(self, *args):
    return self.jitted().lower(*args)


def chains_shard(shard: bool | None, size: int) -> bool | None:
  """``shard`` as :func:`over_chains_on_devices` applies it: False (one device) for a model of at
  least :data:`THREAD_GROUPS_MAX_PARAMS` float parameters on CPU devices, unless the caller asked
  for sharding; as given otherwise."""
  if shard is None and size >= THREAD_GROUPS_MAX_PARAMS and _all_cpu():
    return False  # as for thread groups: one program, whose matrix products use every core
  return shard


def _all_cpu() -> bool:
  return jax.default_backend() == "cpu"


_RELEASED: set[int] = set()  # id()s of programs compiled in this process (the cache keeps them)


def _heap_released_after_compiling(program):
  """``program``, which on its first call in this process is compiled ahead and then has the C
  heap handed back to the system (glibc's ``malloc_trim``) before it runs. Compiling a sampler
  frees most of what it allocated, but malloc keeps the freed pages: on a pythia-14m-shaped model
  that was 0.75 GB of resident memory under the chains' own (docs/benchmarks.md). The compiled
  program is the one the call then runs (JAX caches it); without glibc nothing is released."""
  if id(program) in _RELEASED:
    return program

  def call(*args):
    if id(program) not in _RELEASED:
      program.lower(*args).compile()
      _RELEASED.add(id(program))
      release_heap()
    return program(*args)

  return call


def release_heap() -> None:
  """Hands the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); nothing where
  the C library is not glibc."""
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):
    pass


def cpu_thread_groups(num: int, shard: bool | None = None, size: int = 0) -> int:
  """Into how many groups to split ``num`` chains that run from separate threads: on a single CPU
  device, XLA runs one program's elementwise work on one core, but two programs called from two
  threads run at once. So when JAX has one device, a CPU, and the process may use several cores,
  the chains are split into the largest number of equal groups, at most one per core, and each
  group's program is called from its own thread (bit for bit the same chains: tested). 1 (no
  split) otherwise, or with ``shard=False``. Several devices are used through sharding instead
  (:func:`mechjax.use_all_cpu_cores`). A model of ``size`` ≥ :data:`THREAD_GROUPS_MAX_PARAMS`
  float parameters gets 1: its matrix products already use every core, and each group's program
  would hold its own parameter-sized temporaries."""
  if shard is False or size >= THREAD_GROUPS_MAX_PARAMS:
    return 1
  devices = jax.devices()
  if len(devices) != 1 or devices[0].platform != "cpu":
    return 1
  groups = min(mechjax.usable_cpu_cores(), num)
  while groups > 1 and num % groups:
    groups -= 1
  return max(groups, 1)


_POOL: list = []


def _in_groups(call: Callable[[int], Any], groups: int, axis: int = 0):
  """``call(0)`` when ``groups`` is 1; otherwise ``call(g)`` for every group ``g`` from its own
  thread, the outputs concatenated along their chain axis ``axis``."""
  if groups == 1:
    return call(0)
  if not _POOL or _POOL[0] < groups:  # (workers, pool): grown when more groups are asked for
    _POOL[:] = [groups, ThreadPoolExecutor(max_workers=groups, thread_name_prefix="mechjax-chains")]
  parts = list(_POOL[1].map(lambda g: jax.block_until_ready(call(g)), range(groups)))
  return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=axis), *parts)


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def per_sample_program(loss_fn, chunk: int):
  """``jit(run)`` with ``run(params, data) -> (n,)``, every sample's loss as a batch of one
  (:func:`mechjax.slt.sgld.per_sample_star_losses`), cached per loss and ``chunk``."""

  @jax.jit
  def run(params, data):
    one = lambda x: loss_fn(params, jax.tree.map(lambda a: a[None], x))  # noqa: E731
    n = jax.tree.leaves(data)[0].shape[0]
    return jax.lax.map(one, data, batch_size=min(chunk, n))

  return run


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def chains_program(
  loss_fn,
  settings: SGLDSettings,
  masked: bool,
  accumulator,
  layout,
  sampler=None,
  per_sample: bool = False,
  support: tuple[bool, ...] | None = None,
):
  """One compiled program per (loss, settings, mask presence, accumulator, device layout, sampler,
  w*-loss path, the mask's support): repeated calls (another key, another w*, other data of the
  same shapes) reuse it instead of tracing and compiling again. A sampler is part of the program;
  arrays are its arguments."""

  def run(params_star, data, keys, param_mask, accumulator_data, star_losses):
    chain = lambda k: sample_chain(
      loss_fn,
      params_star,
      data if sampler is None else sampler,
      k,
      settings.num_steps,
      settings,
      param_mask if masked else None,
      accumulator,
      accumulator_data,
      star_losses if per_sample else None,
      support=support,
      constrain=sharding_lib.model_constraint(layout),
    )
    return over_chains(chain, chain_loop(settings), keys)

  return jit_over_chains(run, layout, num_args=6)


@functools.lru_cache(maxsize=PROGRAM_CACHE_SIZE)
def points_program(
  loss_fn, settings: SGLDSettings, masked: bool, layout, sampler, per_sample, support=None
):
  """:func:`mechjax.slt.sgld.sample_points`' program, cached like :func:`chains_program`: one
  ``vmap`` over the ``B × num_chains`` chains, each gathering its point's ``w*`` (and per-sample
  losses) by index. One flat axis compiles in about half the time of a ``vmap`` over points of a
  ``vmap`` over chains, and runs the same chains bit for bit."""

  def run(params_stack, data, keys, points, param_mask, star_losses):
    def chain(key, point):
      return sample_chain(
        loss_fn,
        jax.tree.map(lambda a: a[point], params_stack),
        data if sampler is None else sampler,
        key,
        settings.num_steps,
        settings,
        param_mask if masked else None,
        star_losses=star_losses[point] if per_sample else None,
        support=support,
        constrain=sharding_lib.model_constraint(layout),
      )

    return over_chains(chain, chain_loop(settings), keys, points)

  return jit_over_chains(run, layout, num_args=6, split_args=(2, 3))


def jit_over_chains(
  run: Callable, layout, chain_axis: int = 0, num_args: int = 5, split_args=(2,), split_axes=None
):
  """``jit(run)`` for ``run(params, data, keys, mask, accumulator_data, ...)`` (``num_args``
  arguments; the chain keys, and any other per-chain arguments, at the positions ``split_args``,
  each with its chain axis first or at ``split_axes[position]``).

  With a ``layout`` (a mesh whose first axis is ``chains``: :func:`mechjax.sharding.leading_axis`'s,
  or :func:`mechjax.sharding.sampler_mesh`'s) ``run`` becomes the body of a ``shard_map`` that is
  manual over ``chains``: each device runs ``run`` on its own share of the per-chain arguments
  (everything else is whole along ``chains``), and the outputs are its chains' rows, concatenated
  along ``chain_axis``. Each device's chains then run as ``run`` says (``vmap`` or ``lax.map``),
  which a program partitioned by XLA could not do for a ``lax.map`` over the split axis. A
  ``model`` axis stays XLA's to partition: the arguments arrive split over it
  (:func:`mechjax.sharding.place`) and ``run`` constrains what it carries to the same rule."""
  if layout is None:
    return OneDeviceProgram(run)
  options = sharding_lib.compiler_options()
  name = layout.axis_names[0]
  axes = split_axes or {}
  in_specs = tuple(
    P(*[None] * axes.get(i, 0), name) if i in split_args else P() for i in range(num_args)
  )
  body = jax.shard_map(
    run,
    mesh=layout,
    in_specs=in_specs,
    out_specs=P(*([None] * chain_axis), name),
    axis_names={name},
    check_vma=False,
  )
  return _onto_layout(jax.jit(body, compiler_options=options), layout)


def _onto_layout(program, layout):
  """``program`` whose array arguments held on other devices than ``layout``'s (``w*`` left on one
  device by the training that made it, say) are first replicated over the layout: a jitted
  ``shard_map`` refuses arguments committed elsewhere. Arrays already on the layout's devices (the
  model-axis shards of :func:`mechjax.sharding.place`) are left as they are."""
  devices, replicated = set(layout.devices.flat), NamedSharding(layout, P())

  def move(a):
    if isinstance(a, jax.Array) and a.sharding.device_set != devices:
      return jax.device_put(a, replicated)
    return a

  def call(*args):
    return program(*jax.tree.map(move, args))

  call.lower = lambda *args: program.lower(*jax.tree.map(move, args))
  return call


def per_sample_star_losses(loss_fn, params_star, data, chunk: int = 256) -> jax.Array:
  """``(n,)``: ``loss_fn(params_star, sample_i)`` for every sample of ``data``, each sample as a
  batch of one (``lax.map`` over chunks of ``chunk`` samples, vmapped within a chunk). Their batch
  means equal ``loss_fn`` on the batch exactly when the loss is a mean over samples; whether it is
  is for the caller to check (:func:`mechjax.slt.llc.star_loss_path`).

  Args:
    loss_fn: ``loss_fn(params, batch) -> scalar``.
    params_star: ``w*``.
    data: a pytree of arrays with the ``n`` samples first.
    chunk: samples vmapped together within the ``lax.map``.
  """
  return per_sample_program(loss_fn, chunk)(params_star, data)
