"""Translation-invariant synthetic inputs with controlled Fourier amplitudes and phases.

This module is the data model of the Fourier-phase pillar (Ricci, Merger & Goldt, "a Fourier view of
simplicity bias", ICML 2026, arXiv:2605.16913). The paper's code is not public; the model below is
built from the same group's published input models and is documented here precisely.

Conventions (used by every function):

* Inputs have a spatial shape ``shape``: ``(N,)`` for 1D signals or ``(H, W)`` for images. Arrays
  carry any number of leading batch axes, ``x_BxS`` = ``(..., *shape)``; ``D = prod(shape)`` is the
  input dimension.
* The DFT is orthonormal, ``x̂ = F x`` with ``F`` unitary (``norm="ortho"``), so Parseval holds
  exactly: ``Σ_j x_j² = Σ_k |x̂_k|²``.
* ``alpha`` is the exponent of the *power* spectrum: ``E|x̂_k|² ∝ |k|^(−alpha)`` for ``k ≠ 0``.
  ``|k|`` is the wrapped frequency ``min(k, N − k)`` in 1D and the Euclidean norm of the wrapped
  frequency vector in 2D. Natural images have ``alpha ≈ 2``; ``alpha = 0`` is white (isotropic)
  data.
* The DC component is removed (``x̂_0 = 0``), and the spectrum is normalised so that ``E[x_j²] =
  1``. For a stationary process ``E[x_j²] = (1/D) Σ_k E|x̂_k|²``, so the normalisation is ``Σ_k A_k²
  = D`` for the amplitudes ``A_k = sqrt(E|x̂_k|²)``.
* The covariance with amplitudes ``A`` is the circulant ``C = F⁻¹ diag(A²) F``; its square root is
  ``C^{1/2} = F⁻¹ diag(A) F``, which :func:`colour` applies.

Every function is pure, takes batches, and works under ``jit`` and ``vmap``.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

SIGNALS = ("spiked_cumulant", "linear_process")
SPIKES = ("principal", "isotropic")
NOISES = ("rademacher", "laplace")


def check_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
  """Returns ``shape`` as a tuple of 1 or 2 ints ≥ 2, or raises a ValueError naming what is
  expected."""
  what = "shape must be an int N or a tuple (N,) or (H, W) of ints >= 2"
  if isinstance(shape, (int, np.integer)):
    shape = (int(shape),)
  if (
    isinstance(shape, (str, bytes))
    or not isinstance(shape, Sequence)
    and not isinstance(shape, np.ndarray)
  ):
    raise ValueError(f"{what}; got {shape!r}")
  if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape):
    raise ValueError(f"{what}; got {shape!r}")
  shape = tuple(int(s) for s in shape)
  if len(shape) not in (1, 2) or any(s < 2 for s in shape):
    raise ValueError(f"{what}; got {shape!r}")
  return shape


def _axes(ndim: int) -> tuple[int, ...]:
  return tuple(range(-ndim, 0))


def _check_trailing(x: jax.Array, shape: tuple[int, ...], name: str = "x") -> None:
  if tuple(x.shape[x.ndim - len(shape) :]) != shape or x.ndim < len(shape):
    raise ValueError(
      f"{name} must have shape (..., {', '.join(map(str, shape))}); got {tuple(x.shape)}"
    )


def fft(x: jax.Array, ndim: int = 1) -> jax.Array:
  """Orthonormal DFT over the last ``ndim`` axes."""
  return jnp.fft.fftn(x, axes=_axes(ndim), norm="ortho")


def ifft_real(x_hat: jax.Array, ndim: int = 1) -> jax.Array:
  """Inverse orthonormal DFT over the last ``ndim`` axes, real part (exact for Hermitian input)."""
  return jnp.fft.ifftn(x_hat, axes=_axes(ndim), norm="ortho").real


def frequency_norm(shape: int | Sequence[int]) -> np.ndarray:
  """``|k|`` on the full FFT grid: wrapped frequency ``min(k, N−k)``, Euclidean norm over axes in
  2D."""
  shape = check_shape(shape)
  grids = np.meshgrid(*[np.minimum(np.arange(n), n - np.arange(n)) for n in shape], indexing="ij")
  return np.sqrt(sum(g.astype(np.float64) ** 2 for g in grids))


def power_law_amplitudes(shape: int | Sequence[int], alpha: float | jax.Array) -> jax.Array:
  """Amplitudes ``A_k = sqrt(E|x̂_k|²)`` of the power-law spectrum on the full FFT grid.

  ``A_k² ∝ |k|^(−alpha)`` for ``k ≠ 0``, ``A_0 = 0`` (no DC), normalised so ``Σ_k A_k² = D`` and
  hence ``E[x_j²] = 1``. ``alpha`` may be a traced scalar.

  Returns:
    ``A_S``, float32, of shape ``shape``: a numpy array for a concrete ``alpha`` (a compile-time
    constant inside ``jit``), a JAX array for a traced one.
  """
  shape = check_shape(shape)
  k = frequency_norm(shape)
  dc = k == 0
  log_k = np.log(np.where(dc, 1.0, k))
  if not isinstance(alpha, jax.core.Tracer):  # Concrete: numpy, so jit folds it in as a constant.
    try:
      alpha_f = float(alpha)
    except (TypeError, ValueError):
      raise ValueError(f"alpha must be a finite number; got {alpha!r}") from None
    with np.errstate(all="ignore"):  # an infinite alpha is reported just below
      power = np.where(dc, 0.0, np.exp(-alpha_f * log_k))
      amplitudes = np.sqrt(power * (math.prod(shape) / power.sum())).astype(np.float32)
    if not np.isfinite(alpha_f) or not np.all(np.isfinite(amplitudes)):
      raise ValueError(
        f"alpha must be a finite number small enough in size for shape {shape}; got {alpha!r}"
      )
    return amplitudes
  power = jnp.where(dc, 0.0, jnp.exp(-jnp.asarray(alpha, jnp.float32) * log_k.astype(np.float32)))
  power = power * (math.prod(shape) / jnp.sum(power))
  return jnp.sqrt(power)


DENSE_COLOUR_MAX_DIM = 1024


def colour_matrix(amplitudes) -> np.ndarray:
  """The real symmetric circulant ``C^{1/2} = F⁻¹ diag(A) F`` as a dense ``(D, D)`` matrix (numpy,
  float32)."""
  a = np.asarray(amplitudes, np.float64)
  axes = tuple(range(1, a.ndim + 1))
  basis = np.eye(a.size).reshape(a.size, *a.shape)
  m = np.fft.ifftn(a * np.fft.fftn(basis, axes=axes, norm="ortho"), axes=axes, norm="ortho").real
  return m.reshape(a.size, a.size).astype(np.float32)


def colour(z: jax.Array, amplitudes: jax.Array) -> jax.Array:
  """Applies ``C^{1/2} = F⁻¹ diag(A) F`` to ``z`` of shape ``(..., *A.shape)``.

  White noise ``z ~ N(0, I)`` becomes a stationary Gaussian with covariance ``C = F⁻¹ diag(A²) F``.
  ``A`` must be symmetric under ``k → −k`` (as :func:`power_law_amplitudes` is), so the output is
  real. When ``A`` is concrete and ``D ≤ DENSE_COLOUR_MAX_DIM`` the circulant is applied as one
  dense matmul (several times faster than two small FFTs on a CPU, and it batches well under
  ``vmap``); otherwise, e.g. for a traced ``alpha``, by FFT. Both compute the same linear map. A
  concrete flat spectrum without DC (``alpha = 0``) is ``a·(z − mean z)``, computed as that.
  """
  _check_trailing(z, tuple(amplitudes.shape), "z")
  dim = math.prod(amplitudes.shape)
  if not isinstance(amplitudes, jax.core.Tracer):
    flat = np.asarray(amplitudes).reshape(-1)
    if flat[0] == 0 and np.all(flat[1:] == flat[1]):  # A_0 is the DC term (k = 0 first)
      axes = tuple(range(z.ndim - amplitudes.ndim, z.ndim))
      return flat[1] * (z - jnp.mean(z, axis=axes, keepdims=True))
  if not isinstance(amplitudes, jax.core.Tracer) and dim <= DENSE_COLOUR_MAX_DIM:
    m = jnp.asarray(colour_matrix(amplitudes))
    z_flat = z.reshape(*z.shape[: z.ndim - amplitudes.ndim], dim)
    return jnp.matmul(z_flat, m, precision=jax.lax.Precision.HIGHEST).reshape(z.shape)
  z_hat = fft(z, amplitudes.ndim)
  return ifft_real(
    jnp.expand_dims(amplitudes, tuple(range(z_hat.ndim - amplitudes.ndim))) * z_hat, amplitudes.ndim
  )


def phase_scramble(key: jax.Array, x: jax.Array, *, ndim: int = 1) -> jax.Array:
  """Keeps ``|x̂|`` exactly and replaces the phases by uniform random Hermitian-symmetric phases.

  ``out = F⁻¹[|F x| · e^{iθ}]`` with ``θ = arg F w`` for fresh white noise ``w`` (one per sample).
  Because ``F w`` of a real ``w`` is Hermitian, the output is real and its power spectrum, hence
  every second-order statistic (Wiener–Khinchin), is that of ``x``; all higher-order (phase)
  structure is destroyed.

  Args:
    key: PRNG key.
    x: ``(..., *shape)`` real inputs.
    ndim: number of trailing spatial axes (1 for signals, 2 for images).
  """
  w = jax.random.normal(key, x.shape, x.dtype)
  w_hat = fft(w, ndim)
  phase = w_hat / jnp.maximum(jnp.abs(w_hat), jnp.finfo(x.dtype).tiny)
  return ifft_real(jnp.abs(fft(x, ndim)) * phase, ndim)


def whiten_amplitudes(
  x: jax.Array, amplitudes: jax.Array | None = None, *, ndim: int | None = None
) -> jax.Array:
  """Keeps the phases of ``x`` and sets ``|x̂|`` to ``amplitudes``.

  ``out = F⁻¹[A · e^{i arg F x}]`` (with ``arg 0 := 0``). With ``amplitudes=None`` the spectrum is
  made flat over the non-DC frequencies, per sample, with the same total non-DC power ``Σ_{k≠0}
  |x̂_k|²``; the DC coefficient is kept as it is. This removes all second-order (amplitude)
  information and keeps the phases.

  Args:
    x: ``(..., *shape)`` real inputs.
    amplitudes: ``A_S`` (symmetric under ``k → −k``), or None for the flat default.
    ndim: number of trailing spatial axes; taken from ``amplitudes`` when given, else defaults to 1.
  """
  if amplitudes is not None:
    ndim = amplitudes.ndim if ndim is None else ndim
    if ndim != amplitudes.ndim:
      raise ValueError(f"ndim={ndim} does not match amplitudes of shape {amplitudes.shape}")
    _check_trailing(x, tuple(amplitudes.shape))
  ndim = 1 if ndim is None else ndim
  x_hat = fft(x, ndim)
  magnitude = jnp.abs(x_hat)
  phase = jnp.where(magnitude > 0, x_hat / jnp.where(magnitude > 0, magnitude, 1.0), 1.0)
  lead = (1,) * (x_hat.ndim - ndim)  # the batch axes, in front of the spatial ones
  if amplitudes is None:
    spatial = x.shape[x.ndim - ndim :]
    dc = np.zeros(lead + spatial, bool)
    dc[(0,) * (len(lead) + ndim)] = True
    power = jnp.sum(jnp.where(dc, 0.0, magnitude**2), axis=_axes(ndim), keepdims=True)
    flat = jnp.sqrt(power / (math.prod(spatial) - 1))
    return ifft_real(jnp.where(dc, x_hat, flat * phase), ndim)
  return ifft_real(jnp.reshape(amplitudes, lead + tuple(amplitudes.shape)) * phase, ndim)


def _balanced_labels(num_samples: int):
  """Class sizes and the static order that interleaves them: ``y = 0, 1, 0, 1, …`` (balanced, no
  sort needed).

  Samples are generated class 0 first, then class 1; ``order`` puts them in alternating positions,
  so any prefix of a batch is balanced too. A static gather costs far less than a random permutation
  per step.
  """
  n1 = num_samples // 2
  n0 = num_samples - n1
  order = np.empty(num_samples, np.int32)
  order[0::2] = np.arange(n0)
  order[1::2] = n0 + np.arange(n1)
  y = jnp.asarray(np.arange(num_samples) % 2, jnp.int32)
  return n1, y, order


def _unit_noise(key: jax.Array, shape: tuple[int, ...], noise: str) -> jax.Array:
  """I.i.d. symmetric non-Gaussian noise with unit variance."""
  if noise == "rademacher":
    return jax.random.rademacher(key, shape, jnp.float32)
  if noise == "laplace":  # Var = 2 b², b = 1/√2.
    return jax.random.laplace(key, shape, jnp.float32) / np.sqrt(2.0)
  raise ValueError(f"noise must be one of {NOISES}; got {noise!r}")


def make_spike(
  key: jax.Array, shape: int | Sequence[int], alpha: float | jax.Array, kind: str = "principal"
) -> jax.Array:
  """The spike ``u_S`` of the spiked-cumulant model, with ``‖u‖² = D`` and ``u ⟂ 1`` (no DC).

  ``kind="principal"`` draws ``u`` from the power-law spectrum with exponent ``alpha`` (a stationary
  Gaussian field), so it lies mostly in the dominant principal subspace of ``C``;
  ``kind="isotropic"`` draws ``u`` uniformly on the sphere (of the DC-free subspace). At ``alpha =
  0`` the two coincide in law.
  """
  shape = check_shape(shape)
  if kind not in SPIKES:
    raise ValueError(f"spike must be one of {SPIKES}; got {kind!r}")
  g = jax.random.normal(key, shape, jnp.float32)
  if kind == "principal":
    u = colour(g, power_law_amplitudes(shape, alpha))
  else:
    u = g - jnp.mean(g)
  return u * jnp.sqrt(math.prod(shape) / jnp.sum(u**2))


def _spike_direction(u: jax.Array) -> jax.Array:
  """``v = P u / ‖P u‖`` with ``P`` the projection off the constant (DC) vector, which colouring
  removes."""
  u = u - jnp.mean(u)
  norm = jnp.sqrt(jnp.sum(u**2))
  if not isinstance(norm, jax.core.Tracer) and not float(norm) > 1e-6 * math.sqrt(u.size):
    raise ValueError(
      "the spike u must have a non-zero part orthogonal to the constant vector (it cannot be 0 or "
      "constant); got a spike with no such part"
    )
  return u / norm


def _white_spiked(key: jax.Array, num_samples: int, u: jax.Array, beta) -> jax.Array:
  """``S(√(β/D) ν u + z)``: the spiked-cumulant samples before colouring, with identity
  covariance."""
  if not isinstance(beta, jax.core.Tracer) and not beta >= 0:
    raise ValueError(f"strength (beta) must be >= 0 for the spiked cumulant; got {beta!r}")
  axes = _axes(u.ndim)
  v = _spike_direction(u)
  k_nu, k_z = jax.random.split(key)
  nu = jax.random.rademacher(k_nu, (num_samples,) + (1,) * u.ndim, jnp.float32)
  v = v[None]  # the sample axis in front
  t = jax.random.normal(k_z, (num_samples, *u.shape), jnp.float32) + jnp.sqrt(beta) * nu * v
  c = 1.0 - 1.0 / jnp.sqrt(1.0 + beta)  # S = I − c v vᵀ = (I + β v vᵀ)^{−1/2}
  return t - c * jnp.sum(t * v, axis=axes, keepdims=True) * v


def sample_spiked(
  key: jax.Array,
  num_samples: int,
  *,
  u: jax.Array,
  alpha: float | jax.Array,
  strength: float | jax.Array = 5.0,
) -> jax.Array:
  """Only the structured class of the spiked-cumulant task: ``x = C^{1/2} S (√(β/D) ν u + z)``.

  See :func:`sample_phase_task` for the model; ``u`` fixes the spike and the spatial shape (it is
  projected off the constant vector and normalised to ``‖u‖² = D``). Returns ``(num_samples,
  *u.shape)``.
  """
  shape = check_shape(u.shape)
  return colour(_white_spiked(key, num_samples, u, strength), power_law_amplitudes(shape, alpha))


def sample_gaussian(
  key: jax.Array, num_samples: int, *, shape: int | Sequence[int], alpha: float | jax.Array
) -> jax.Array:
  """Stationary Gaussian inputs ``x = C^{1/2} z`` with the power-law spectrum ``alpha``:
  ``(num_samples, *shape)``."""
  shape = check_shape(shape)
  z = jax.random.normal(key, (num_samples, *shape), jnp.float32)
  return colour(z, power_law_amplitudes(shape, alpha))


def sample_phase_task(
  key: jax.Array,
  num_samples: int,
  *,
  shape: int | Sequence[int],
  alpha: float | jax.Array,
  signal: str = "spiked_cumulant",
  strength: float | None = None,
  spike: str = "principal",
  spike_key: jax.Array | None = None,
  u: jax.Array | None = None,
  noise: str = "rademacher",
) -> tuple[jax.Array, jax.Array]:
  """Two classes with the **same power spectrum** that differ only in their phases.

  Class 0 (``y = 0``) is the stationary Gaussian ``x = C^{1/2} z`` with ``z ~ N(0, I)`` and ``C``
  the power-law covariance of exponent ``alpha``. Class 1 (``y = 1``) has covariance exactly ``C``
  too, but non-Gaussian (structured) phases:

  ``signal="spiked_cumulant"`` — the spiked cumulant model of Székely, Bardone, Gerace & Goldt
  (2024, arXiv:2312.14922), coloured by the spectrum:

      x = C^{1/2} S (√(β/D) ν u + z),   S = (I + β v vᵀ)^{−1/2} = I − (1 − 1/√(1+β)) v vᵀ,

  with ``ν = ±1`` (Rademacher, one per sample), ``z ~ N(0, I)``, ``‖u‖² = D`` and ``v = u/√D``. The
  whitening ``S`` makes ``Cov(S(·)) = I`` exactly, so both classes have covariance ``C``. Along
  ``v`` (in whitened coordinates ``C^{−1/2} x``) the projection has excess kurtosis ``−2β²/(1+β)²``,
  and every orthogonal direction is Gaussian. ``β`` is ``strength`` (default 5). The spike ``u`` is
  ``u`` if given, else :func:`make_spike` ``(spike_key, shape, alpha, spike)``; ``spike_key``
  defaults to ``PRNGKey(0)``, so repeated calls share one spike (the "teacher").

  ``signal="linear_process"`` — the translation-invariant linear process ``x = h ⊛ ξ`` (circular
  convolution) with the filter whose unnormalised DFT is ``A``, i.e. ``x = C^{1/2} ξ``, with ``ξ =
  √s ξ_ng + √(1−s) g``: ``ξ_ng`` i.i.d. symmetric non-Gaussian with unit variance
  (``noise="rademacher"`` or ``"laplace"``), ``g ~ N(0, I)``, and ``s = strength ∈ [0, 1]`` (default
  1). Class 0 uses Gaussian ``ξ``.

  Args:
    key: PRNG key for the samples (the spike comes from ``spike_key``/``u``, not from ``key``).
    num_samples: total number of samples; ``num_samples // 2`` are class 1.
    shape: ``(N,)`` or ``(H, W)``.
    alpha: power-spectrum exponent (may be traced).
    signal: ``"spiked_cumulant"`` or ``"linear_process"``.
    strength: ``β ≥ 0`` for the spiked cumulant; ``s ∈ [0, 1]`` for the linear process.
    spike: ``"principal"`` or ``"isotropic"`` (spiked cumulant only; ignored when ``u`` is given).
    spike_key: key for the spike when ``u`` is None.
    u: an explicit spike ``u_S``, projected off the constant vector (which the DC removal would
      delete) and rescaled to ``‖u‖² = D``; a spike with no such part is refused.
    noise: ``"rademacher"`` or ``"laplace"`` (linear process only).

  Returns:
    ``(x, y)``: ``x`` float32 ``(num_samples, *shape)``, ``y`` int32 ``(num_samples,)``, classes
    alternating.
  """
  shape = check_shape(shape)
  if signal not in SIGNALS:
    raise ValueError(f"signal must be one of {SIGNALS}; got {signal!r}")
  if int(num_samples) < 2:
    raise ValueError(f"num_samples must be >= 2 (one per class); got {num_samples}")
  amplitudes = power_law_amplitudes(shape, alpha)
  k_0, k_1, k_2 = jax.random.split(key, 3)
  n1, y, order = _balanced_labels(num_samples)
  z0 = jax.random.normal(k_0, (num_samples - n1, *shape), jnp.float32)

  if signal == "spiked_cumulant":
    if u is None:
      u = make_spike(jax.random.PRNGKey(0) if spike_key is None else spike_key, shape, alpha, spike)
    _check_trailing(u, shape, "u")
    s1 = _white_spiked(k_1, n1, u, 5.0 if strength is None else strength)
  else:
    mix = 1.0 if strength is None else strength
    if not isinstance(mix, jax.core.Tracer) and not 0 <= mix <= 1:
      raise ValueError(f"strength must be in [0, 1] for the linear process; got {mix!r}")
    xi = _unit_noise(k_1, (n1, *shape), noise)
    g = jax.random.normal(k_2, (n1, *shape), jnp.float32)
    s1 = jnp.sqrt(mix) * xi + jnp.sqrt(1.0 - mix) * g
  x = colour(jnp.concatenate([z0, s1]), amplitudes)
  return x[order], y


def sample_amplitude_task(
  key: jax.Array,
  num_samples: int,
  *,
  shape: int | Sequence[int],
  alpha0: float | jax.Array = 0.0,
  alpha1: float | jax.Array = 1.0,
) -> tuple[jax.Array, jax.Array]:
  """The contrast task: two stationary Gaussian classes that differ only in their amplitude spectra.

  Class 0 has power-law exponent ``alpha0`` and class 1 ``alpha1``; both have random (Gaussian)
  phases and unit pixel variance, so only the shape of the power spectrum (pairwise correlations)
  separates them.

  Args:
    key: PRNG key.
    num_samples: total number of samples, at least 2; ``num_samples // 2`` are class 1.
    shape: ``(N,)`` or ``(H, W)`` (an int ``N`` means ``(N,)``).
    alpha0: power-spectrum exponent of class 0 (may be traced).
    alpha1: power-spectrum exponent of class 1 (may be traced).

  Returns:
    ``(x, y)``: ``x`` float32 ``(num_samples, *shape)``, ``y`` int32 ``(num_samples,)``, classes
    alternating.
  """
  shape = check_shape(shape)
  if int(num_samples) < 2:
    raise ValueError(f"num_samples must be >= 2 (one per class); got {num_samples}")
  n1, y, order = _balanced_labels(num_samples)
  k_0, k_1 = jax.random.split(key)
  x0 = colour(
    jax.random.normal(k_0, (num_samples - n1, *shape), jnp.float32),
    power_law_amplitudes(shape, alpha0),
  )
  x1 = colour(
    jax.random.normal(k_1, (n1, *shape), jnp.float32), power_law_amplitudes(shape, alpha1)
  )
  return jnp.concatenate([x0, x1])[order], y
