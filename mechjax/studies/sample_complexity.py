"""Samples that online SGD needs to find the non-Gaussian direction of the spiked-cumulant task.

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


def _make_step(setup: RecoverySetup, u: jax.Array):
  amplitudes = fourier.power_law_amplitudes(setup.shape, setup.alpha)
  ndim = len(setup.shape)
  v = u / jnp.linalg.norm(u)

  def whitened_overlap(w):
    cw = fourier.colour(w, amplitudes)  # C^{1/2} w
    return jnp.sum(cw * v) / jnp.linalg.norm(cw)

  def loss(w, x_BxS):
    sigma = jnp.linalg.norm(fourier.colour(w, amplitudes))  # σ_w² = wᵀ C w = ‖C^{1/2} w‖²
    z = jnp.sum(x_BxS * w[None], axis=tuple(range(1, ndim + 1))) / sigma
    return jnp.mean(he4(z))

  def step(state, key):
    x = fourier.sample_spiked(key, setup.batch, u=u, alpha=setup.alpha, strength=setup.beta)
    g = jax.grad(loss)(state["w"], x)
    w = state["w"]
    g = g - jnp.sum(g * w) * w  # Riemannian gradient: the tangent part.
    w = w - setup.learning_rate * g
    w = w / jnp.linalg.norm(w)
    m = whitened_overlap(w)
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
  chunk_steps: int = 2000,
  quantile: float = 0.6,
) -> dict:
  """Runs ``num_seeds`` vmapped neurons until a ``quantile`` of them reach ``|m| ≥ threshold`` (or
  ``max_samples``).

  Returns a dict with ``samples`` (per seed; ``inf`` where not reached within ``max_samples``, ``0``
  for a seed whose initial overlap is already above the threshold), ``median`` and the initial
  overlaps ``m0``. All seeds share one spike (the stream ``"spike"`` of ``seed``), with independent
  initial weights and data.
  """
  shape = fourier.check_shape(setup.shape)
  u = fourier.make_spike(rng.key(seed, "spike"), shape, setup.alpha, setup.spike)
  step, overlap = _make_step(setup, u)

  def init(key):
    k_w, k_data = jax.random.split(key)
    w = jax.random.normal(k_w, shape)
    w = w / jnp.linalg.norm(w)
    return {
      "w": w,
      "key": k_data,
      "step": jnp.zeros((), jnp.int32),
      "hit": -jnp.ones((), jnp.int32),
    }

  state = jax.vmap(init)(loop.seed_keys(seed, num_seeds))
  m0 = np.asarray(jax.vmap(overlap)(state["w"]))
  # A seed that starts above the threshold (possible at small N) has needed no samples at all.
  state["hit"] = jnp.where(jnp.abs(m0) >= setup.threshold, 0, state["hit"]).astype(jnp.int32)
  run_chunk = jax.jit(jax.vmap(lambda s: loop.scan_steps(step, s, chunk_steps)[0]))
  max_steps = int(math.ceil(max_samples / setup.batch))
  steps = 0
  while steps < max_steps:
    state = run_chunk(state)
    steps += chunk_steps
    hit = np.asarray(state["hit"])
    if np.mean(hit >= 0) >= quantile:
      break
  hit = np.asarray(state["hit"]).astype(float)
  samples = np.where(hit >= 0, hit * setup.batch, np.inf)
  samples[samples > max_samples] = (
    np.inf
  )  # the last chunk may run past the budget: those hits do not count
  return {
    "samples": samples,
    "median": float(np.median(samples)),
    "m0": m0,
    "steps_run": steps,
    "final_overlap": np.asarray(jax.vmap(overlap)(state["w"])),
  }


def fit_exponent(
  dims: np.ndarray, samples: np.ndarray, log_power: float = 2.0
) -> tuple[float, float]:
  """Least-squares slope and prefactor of ``log(n / log^p N)`` against ``log N``: ``n / log^p N ≈ c
  N^b``."""
  dims = np.asarray(dims, float)
  y = np.log(np.asarray(samples, float) / np.log(dims) ** log_power)
  slope, intercept = np.polyfit(np.log(dims), y, 1)
  return float(slope), float(np.exp(intercept))


def bootstrap_exponent(
  dims: np.ndarray,
  samples_per_dim: list[np.ndarray],
  *,
  num_resamples: int = 2000,
  seed: int = 0,
  log_power: float = 2.0,
) -> tuple[float, float]:
  """16th and 84th percentiles of the fitted exponent when the seeds at each N are resampled.

  Unreached seeds count as ``inf`` (they sort last, as in the median); resamples whose median is
  ``inf`` at some N are dropped.
  """
  rng = np.random.default_rng(seed)
  fits = []
  for _ in range(num_resamples):
    medians = np.array(
      [np.median(rng.choice(s, size=len(s), replace=True)) for s in samples_per_dim]
    )
    if np.all(np.isfinite(medians)):
      fits.append(fit_exponent(dims, medians, log_power)[0])
  lo, hi = np.percentile(fits, [16, 84]) if fits else (np.nan, np.nan)
  return float(lo), float(hi)
