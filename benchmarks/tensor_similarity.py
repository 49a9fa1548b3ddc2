"""Tensor similarity: against the reference implementation, against materialising the tensors, and
the speed of the depth-1 Gaussian similarity and of ``similarity_matrix``.

    python -m benchmarks.tensor_similarity --reference=CHECKOUT  # against tdooms/tensor-similarity
    python -m benchmarks.tensor_similarity  # widths 8..48
    python -m benchmarks.tensor_similarity --widths=8,16,32,64 --max_gib=20

**Against the reference** (``--reference``, the folder of a tdooms/tensor-similarity checkout that
holds ``src/``; its requirements are in ``benchmarks/requirements.txt``). Table 1, the headline: the
reference's own networks ``DeepMLP(in, 128, hidden, 10)`` (:func:`walk`) at depths 1 and 2, inputs
64, 256 and 784, hidden widths 64–2048, 16 checkpoints of a random walk read by both tools from the
same weights (checked on a forward pass): the depth-1 Gaussian similarity and the unsymmetrised and
symmetrised Frobenius similarities, for checkpoints 0 and 15 and for the 16 × 16 matrix, float32 and
float64, each tool in a fresh process per cell (the reference with an empty path cache; its path
search is timed apart). Table 2 (``--bare``): bare bilinear layers ``in → hidden → 10``, which the
reference reads as a ``DeepMLP`` with an identity embed. Both print each tool's peak resident
memory.

**Gaussian, depth 1.** ``tensor_similarity(a, b, measure="gaussian")`` for one bilinear layer
``in → hidden → 10`` on a grid of inputs 64–784 and hidden widths 64–2048, float32 and float64: the
best warm time of a call, the path it takes (through the hidden units or through the quadratic
forms, :func:`gaussian_plan`), its rate in GFLOP/s and the share of
the float32 matmul peak measured in the same run. **Matrix.** ``similarity_matrix`` of 16 networks
(in 64, hidden 64): the first call (tracing and compiling) and the next ones (compiled once per
architecture). The reference implementation is not run here.

**Recursion vs brute force.**
Two networks ``Bilinear(d → d, hidden d) → Bilinear(d → d, hidden d)``, node-wise symmetrised,
float32. The brute-force side builds both order-5 tensors (``d⁵`` entries each) and takes their dot
product; the recursion never forms anything larger than ``d × d``. Both are jitted; each time is the
best of --repeats after a warm-up (compilation excluded), side by side in one run, and the table
reports their ratio and the relative difference of the two results. Widths whose brute force would
need more than --max_gib (estimated as 6 tensors' worth of float32: the two results and the
intermediates) are timed for the recursion only.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks.timing import best_time
from mechjax import cli
from mechjax.models import bilinear as bl
from mechjax.similarity import depth_one
from mechjax.similarity import reference
from mechjax.similarity import tensor as ts

flags.DEFINE_list(
  "widths", ["8", "16", "24", "32", "48", "64"], "Widths d (input, hidden and output)."
)
flags.DEFINE_float("max_gib", 8.0, "Memory allowed for the brute-force side.")
flags.DEFINE_integer("repeats", 3, "Timed repetitions; the best is kept.")
flags.DEFINE_bool("gaussian", True, "Also time the depth-1 Gaussian similarity and the matrix.")
flags.DEFINE_string(
  "reference",
  None,
  "A checkout of tdooms/tensor-similarity (the folder holding src/): time the matched quantities "
  "side by side with it, each tool in its own process, instead of the sections above.",
)
flags.DEFINE_bool(
  "bare", True, "With --reference: also the second table, bare bilinear layers (in → hidden → 10)."
)
flags.DEFINE_list(
  "cells",
  [],
  "With --reference: the cells of the first table to run, as depthxinxhidden (e.g. 1x784x256); "
  "empty runs them all.",
)
flags.DEFINE_enum(
  "worker",
  None,
  ["mechjax", "reference", "deep_mechjax", "deep_reference"],
  "Internal: one side of --reference.",
)
flags.DEFINE_string("out", None, "Internal: where a --reference worker writes its values.")
flags.register_validator(
  "cells",
  lambda v: (
    all(len(c.split("x")) == 3 and all(p.isdigit() for p in c.split("x")) for c in v)
    and all(int(c.split("x")[0]) in DEPTHS for c in v)
  ),
  message="must be cells depthxinxhidden with depth 1 or 2, e.g. 1x784x256",
)
flags.register_validator(
  "widths",
  lambda v: bool(v) and all(s.isdigit() and int(s) >= 2 for s in v),
  message="must be a list of integers >= 2",
)
cli.positive_float("max_gib")
cli.positive_int("repeats")
FLAGS = flags.FLAGS


def network(rng, d):
  layer = lambda: {
    "left": rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d),
    "right": rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d),
    "out": rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d),
  }
  return [
    {k: jnp.asarray(v) for k, v in layer().items()},
    {k: jnp.asarray(v) for k, v in layer().items()},
  ]


GAUSSIAN_GRID = [
  (64, 64),
  (64, 512),
  (64, 2048),
  (256, 256),
  (256, 2048),
  (784, 64),
  (784, 512),
  (784, 2048),
]
OUTPUTS = 10


def single(rng, d, h, dtype):
  return [
    {
      "left": jnp.asarray((rng.normal(size=(h, d)) / np.sqrt(d)).astype(dtype)),
      "right": jnp.asarray((rng.normal(size=(h, d)) / np.sqrt(d)).astype(dtype)),
      "out": jnp.asarray((rng.normal(size=(OUTPUTS, h)) / np.sqrt(h)).astype(dtype)),
    }
  ]


def gaussian_plan(d: int, h: int) -> tuple[str, int]:
  """The contraction path ``tensor_similarity(measure="gaussian")`` takes for two bare layers
  ``d → h → 10`` (one of :data:`~mechjax.similarity.depth_one.DEPTH_ONE_PATHS`; three inner products
  among two networks) and its multiply-adds, from the shapes alone."""
  net = [{k: np.broadcast_to(0.0, s) for k, s in (("left", (h, d)), ("right", (h, d)))}]
  net[0]["out"] = np.broadcast_to(0.0, (OUTPUTS, h))
  forms, keep = depth_one._depth_one_plan(net, net, 3, 2, True)
  work = depth_one._depth_one_costs(net, net, 3, 2, True)[(forms, keep)]
  return depth_one.DEPTH_ONE_PATHS[2 * forms + keep], work


def gaussian_section(rng):
  f = jax.jit(lambda x: x @ x)
  m = jnp.ones((1024, 1024), jnp.float32)
  peak = 2 * 1024**3 / best_time(lambda: f(m), 10) / 1e9
  print(f"\nGaussian similarity, depth 1 (in → hidden → {OUTPUTS}), best of {FLAGS.repeats}")
  print(f"matmul peak {peak:.0f} GFLOP/s (float32 1024²)")
  print(
    f"{'dtype':>8s}{'in':>6s}{'hidden':>8s}{'time (s)':>11s}{'path':>16s}{'GFLOP/s':>9s}"
    f"{'of peak':>9s}"
  )
  for dtype in (np.float32, np.float64):
    if dtype == np.float64 and not jax.config.jax_enable_x64:
      print(f"{'float64':>8s}  skipped: run with JAX_ENABLE_X64=1")
      continue
    for d, h in GAUSSIAN_GRID:
      a, b = single(rng, d, h, dtype), single(rng, d, h, dtype)
      t = best_time(lambda: ts.tensor_similarity(a, b, measure="gaussian"), FLAGS.repeats)
      path, work = gaussian_plan(d, h)
      rate = 2 * work / t / 1e9
      print(
        f"{np.dtype(dtype).name:>8s}{d:6d}{h:8d}{t:11.2e}{path:>16s}{rate:9.1f}{rate / peak:8.0%}"
      )
  nets = [single(rng, 64, 64, np.float32) for _ in range(16)]
  times = []
  for _ in range(3):
    t0 = time.perf_counter()
    ts.similarity_matrix(nets)
    times.append(time.perf_counter() - t0)
  print(
    f"\nsimilarity_matrix, 16 × 16 (in 64, hidden 64): first call {times[0]:.3f} s (compiles), "
    f"then {times[1]:.4f} s and {times[2]:.4f} s"
  )


# ----------------------------------------------------------------------------------------------
# The reference's own networks (--reference, the first table).
DEEP_GRID = [(d, h) for d in (64, 256, 784) for h in (64, 256, 1024, 2048)]
DEPTHS = (1, 2)
D_MODEL, CHECKPOINTS, WALK_STEP = 128, 16, 0.15
DEEP_MEASURES = {  # (measure, symmetrize) per depth: the Gaussian measure is exact at depth 1 only
  1: [("gaussian", True), ("frobenius", False), ("frobenius", True)],
  2: [("frobenius", False), ("frobenius", True)],
}
DEEP_NAMES = {
  ("gaussian", True): "Gaussian",
  ("frobenius", False): "Frobenius",
  ("frobenius", True): "Frobenius, sym.",
}


def _cell(text: str) -> tuple[int, int, int]:
  depth, d, h = (int(x) for x in text.split("x"))
  return depth, d, h


def walk(depth: int, d: int, h: int) -> list[dict]:
  """``CHECKPOINTS`` checkpoints of a random walk from the reference's own initialisation of
  ``DeepMLP(d, D_MODEL, h, OUTPUTS, n_layers=depth)`` (torch's ``Linear``: uniform in
  ``±1/√fan_in``), each step adding Gaussian noise of ``WALK_STEP`` times that bound to every
  weight. Weights ``{"embed": E, "body": [(L, R, D), …], "head": U}`` in float64, ``(out, in)``
  like torch."""
  rng = np.random.default_rng([depth, d, h])

  def linear(o, i):
    return rng.uniform(-1, 1, (o, i)) / np.sqrt(i)

  w = {
    "embed": linear(D_MODEL, d),
    "body": [(linear(h, D_MODEL), linear(h, D_MODEL), linear(D_MODEL, h)) for _ in range(depth)],
    "head": linear(OUTPUTS, D_MODEL),
  }
  step = lambda m: m + WALK_STEP * rng.normal(size=m.shape) / np.sqrt(m.shape[1])  # noqa: E731
  out = [w]
  for _ in range(CHECKPOINTS - 1):
    w = {
      "embed": step(w["embed"]),
      "body": [tuple(step(m) for m in layer) for layer in w["body"]],
      "head": step(w["head"]),
    }
    out.append(w)
  return out


def as_layers(w: dict, dtype) -> list[dict]:
  """mechjax's weight format of the same network: ``[E, (L, R, D), …, U]``."""
  layers = [{"weight": w["embed"]}]
  layers += [{"left": l, "right": r, "out": o} for l, r, o in w["body"]]
  layers.append({"weight": w["head"]})
  return [{k: np.asarray(v, dtype) for k, v in layer.items()} for layer in layers]


def forward(w: dict, x: np.ndarray) -> np.ndarray:
  """The network in NumPy, float64: the conversion's check."""
  h = x @ w["embed"].T
  for l, r, o in w["body"]:
    h = ((h @ l.T) * (h @ r.T)) @ o.T
  return h @ w["head"].T


def _relative(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _pair_and_matrix(pair, matrix, repeats: int, sync=lambda x: x) -> dict:
  """Times and values of one quantity: the pair (checkpoints 0 and K − 1, the farthest apart) and
  the ``K × K`` matrix; warm times, best of ``repeats`` after a first call (once, if that first call
  took over 5 s)."""
  out = {}
  for name, call in (("pair", pair), ("matrix", matrix)):
    t0 = time.perf_counter()
    value = sync(call())
    first = time.perf_counter() - t0
    times = []
    for _ in range(1 if first > 5 else repeats):
      t0 = time.perf_counter()
      sync(call())
      times.append(time.perf_counter() - t0)
    out[name] = {"time": min(times), "first": first, "value": np.asarray(value).tolist()}
  return out


def deep_mechjax(depth: int, d: int, h: int) -> dict:
  """mechjax's side of one cell, float32 then float64."""
  out = {}
  weights = walk(depth, d, h)
  x = np.random.default_rng(0).normal(size=(8, d))
  for dtype in (np.float32, np.float64):
    nets = [jax.tree.map(jnp.asarray, as_layers(w, dtype)) for w in weights]
    cell = {"forward": _relative(bl.apply_layers(nets[0], x.astype(dtype)), forward(weights[0], x))}
    for measure, sym in DEEP_MEASURES[depth]:
      kw = {"measure": measure} if measure == "gaussian" else {"symmetrize": sym}
      cell[f"{measure}/{sym}"] = _pair_and_matrix(
        lambda: ts.tensor_similarity(nets[0], nets[-1], **kw),
        lambda: ts.similarity_matrix(nets, **kw),
        FLAGS.repeats,
        jax.block_until_ready,
      )
    out[np.dtype(dtype).name] = cell
  return out


def deep_reference(depth: int, d: int, h: int) -> dict:
  """The reference's side of one cell, float32 then float64: its ``DeepMLP``s built (and, for the
  symmetrised Frobenius measure, their L ↔ R exchanged copies) outside the timing; its path search
  (``precompile``, for the Gaussian measure) timed apart."""
  import torch

  from benchmarks import tensor_reference as ref

  ref.load(FLAGS.reference)
  torch.set_grad_enabled(False)
  weights = walk(depth, d, h)
  x = np.random.default_rng(0).normal(size=(8, d))
  out = {}
  for dtype in ("float32", "float64"):
    models = [ref.deep_mlp(w, dtype) for w in weights]
    swaps = [ref.swapped(m) for m in models]
    y = models[0](torch.as_tensor(x, dtype=getattr(torch, dtype))).numpy()
    cell = {"forward": _relative(y, forward(weights[0], x)), "precompile_s": 0.0}
    for measure, sym in DEEP_MEASURES[depth]:
      if measure == "gaussian":
        cell["precompile_s"] += ref.precompile(models)
      pair_swaps = (swaps[-1], swaps[0]) if sym and measure == "frobenius" else (None, None)
      cell[f"{measure}/{sym}"] = _pair_and_matrix(
        lambda: ref.similarity(models[0], models[-1], measure, *pair_swaps),
        lambda: ref.matrix(models, measure, swaps if sym and measure == "frobenius" else None),
        FLAGS.repeats,
      )
    out[dtype] = cell
  return out


def deep_comparison() -> list[float]:
  """Every cell of the reference's own networks, each tool in a fresh process per cell (the
  reference with an empty path cache, so that its path search sees that cell's shapes); prints the
  first table and returns the speed-ups."""
  import json
  import os
  import tempfile

  from benchmarks import timing

  cells = (
    [_cell(c) for c in FLAGS.cells]
    if FLAGS.cells
    else [(depth, d, h) for depth in DEPTHS for d, h in DEEP_GRID]
  )
  results, walls, peaks = {}, {"mechjax": 0.0, "reference": 0.0}, {"mechjax": 0.0, "reference": 0.0}
  for cell in cells:
    for side in ("mechjax", "reference"):
      with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        wall, info = timing.run_worker(
          "benchmarks.tensor_similarity",
          f"--worker=deep_{side}",
          f"--cells={'x'.join(map(str, cell))}",
          f"--out={out}",
          f"--repeats={FLAGS.repeats}",
          f"--reference={FLAGS.reference}",
          env={"HOME": tmp},  # the reference's path cache lives under ~/.cache: empty each time
        )
        with open(out) as f:
          results[(side, cell)] = json.load(f)
      walls[side] += wall
      peaks[side] = max(peaks[side], info["peak_rss_mib"])
  print(
    f"Table 1: the reference's own networks, DeepMLP(in, {D_MODEL}, hidden, {OUTPUTS}) at depths 1 "
    f"and 2 (no bias, no residual: its defaults), {CHECKPOINTS} checkpoints of a random walk; "
    "mechjax reads the same weights as [embed, bilinear, …, head]. Warm times in seconds, best of "
    f"{FLAGS.repeats}; the pair is checkpoints 0 and {CHECKPOINTS - 1}; each tool in its own "
    "process per cell"
  )
  print(
    f"{'dtype':>7s} {'depth':>5s} {'measure':>15s} {'in':>4s} {'hidden':>6s} | "
    f"{'pair: mechjax':>14s} {'reference':>9s} {'speed-up':>8s} | {'16×16: mechjax':>14s} "
    f"{'reference':>9s} "
    f"{'speed-up':>8s} | {'rel. diff':>9s} {'f32 error: mechjax':>18s} {'reference':>9s}"
  )
  speedups, worst_forward, precompile = [], 0.0, 0.0
  for dtype in ("float32", "float64"):
    for cell in cells:
      depth, d, h = cell
      ours, theirs = results[("mechjax", cell)][dtype], results[("reference", cell)][dtype]
      truth = results[("mechjax", cell)]["float64"]
      worst_forward = max(worst_forward, ours["forward"], theirs["forward"])
      precompile += theirs["precompile_s"]
      for measure, sym in DEEP_MEASURES[depth]:
        key = f"{measure}/{sym}"
        row, rel, errs = [], 0.0, [0.0, 0.0]
        for part in ("pair", "matrix"):
          t_m, t_r = ours[key][part]["time"], theirs[key][part]["time"]
          speedups.append(t_r / t_m)
          row.append(f"{t_m:14.2e} {t_r:9.2e} {t_r / t_m:7.1f}x")
          v_m, v_r = ours[key][part]["value"], theirs[key][part]["value"]
          rel = max(rel, _relative_entries(v_m, v_r))
          errs = [
            max(errs[0], _relative_entries(v_m, truth[key][part]["value"])),
            max(errs[1], _relative_entries(v_r, truth[key][part]["value"])),
          ]
        err = f"{errs[0]:18.1e} {errs[1]:9.1e}" if dtype == "float32" else ""
        print(
          f"{dtype:>7s} {depth:5d} {DEEP_NAMES[(measure, sym)]:>15s} {d:4d} {h:6d} | {row[0]} | "
          f"{row[1]} | {rel:9.1e} {err}"
        )
  print(
    f"\nTable 1 speed-ups: smallest {min(speedups):.1f}x, geometric mean "
    f"{np.exp(np.mean(np.log(speedups))):.1f}x over {len(speedups)} cells. The conversion: both "
    f"tools' forward passes agree with NumPy's to {worst_forward:.1e} (relative, float32 "
    f"included). The reference's path searches (precompile, untimed above): {precompile:.1f} s."
  )
  for side in ("mechjax", "reference"):
    print(
      f"{side}: {len(cells)} processes, {walls[side]:.1f} s in all, largest peak resident memory "
      f"{peaks[side]:.0f} MiB"
    )
  return speedups


def _relative_entries(a, b) -> float:
  """The largest entry-wise relative difference of two similarities (or matrices of them)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


# ----------------------------------------------------------------------------------------------
# Side by side with the reference implementation (--reference).
MATRIX_K, MATRIX_SHAPE = 16, (64, 64)
MEASURE_NAMES = {"gaussian": "Gaussian", "frobenius": "Frobenius, unsymmetrised"}


def reference_networks(dtype) -> dict:
  """The same random networks for both sides: a pair per grid cell and the matrix's 16, each a
  shared base plus independent noise of half its size, so that similarities are far from 0 (about
  0.6) and a relative difference is relative to a number of order one."""
  rng = np.random.default_rng(1)

  def layer(d, h):
    return {
      "left": rng.normal(size=(h, d)) / np.sqrt(d),
      "right": rng.normal(size=(h, d)) / np.sqrt(d),
      "out": rng.normal(size=(OUTPUTS, h)) / np.sqrt(h),
    }

  def around(base, d, h):  # NumPy: the reference's process need not start JAX
    noise = layer(d, h)
    return [{k: (base[k] + 0.5 * noise[k]).astype(dtype) for k in base}]

  nets = {}
  for d, h in GAUSSIAN_GRID:
    base = layer(d, h)
    nets[(d, h)] = [around(base, d, h), around(base, d, h)]
  base = layer(*MATRIX_SHAPE)
  nets["matrix"] = [around(base, *MATRIX_SHAPE) for _ in range(MATRIX_K)]
  return nets


def mechjax_side(dtype) -> dict:
  """Warm times (best of --repeats after one call) and values of mechjax's matched quantities."""
  out = {}
  nets = {
    k: [jax.tree.map(jnp.asarray, n) for n in v] for k, v in reference_networks(dtype).items()
  }
  calls = {
    "gaussian": lambda a, b: ts.tensor_similarity(a, b, measure="gaussian"),
    "frobenius": lambda a, b: ts.tensor_similarity(a, b, symmetrize=False),
  }
  for d, h in GAUSSIAN_GRID:
    a, b = nets[(d, h)]
    for measure, call in calls.items():
      t = best_time(lambda: call(a, b), FLAGS.repeats)
      out[f"{measure}/{d}/{h}"] = (t, float(call(a, b)))
  for measure in calls:
    kw = {"measure": "gaussian"} if measure == "gaussian" else {"symmetrize": False}
    first = time.perf_counter()
    m = ts.similarity_matrix(nets["matrix"], **kw)
    first = time.perf_counter() - first
    t = best_time(lambda: ts.similarity_matrix(nets["matrix"], **kw), FLAGS.repeats)
    out[f"{measure}/matrix"] = (t, m.tolist(), first)
  return out


def reference_side(dtype) -> dict:
  """The same for the reference, its models built outside the timing; a slow cell (over 5 s a
  call) is timed once after its warm-up."""
  import torch

  from benchmarks import tensor_reference as ref

  ref.load(FLAGS.reference)
  torch.set_grad_enabled(False)
  nets = reference_networks(dtype)
  name = np.dtype(dtype).name
  out = {"precompile_s": 0.0}
  for key in [*GAUSSIAN_GRID, "matrix"]:
    models = [ref.model(n, name) for n in nets[key]]
    out["precompile_s"] += ref.precompile(models)
    for measure in ("gaussian", "frobenius"):
      if key == "matrix":
        call = lambda: ref.matrix(models, measure)
      else:
        call = lambda: ref.similarity(models[0], models[1], measure)
      t0 = time.perf_counter()
      value = call()
      first = time.perf_counter() - t0
      repeats = 1 if first > 5 else FLAGS.repeats
      best = min(_timed(call) for _ in range(repeats))
      label = "matrix" if key == "matrix" else f"{key[0]}/{key[1]}"
      out[f"{measure}/{label}"] = (best, value.tolist() if key == "matrix" else value, first)
  return out


def _timed(call) -> float:
  t = time.perf_counter()
  call()
  return time.perf_counter() - t


def reference_comparison():
  """Both sides in their own processes, float32 then float64; the parent prints the table."""
  import json
  import os
  import tempfile

  from benchmarks import timing

  results = {}
  with tempfile.TemporaryDirectory() as tmp:
    for side in ("mechjax", "reference"):
      out = os.path.join(tmp, side + ".json")
      wall, info = timing.run_worker(
        "benchmarks.tensor_similarity",
        f"--worker={side}",
        f"--out={out}",
        f"--repeats={FLAGS.repeats}",
        f"--reference={FLAGS.reference}",
      )
      with open(out) as f:
        results[side] = json.load(f)
      results[side]["wall_s"], results[side]["peak_rss_mib"] = wall, info["peak_rss_mib"]
  ours, theirs = results["mechjax"], results["reference"]
  print(
    f"tensor similarity against the reference (tdooms/tensor-similarity at {FLAGS.reference}), "
    f"depth 1, in → hidden → {OUTPUTS}; warm times, best of {FLAGS.repeats} (the reference's "
    "calls over 5 s: once after a warm-up); each tool in its own process"
  )
  print(
    f"{'dtype':>8s} {'measure':>25s} {'in':>5s} {'hidden':>7s} {'mechjax (s)':>12s} "
    f"{'reference (s)':>14s} {'speed-up':>9s} {'rel. diff':>10s} {'error vs float64: mechjax':>26s}"
    f" {'reference':>10s}"
  )
  speedups = []
  for dtype in ("float32", "float64"):
    for measure in ("gaussian", "frobenius"):
      for d, h in [*GAUSSIAN_GRID, ("matrix", "")]:
        key = f"{measure}/{d}/{h}" if h != "" else f"{measure}/matrix"
        t_m, v_m = ours[dtype][key][:2]
        t_r, v_r = theirs[dtype][key][:2]
        v_m, v_r = np.asarray(v_m), np.asarray(v_r)
        scale = lambda v: np.maximum(np.abs(v), 1e-300)  # noqa: E731
        rel = float(np.max(np.abs(v_m - v_r) / scale(v_r)))
        errors = ""
        if dtype == "float32":  # the same networks in float64 (rounded to float32 here): the truth
          truth = np.asarray(ours["float64"][key][1])
          err = lambda v: float(np.max(np.abs(v - truth) / scale(truth)))  # noqa: E731
          errors = f"{err(v_m):26.1e} {err(v_r):10.1e}"
        speedups.append(t_r / t_m)
        cell = (f"{d:>5d} {h:>7d}") if h != "" else f"{MATRIX_K}×{MATRIX_K} {MATRIX_SHAPE}"
        print(
          f"{dtype:>8s} {MEASURE_NAMES[measure]:>25s} {cell:>13s} {t_m:12.2e} {t_r:14.2e} "
          f"{t_r / t_m:8.1f}x {rel:10.1e} {errors}"
        )
  print(
    f"\nspeed-up over every cell: smallest {min(speedups):.1f}x, geometric mean "
    f"{np.exp(np.mean(np.log(speedups))):.1f}x; the reference's path search (precompile) took "
    f"{theirs['float32']['precompile_s'] + theirs['float64']['precompile_s']:.2f} s in all "
    "(untimed above)"
  )
  for side, r in (("mechjax", ours), ("reference", theirs)):
    print(
      f"{side}: whole process {r['wall_s']:.1f} s, peak resident memory {r['peak_rss_mib']:.0f} MiB"
    )


def reference_worker():
  import json

  jax.config.update("jax_enable_x64", True)  # float64 rows; float32 inputs stay float32
  if FLAGS.worker.startswith("deep_"):
    side = deep_mechjax if FLAGS.worker == "deep_mechjax" else deep_reference
    (cell,) = FLAGS.cells
    out = side(*_cell(cell))
  else:
    side = mechjax_side if FLAGS.worker == "mechjax" else reference_side
    out = {np.dtype(dt).name: side(dt) for dt in (np.float32, np.float64)}
  with open(FLAGS.out, "w") as f:
    json.dump(out, f)
  print(json.dumps({"done": True}))


def main(argv):
  del argv
  if FLAGS.worker:
    reference_worker()
    return
  if FLAGS.reference:
    speedups = deep_comparison()
    print()
    if FLAGS.bare:
      reference_comparison()
    print(
      f"\nTable 1 (the reference's own networks): at least 2x in every cell: "
      f"{'yes' if min(speedups) >= 2 else 'NO'}"
    )
    return
  rng = np.random.default_rng(0)
  recursion = jax.jit(lambda a, b: ts.tensor_inner(a, b))
  brute = jax.jit(lambda a, b: reference.brute_force_inner(a, b))
  print(
    f"device: {jax.devices()[0].platform}; depth 2 (two bilinear layers), float32, best of "
    f"{FLAGS.repeats}"
  )
  print(
    f"{'width d':>8s}{'tensor entries':>16s}{'recursion (s)':>15s}"
    f"{'brute force (s)':>17s}{'ratio':>10s}"
    f"{'rel. diff':>11s}"
  )
  for d in (int(w) for w in FLAGS.widths):
    a, b = network(rng, d), network(rng, d)
    entries = d**5
    t_rec = best_time(lambda: recursion(a, b), FLAGS.repeats)
    if 6 * entries * 4 / 2**30 > FLAGS.max_gib:
      print(f"{d:8d}{entries:16,d}{t_rec:15.2e}{'  skipped (memory)':>17s}")
      continue
    t_bf = best_time(lambda: brute(a, b), FLAGS.repeats)
    r, bf = float(recursion(a, b)), float(brute(a, b))
    print(
      f"{d:8d}{entries:16,d}{t_rec:15.2e}{t_bf:17.2e}{t_bf / t_rec:9.0f}x"
      f"{abs(r - bf) / abs(bf):11.1e}"
    )
  if FLAGS.gaussian:
    gaussian_section(rng)


if __name__ == "__main__":
  cli.execute(main)
