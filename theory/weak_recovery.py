"""Samples that online SGD needs to find the non-Gaussian direction of the spiked-cumulant task: the
model and the law fit of ``theory/phase_sample_complexity.py`` and its fast test.

A single neuron on the unit sphere, ``w ∈ S^{D−1}``, is trained by spherical online SGD on the
structured class of the spiked-cumulant model (:func:`mechjax.data.fourier.sample_spiked`) with the
correlation loss of the fourth Hermite polynomial,

    ℓ(w; x) = He₄(z),   z = w·x / σ_w,   σ_w² = wᵀ C w,   He₄(z) = z⁴ − 6z² + 3.

``z`` has unit variance for every ``w``, and ``E He₄(z)`` is its excess kurtosis ``−2β²/(1+β)²·m⁴``,
where ``m = ⟨C^{1/2} w, v⟩ / ‖C^{1/2} w‖`` is the overlap with the spike in whitened coordinates.
The information exponent is 4 (the latent ``ν`` is symmetric), so Ben Arous, Gheissari & Jagannath
(arXiv:2003.10409) predict weak recovery after ``n ≫ N³ log² N`` samples and failure for ``n ≪ N³``:
the drift ``dm/dt ∝ m³`` starts from ``m₀ ≈ N^{−1/2}``.

Each step draws a minibatch of ``B`` fresh samples, takes the Euclidean gradient, projects it on the
tangent space and re-normalises ``w`` (the retraction). The step size must stay below the noise
threshold, roughly ``lr ≲ κ m₀² B / (c N)``: the spherical-noise term ``∝ lr² N m`` otherwise beats
the drift and the measured exponent rises well above 3. ``lr = lr_scale / D`` with ``B = D`` does
this.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from mechjax import rng
from mechjax.data import fourier
from mechjax.train import loop


def he4(z: jax.Array) -> jax.Array:
  return z**4 - 6.0 * z**2 + 3.0


@dataclasses.dataclass(frozen=True)
class RecoverySetup:
  shape: tuple[int, ...]
  alpha: float = 0.0
  spike: str = "principal"
  beta: float = 5.0
  lr_scale: float = 0.02
  batch_size: int | None = None  # None: B = D.
  threshold: float = 0.5

  @property
  def dim(self) -> int:
    return math.prod(self.shape)

  @property
  def batch(self) -> int:
    return self.dim if self.batch_size is None else self.batch_size

  @property
  def learning_rate(self) -> float:
    return self.lr_scale / self.dim


def spike_keys(seed: int, num_spikes: int) -> list[jax.Array]:
  """The key of teacher spike ``j`` of base seed ``seed``: the stream ``("spike", j)``. Spike ``j``
  at one ``alpha`` and spike ``j`` at another are colourings of the same white draw, so speed-ups
  can be paired by spike."""
  return [rng.key(seed, "spike", j) for j in range(num_spikes)]


def _make_step(setup: RecoverySetup):
  """The spherical SGD step of one neuron; the spike ``u`` and its whitened direction ``v`` are
  leaves of the state, so neurons with different teachers run in one vmapped program."""
  amplitudes = fourier.power_law_amplitudes(setup.shape, setup.alpha)
  ndim = len(setup.shape)

  def whitened_overlap(w, v):
    cw = fourier.colour(w, amplitudes)  # C^{1/2} w
    return jnp.sum(cw * v) / jnp.linalg.norm(cw)

  def loss(w, x_BxS):
    sigma = jnp.linalg.norm(fourier.colour(w, amplitudes))  # σ_w² = wᵀ C w = ‖C^{1/2} w‖²
    z = jnp.sum(x_BxS * w[None], axis=tuple(range(1, ndim + 1))) / sigma
    return jnp.mean(he4(z))

  def step(state, key):
    x = fourier.sample_spiked(
      key, setup.batch, u=state["u"], alpha=setup.alpha, strength=setup.beta
    )
    g = jax.grad(loss)(state["w"], x)
    w = state["w"]
    g = g - jnp.sum(g * w) * w  # Riemannian gradient: the tangent part.
    w = w - setup.learning_rate * g
    w = w / jnp.linalg.norm(w)
    m = whitened_overlap(w, state["v"])
    t = state["step"] + 1
    hit = jnp.where((state["hit"] < 0) & (jnp.abs(m) >= setup.threshold), t, state["hit"])
    return {**state, "w": w, "step": t, "hit": hit}, {}

  return step, whitened_overlap


def samples_to_weak_recovery(
  setup: RecoverySetup,
  *,
  num_seeds: int,
  max_samples: int,
  seed: int = 0,
  num_spikes: int = 1,
  chunk_steps: int = 2000,
  quantile: float = 0.65,
  per_spike: bool = False,
) -> dict:
  """Samples that spherical online SGD needs to reach ``|m| ≥ threshold``, for ``num_spikes``
  teacher spikes × ``num_seeds`` neurons, all in one vmapped program.

  Runs until a ``quantile`` of all neurons (with ``per_spike``, of every spike's seeds) have reached
  the threshold, or ``max_samples``. Spike ``j`` is :func:`spike_keys` ``[j]``; seed ``i`` of spike
  ``j`` has the initial weight and data stream ``("neuron", j, i)`` of ``seed``.

  Args:
    setup: the problem (shape, alpha, spike kind, beta, step size, batch, threshold).
    num_seeds: neurons per spike.
    max_samples: the budget per neuron; a neuron that has not reached the threshold by then counts
      as ``inf``.
    seed: the base seed of the spikes and the neurons.
    num_spikes: teacher spikes.
    chunk_steps: steps per compiled chunk (the stopping rule is checked between chunks).
    quantile: the fraction of the neurons that must reach the threshold before stopping; at least
      one half, so that the median is finite.
    per_spike: apply ``quantile`` to every spike's seeds, so that every spike's median is finite
      (the slowest spike then sets the run time).

  Returns:
    A dict with ``samples`` ``(num_spikes, num_seeds)`` (``inf`` where not reached within
    ``max_samples``, ``0`` for a neuron whose initial overlap is already above the threshold),
    ``median`` (over every spike and seed), ``spike_medians`` ``(num_spikes,)``, the initial
    overlaps ``m0``, ``steps_run`` and ``final_overlap``.
  """
  shape = fourier.check_shape(setup.shape)
  if not 0.5 <= quantile <= 1:
    raise ValueError(f"quantile must be in [0.5, 1] (medians must be finite); got {quantile!r}")
  if num_spikes < 1 or num_seeds < 1:
    raise ValueError(f"num_spikes and num_seeds must be >= 1; got {num_spikes}, {num_seeds}")
  u_SxD = jnp.stack(
    [fourier.make_spike(k, shape, setup.alpha, setup.spike) for k in spike_keys(seed, num_spikes)]
  )
  step, overlap = _make_step(setup)

  def init(key, u):
    k_w, k_data = jax.random.split(key)
    w = jax.random.normal(k_w, shape)
    w = w / jnp.linalg.norm(w)
    centred = u - jnp.mean(u)  # the direction the data carry (colouring removes the DC part)
    return {
      "w": w,
      "u": u,
      "v": centred / jnp.linalg.norm(centred),
      "key": k_data,
      "step": jnp.zeros((), jnp.int32),
      "hit": -jnp.ones((), jnp.int32),
    }

  base = rng.key(seed, "neuron")
  keys = jnp.stack(
    [
      jax.vmap(lambda i, j=j: jax.random.fold_in(jax.random.fold_in(base, j), i))(
        jnp.arange(num_seeds)
      )
      for j in range(num_spikes)
    ]
  ).reshape(num_spikes * num_seeds, -1)
  members_u = jnp.repeat(u_SxD, num_seeds, axis=0)
  state = jax.vmap(init)(keys, members_u)
  m0 = np.asarray(jax.vmap(overlap)(state["w"], state["v"]))
  # A seed that starts above the threshold (possible at small N) has needed no samples at all.
  state["hit"] = jnp.where(jnp.abs(m0) >= setup.threshold, 0, state["hit"]).astype(jnp.int32)
  run_chunk = jax.jit(jax.vmap(lambda s: loop.scan_steps(step, s, chunk_steps)[0]))
  max_steps = int(math.ceil(max_samples / setup.batch))
  steps = 0
  while steps < max_steps:
    state = run_chunk(state)
    steps += chunk_steps
    reached = np.asarray(state["hit"]).reshape(num_spikes, num_seeds) >= 0
    if np.all(np.mean(reached, axis=1) >= quantile) if per_spike else reached.mean() >= quantile:
      break
  hit = np.asarray(state["hit"]).astype(float).reshape(num_spikes, num_seeds)
  samples = np.where(hit >= 0, hit * setup.batch, np.inf)
  samples[samples > max_samples] = np.inf  # the last chunk may run past the budget
  return {
    "samples": samples,
    "median": float(np.median(samples)),
    "spike_medians": np.median(samples, axis=1),
    "m0": m0.reshape(num_spikes, num_seeds),
    "steps_run": steps,
    "final_overlap": np.asarray(jax.vmap(overlap)(state["w"], state["v"])).reshape(
      num_spikes, num_seeds
    ),
  }


# ----------------------------------------------------------------------------------------------
# The law and its check.


def fit_exponent(
  dims: np.ndarray, samples: np.ndarray, log_power: float = 2.0
) -> tuple[float, float]:
  """Least-squares slope and prefactor of ``log(n / log^p N)`` against ``log N``: ``n / log^p N ≈ c
  N^b``."""
  dims = np.asarray(dims, float)
  y = np.log(np.asarray(samples, float) / np.log(dims) ** log_power)
  slope, intercept = np.polyfit(np.log(dims), y, 1)
  return float(slope), float(np.exp(intercept))


def log_factor_slope(dims) -> float:
  """The least-squares slope of ``ln ln N`` against ``ln N`` over the grid: a factor ``(log N)^b``
  adds ``b`` times this to the fitted exponent of ``n``."""
  x = np.log(np.asarray(dims, float))
  return float(np.polyfit(x, np.log(x), 1)[0])


def law_band(dims, exponent: float = 3.0, log_powers=(0.0, 2.0)) -> tuple[float, float]:
  """The fitted exponent of ``n`` that the law ``n = c·N^exponent·(log N)^b``, ``b`` in
  ``log_powers``' range, predicts on this grid: ``exponent + b·s`` with ``s`` the
  :func:`log_factor_slope`."""
  s = log_factor_slope(dims)
  lo, hi = min(log_powers), max(log_powers)
  return exponent + lo * s, exponent + hi * s


def _as_spikes(samples) -> np.ndarray:
  """``(spikes, seeds)``; a 1-D array is one spike."""
  a = np.asarray(samples, float)
  return a[None] if a.ndim == 1 else a


def pooled_medians(samples_per_dim) -> np.ndarray:
  """The median over every spike and seed at each N."""
  return np.array([np.median(_as_spikes(s)) for s in samples_per_dim])


def _resample(generator, samples_SxK: np.ndarray) -> np.ndarray:
  """One hierarchical bootstrap draw: spikes with replacement, then seeds within each spike."""
  s = _as_spikes(samples_SxK)
  spikes = generator.integers(0, s.shape[0], s.shape[0])
  seeds = generator.integers(0, s.shape[1], s.shape)
  return s[spikes[:, None], seeds]


def bootstrap_fits(
  dims, samples_per_dim, *, num_resamples: int = 2000, seed: int = 0, log_power: float = 0.0
) -> tuple[np.ndarray, float]:
  """Fitted exponents of the pooled medians over hierarchical bootstrap resamples (spikes, then
  seeds within spikes, independently at each N).

  Returns the finite fits and the fraction of resamples dropped because a median was ``inf`` (more
  than half of a resample unreached) or ``0`` (more than half started above the threshold).
  """
  generator = np.random.default_rng(seed)
  fits = []
  for _ in range(num_resamples):
    medians = np.array([np.median(_resample(generator, s)) for s in samples_per_dim])
    if np.all(np.isfinite(medians) & (medians > 0)):
      fits.append(fit_exponent(dims, medians, log_power)[0])
  return np.array(fits), 1.0 - len(fits) / num_resamples


def bootstrap_exponent(
  dims: np.ndarray,
  samples_per_dim: list[np.ndarray],
  *,
  num_resamples: int = 2000,
  seed: int = 0,
  log_power: float = 2.0,
) -> tuple[float, float]:
  """16th and 84th percentiles of the fitted exponent of ``n / log^p N`` over
  :func:`bootstrap_fits`."""
  fits, _ = bootstrap_fits(
    dims, samples_per_dim, num_resamples=num_resamples, seed=seed, log_power=log_power
  )
  lo, hi = np.percentile(fits, [16, 84]) if fits.size else (np.nan, np.nan)
  return float(lo), float(hi)


def check_law(
  dims,
  samples_per_dim,
  *,
  exponent: float = 3.0,
  log_powers=(0.0, 2.0),
  confidence: float = 0.95,
  max_tolerance: float = 0.5,
  num_resamples: int = 2000,
  seed: int = 0,
) -> dict:
  """Tests ``n = c·N^exponent·(log N)^b`` with ``b`` in the range of ``log_powers``, in a form that
  can fail in both directions.

  The statistic is ``a``, the least-squares exponent of the pooled median ``n`` against ``N`` (no
  log factor divided out). The law predicts ``a`` in :func:`law_band` (for N³ between N³ and
  N³ log² N, the bounds of Ben Arous, Gheissari & Jagannath, arXiv:2003.10409: ``[3, 3 + 2s]``). A
  free ``b`` cannot be fitted beside ``a``: over a grid of one or two octaves ``ln ln N`` is almost
  linear in ``ln N``, so the two are confounded (on N = 16–64 a free ``b`` multiplies the standard
  error of ``a`` by 16.5); the band carries the log factor instead.

  The tolerance is the Monte-Carlo error of ``a``: the central ``confidence`` interval ``[q_lo,
  q_hi]`` of ``a`` over hierarchical bootstrap resamples (spikes, then seeds within spikes; the
  percentile interval, because the escape time's heavy tail, ``∝ 1/m₀²``, makes the resampled
  exponents heavy-tailed too). PASS when that interval overlaps the band, i.e. ``a`` lies in
  ``[band_lo − (q_hi − a), band_hi + (a − q_lo)]``, and neither reach exceeds ``max_tolerance``: a
  grid whose error bar is wider than that cannot tell N² from N³, and fails as inconclusive.

  Args:
    dims: the grid of N.
    samples_per_dim: per N, the samples ``(spikes, seeds)`` (or ``(seeds,)``), ``inf`` where not
      reached.
    exponent: the law's power of N.
    log_powers: the range of the law's power of ``log N``.
    confidence: the confidence of the tolerance.
    max_tolerance: the widest tolerance for which a verdict is given.
    num_resamples: bootstrap resamples.
    seed: the bootstrap's seed.

  Returns:
    A dict: ``exponent`` (``a``), ``band``, ``bootstrap_interval``, ``tolerance`` (below, above),
    ``interval``, ``passed``, ``inconclusive``, ``bootstrap_dropped``, ``medians`` and ``reason``.
  """
  dims = np.asarray(dims, float)
  medians = pooled_medians(samples_per_dim)
  band = law_band(dims, exponent, log_powers)
  if not np.all(np.isfinite(medians) & (medians > 0)):
    return {
      "exponent": None,
      "band": list(band),
      "bootstrap_interval": None,
      "tolerance": None,
      "interval": None,
      "passed": False,
      "inconclusive": True,
      "bootstrap_dropped": None,
      "medians": medians.tolist(),
      "reason": "at some N the median is not a positive number of samples (fewer than half of "
      "the neurons reached weak recovery, or more than half started above the threshold)",
    }
  a = fit_exponent(dims, medians, log_power=0.0)[0]
  fits, dropped = bootstrap_fits(dims, samples_per_dim, num_resamples=num_resamples, seed=seed)
  if fits.size < 2:
    q_lo, q_hi = -np.inf, np.inf
  else:
    q_lo, q_hi = np.percentile(fits, [50 * (1 - confidence), 50 * (1 + confidence)])
  tol_below, tol_above = float(q_hi - a), float(a - q_lo)  # how far a's error reaches either way
  tol = max(tol_below, tol_above)
  interval = (band[0] - tol_below, band[1] + tol_above)
  inconclusive = not tol <= max_tolerance
  inside = interval[0] <= a <= interval[1]
  reason = (
    f"the tolerance {tol:.2f} exceeds {max_tolerance:g}: too few seeds or spikes to tell"
    if inconclusive
    else ("within the interval" if inside else "outside the interval")
  )
  return {
    "exponent": a,
    "band": list(band),
    "bootstrap_interval": [float(q_lo), float(q_hi)],
    "tolerance": [tol_below, tol_above],
    "interval": list(interval),
    "passed": bool(inside and not inconclusive),
    "inconclusive": inconclusive,
    "bootstrap_dropped": dropped,
    "medians": medians.tolist(),
    "reason": reason,
  }


def inject_exponent(dims, samples_per_dim, exponent: float) -> list[np.ndarray]:
  """The same samples rescaled at each N by ``(N/N₀)^(exponent − a)``, so that their pooled medians
  grow exactly like ``N^exponent`` while the spread of every N is kept: the input of the check's
  control (an injected ``n ∝ N²`` must FAIL)."""
  dims = np.asarray(dims, float)
  a = fit_exponent(dims, pooled_medians(samples_per_dim), log_power=0.0)[0]
  scale = (dims / dims[0]) ** (exponent - a)
  return [_as_spikes(s) * f for s, f in zip(samples_per_dim, scale)]


def spread(values, low: float = 16, high: float = 84) -> dict:
  """The median and the ``low``–``high`` percentiles of ``values`` (non-finite values sort last)."""
  v = np.asarray(values, float)
  v = np.where(np.isnan(v), np.inf, v)
  lo, med, hi = np.percentile(v, [low, 50, high], method="inverted_cdf")
  return {"median": float(med), f"p{low:g}": float(lo), f"p{high:g}": float(hi)}


def spike_speedups(base_SxK, faster_SxK) -> np.ndarray:
  """Per spike of the faster setting: the pooled median of the base setting over that spike's
  median. The base is isotropic (alpha = 0), where every spike is the same problem up to a rotation,
  so its pooled median is each spike's baseline, and the spread of these ratios is the spread that
  the spike drawn at alpha > 0 causes (a median of 0 samples counts as 1)."""
  return np.median(_as_spikes(base_SxK)) / np.maximum(np.median(_as_spikes(faster_SxK), axis=1), 1)


def bootstrap_speedup(
  base_SxK, faster_SxK, *, num_resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
  """The 16th and 84th percentiles of the ratio of pooled medians when, in each setting, spikes and
  then seeds are resampled (a median of 0 samples counts as 1)."""
  b, f = _as_spikes(base_SxK), _as_spikes(faster_SxK)
  generator = np.random.default_rng(seed)
  ratios = []
  for _ in range(num_resamples):
    rb, rf = _resample(generator, b), _resample(generator, f)
    ratios.append(np.median(rb) / max(np.median(rf), 1.0))
  ratios = np.array(ratios)
  ratios = ratios[np.isfinite(ratios)]
  lo, hi = np.percentile(ratios, [16, 84]) if ratios.size else (np.nan, np.nan)
  return float(lo), float(hi)
