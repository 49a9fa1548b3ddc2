"""Invariants of the Fourier-phase data model (mechjax.data.fourier)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from mechjax.data import fourier as F

KEY = jax.random.PRNGKey(0)


@pytest.mark.parametrize("shape", [(32,), (8, 12)])
@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_power_law_amplitudes(shape, alpha):
  a = np.asarray(F.power_law_amplitudes(shape, alpha), np.float64)
  k = F.frequency_norm(shape)
  assert a.shape == shape
  assert a.flat[0] == 0.0  # no DC
  np.testing.assert_allclose((a**2).sum(), np.prod(shape), rtol=1e-5)  # E[x_j^2] = 1
  nz = k > 0
  ratio = a[nz] ** 2 / a[nz][0] ** 2
  np.testing.assert_allclose(ratio, (k[nz] / k[nz][0]) ** (-alpha), rtol=1e-4)


def test_shape_and_alpha_errors_name_what_is_expected():
  with pytest.raises(ValueError, match="shape must be"):
    F.power_law_amplitudes("abc", 1.0)
  with pytest.raises(ValueError, match="alpha must be a finite"):
    F.power_law_amplitudes((8,), None)
  with pytest.raises(ValueError, match="shape must be"):
    F.check_shape((4, 4, 4))
  with pytest.raises(ValueError, match="alpha must be a finite"):
    F.power_law_amplitudes((8,), float("nan"))
  with pytest.raises(ValueError, match="signal must be one of"):
    F.sample_phase_task(KEY, 8, shape=(8,), alpha=0.0, signal="edges")
  with pytest.raises(ValueError, match=r"u must have shape \(\.\.\., 8\)"):
    F.sample_phase_task(KEY, 8, shape=(8,), alpha=0.0, u=jnp.ones(9))


def _class_power(x, y, cls, ndim):
  return np.abs(np.asarray(F.fft(x[y == cls], ndim))) ** 2


@pytest.mark.parametrize(
  "signal,shape,alpha",
  [
    ("spiked_cumulant", (32,), 2.0),
    ("spiked_cumulant", (8, 8), 1.0),
    ("linear_process", (32,), 2.0),
    ("linear_process", (32,), 0.0),
  ],
)
@pytest.mark.slow
def test_phase_task_classes_share_the_power_spectrum(signal, shape, alpha):
  n = 16384
  x, y = F.sample_phase_task(KEY, n, shape=shape, alpha=alpha, signal=signal)
  x, y = np.asarray(x), np.asarray(y)
  assert x.dtype == np.float32 and x.shape == (n, *shape) and y.shape == (n,)
  assert y.sum() == n // 2  # balanced
  np.testing.assert_allclose(np.mean(x**2), 1.0, atol=0.02)  # unit pixel variance
  expected = np.asarray(F.power_law_amplitudes(shape, alpha)) ** 2
  for cls in (0, 1):
    p = _class_power(x, y, cls, len(shape))
    mean, se = p.mean(0), p.std(0) / np.sqrt(len(p))
    # Within 5 standard errors per frequency (DC is exactly 0).
    assert np.all(np.abs(mean - expected) <= 5 * se + 1e-6), (
      cls,
      np.max(np.abs(mean - expected) / (se + 1e-12)),
    )


def test_amplitude_task_classes_differ_in_power_spectrum():
  """The same spectrum check must fail for the contrast task, whose classes differ only in
  amplitude."""
  x, y = F.sample_amplitude_task(KEY, 8192, shape=(32,), alpha0=0.0, alpha1=1.0)
  x, y = np.asarray(x), np.asarray(y)
  p0, p1 = _class_power(x, y, 0, 1).mean(0), _class_power(x, y, 1, 1).mean(0)
  np.testing.assert_allclose(
    p0, np.asarray(F.power_law_amplitudes((32,), 0.0)) ** 2, rtol=0.1, atol=1e-6
  )
  np.testing.assert_allclose(
    p1, np.asarray(F.power_law_amplitudes((32,), 1.0)) ** 2, rtol=0.1, atol=1e-6
  )
  assert p1[1] > 2 * p0[1]


@pytest.mark.parametrize("alpha,spike", [(0.0, "isotropic"), (2.0, "principal")])
def test_spiked_cumulant_excess_kurtosis_along_spike(alpha, spike):
  beta, n, shape = 5.0, 40000, (32,)
  u = F.make_spike(jax.random.PRNGKey(7), shape, alpha, spike)
  x, y = F.sample_phase_task(KEY, n, shape=shape, alpha=alpha, strength=beta, u=u)
  a = F.power_law_amplitudes(shape, alpha)
  a = a[None]  # the sample axis in front
  s = F.ifft_real(
    jnp.where(a > 0, F.fft(x) / jnp.where(a > 0, a, 1.0), 0.0)
  )  # whitened: C^{-1/2} x
  proj = np.asarray(s @ (u / jnp.linalg.norm(u)))
  y = np.asarray(y)
  tol = 6 * np.sqrt(24 / (n / 2))  # 6 standard errors of the sample excess kurtosis.
  assert abs(stats.kurtosis(proj[y == 1]) - (-2 * beta**2 / (1 + beta) ** 2)) < tol + 0.05
  assert abs(stats.kurtosis(proj[y == 0])) < tol
  np.testing.assert_allclose(np.var(proj[y == 1]), 1.0, atol=0.05)


def test_linear_process_is_non_gaussian_and_noise_class_is_not():
  x, y = F.sample_phase_task(
    KEY, 20000, shape=(16,), alpha=0.0, signal="linear_process", noise="laplace"
  )
  x, y = np.asarray(x), np.asarray(y)
  # At alpha=0, x = sqrt(D/(D-1)) (xi - mean xi): pixels of class 1 keep most of Laplace's kurtosis
  # 3.
  assert stats.kurtosis(x[y == 1].ravel()) > 2.0
  assert abs(stats.kurtosis(x[y == 0].ravel())) < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(32,), (8, 16)])
def test_phase_scramble_keeps_amplitudes_exactly(shape):
  x, _ = F.sample_phase_task(KEY, 64, shape=shape, alpha=2.0)
  xs = F.phase_scramble(jax.random.PRNGKey(3), x, ndim=len(shape))
  assert xs.dtype == jnp.float32 and xs.shape == x.shape
  np.testing.assert_allclose(np.abs(F.fft(xs, len(shape))), np.abs(F.fft(x, len(shape))), atol=2e-5)
  assert float(jnp.max(jnp.abs(xs - x))) > 0.1  # the phases did change
  ang_x, ang_s = np.angle(F.fft(x, len(shape))), np.angle(F.fft(xs, len(shape)))
  assert abs(np.corrcoef(ang_x[:, 1:].ravel(), ang_s[:, 1:].ravel())[0, 1]) < 0.1


def test_phase_scramble_destroys_spike_kurtosis():
  x, y = F.sample_phase_task(KEY, 40000, shape=(32,), alpha=0.0, strength=5.0, spike="isotropic")
  u = F.make_spike(jax.random.PRNGKey(0), (32,), 0.0, "isotropic")
  xs = F.phase_scramble(jax.random.PRNGKey(1), x)
  proj = np.asarray(xs @ (u / jnp.linalg.norm(u)))[np.asarray(y) == 1]
  assert abs(stats.kurtosis(proj)) < 0.2


@pytest.mark.parametrize("shape", [(32,), (8, 16)])
def test_whiten_amplitudes_keeps_phases(shape):
  ndim = len(shape)
  x, _ = F.sample_phase_task(KEY, 64, shape=shape, alpha=2.0, signal="linear_process")
  xw = F.whiten_amplitudes(x, ndim=ndim)
  xh, wh = np.asarray(F.fft(x, ndim)), np.asarray(F.fft(xw, ndim))
  nz = np.abs(xh) > 1e-3
  nz.reshape(64, -1)[:, 0] = False
  np.testing.assert_allclose(np.angle(wh[nz] / xh[nz]), 0.0, atol=1e-3)  # same phases
  mag = np.abs(wh).reshape(64, -1)[:, 1:]
  np.testing.assert_allclose(
    mag, np.broadcast_to(mag.mean(1, keepdims=True), mag.shape), rtol=1e-3
  )  # flat
  np.testing.assert_allclose(
    np.sum(np.asarray(xw) ** 2, axis=tuple(range(1, ndim + 1))),
    np.sum(np.asarray(x) ** 2, axis=tuple(range(1, ndim + 1))),
    rtol=1e-4,
  )  # same power


def test_whiten_to_given_amplitudes():
  x, _ = F.sample_phase_task(KEY, 16, shape=(32,), alpha=0.0)
  a = F.power_law_amplitudes((32,), 2.0)
  xw = F.whiten_amplitudes(x, a)
  np.testing.assert_allclose(np.abs(F.fft(xw)), np.broadcast_to(a, xw.shape), atol=2e-5)


def test_jit_and_vmap_over_alpha():
  sample = jax.jit(
    lambda k, a: F.sample_phase_task(k, 32, shape=(16,), alpha=a, signal="spiked_cumulant")[0]
  )
  xs = jax.vmap(sample, in_axes=(None, 0))(KEY, jnp.array([0.0, 1.0, 2.0]))
  assert xs.shape == (3, 32, 16)
  np.testing.assert_allclose(xs[2], sample(KEY, 2.0), atol=1e-5)


@pytest.mark.slow
def test_fft_path_matches_dense_path_and_traced_alpha_matches_concrete():
  """colour() uses a dense circulant for concrete amplitudes and FFTs for traced ones: same map,
  same spectrum."""
  shape = (8, 12)
  a_np = F.power_law_amplitudes(shape, 2.0)
  a_traced = jax.jit(lambda alpha: F.power_law_amplitudes(shape, alpha))(2.0)
  np.testing.assert_allclose(a_traced, a_np, rtol=1e-5, atol=1e-6)
  z = jax.random.normal(KEY, (16, *shape))
  dense = F.colour(z, a_np)
  via_fft = jax.jit(F.colour)(z, jnp.asarray(a_np))  # amplitudes traced -> FFT branch
  np.testing.assert_allclose(via_fft, dense, atol=1e-5)
  np.testing.assert_allclose(dense, F.ifft_real(a_np[None] * F.fft(z, 2), 2), atol=1e-5)


@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_large_inputs_take_the_fft_path_with_the_right_spectrum(alpha):
  shape = (40, 40)  # D = 1600 > DENSE_COLOUR_MAX_DIM
  assert np.prod(shape) > F.DENSE_COLOUR_MAX_DIM
  x = F.sample_gaussian(KEY, 512, shape=shape, alpha=alpha)
  np.testing.assert_allclose(np.mean(np.asarray(x) ** 2), 1.0, atol=0.02)
  power = np.abs(np.asarray(F.fft(x, 2))) ** 2
  expected = np.asarray(F.power_law_amplitudes(shape, alpha)) ** 2
  # Averaged over samples, each frequency's power is exponential with mean A^2: check a pooled ratio
  # per |k| shell.
  k = F.frequency_norm(shape)
  for lo, hi in [(0.5, 2.5), (2.5, 6.5), (6.5, 20.0)]:
    shell = (k > lo) & (k <= hi)
    np.testing.assert_allclose(power.mean(0)[shell].sum() / expected[shell].sum(), 1.0, atol=0.05)


def test_traced_alpha_keeps_unit_variance():
  sample = jax.jit(lambda a: F.sample_gaussian(KEY, 2048, shape=(16,), alpha=a))
  for alpha in (0.0, 1.5, 3.0):
    np.testing.assert_allclose(np.mean(np.asarray(sample(alpha)) ** 2), 1.0, atol=0.05)


def test_explicit_spike_is_projected_off_dc_and_zero_spike_is_refused():
  shape, beta = (32,), 5.0
  iso = F.make_spike(jax.random.PRNGKey(4), shape, 0.0, "isotropic")
  x, y = F.sample_phase_task(
    KEY, 40000, shape=shape, alpha=0.0, strength=beta, u=iso + 3.0
  )  # a DC offset
  proj = np.asarray(x @ (iso / jnp.linalg.norm(iso)))[np.asarray(y) == 1]
  assert abs(stats.kurtosis(proj) - (-2 * beta**2 / (1 + beta) ** 2)) < 0.2
  for bad in (jnp.zeros(32), jnp.ones(32)):
    with pytest.raises(ValueError, match="non-zero part orthogonal to the constant"):
      F.sample_phase_task(KEY, 8, shape=shape, alpha=0.0, u=bad)


@pytest.mark.parametrize("bad", ["32", (7.9,), None, (4, 4, 4), (1,)])
def test_check_shape_refuses_text_floats_and_wrong_ranks(bad):
  with pytest.raises(ValueError, match="shape must be an int N or a tuple"):
    F.check_shape(bad)
