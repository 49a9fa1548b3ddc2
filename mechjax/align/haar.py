"""Is a fitted rotation Haar-random, or privileged? Haar sampling, the Weyl density, calibrated
tests.

Null distributions here are Monte-Carlo samples of Haar rotations of the same dimension and in the
same coset as the tested ``R`` (SO(d) if ``det R = +1``, the ``det = −1`` coset of O(d) otherwise),
so every p-value is calibrated by construction: under the null, ``P(p ≤ a) ≤ a`` up to the
resolution ``1 / (num_null + 1)``.

Two well-known statistics, ``‖R − I‖_F`` (≈ √(2d) under Haar, since ``E tr R = 0`` and ``Var tr R =
1``) and a Kolmogorov–Smirnov test of the eigen-angles, have no power against a *privileged* basis:
a random signed permutation passes both. The signed-permutation distance ``min_P ‖R − P‖_F`` over
signed permutation matrices ``P`` and the basis-alignment statistics (largest entry per row,
kurtosis of the entries) detect it. The eigen-angle KS statistic is calibrated against its own
Monte-Carlo null: Haar eigenvalues repel each other, so the i.i.d. KS formula gives p ≈ 1 for a
single Haar matrix.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize
from scipy import stats


def haar_orthogonal(
  key: jax.Array, d: int, special: bool = False, shape: tuple[int, ...] = ()
) -> jax.Array:
  """Haar-random ``(*shape, d, d)`` matrices in O(d), or in SO(d) with ``special`` (first column's
  sign flipped where ``det = −1``, which maps the Haar measure on that coset onto the one on
  SO(d)).

  Args:
    key: PRNG key.
    d: dimension of each matrix, a positive integer.
    special: sample from SO(d) (``det = +1``) instead of all of O(d).
    shape: leading batch shape; ``()`` gives a single ``(d, d)`` matrix.

  Returns:
    ``(*shape, d, d)`` orthogonal matrices, independent Haar draws.
  """
  if int(d) < 1:
    raise ValueError(f"d must be a positive integer; got {d}")
  q = jax.random.orthogonal(key, int(d), shape)
  if special:
    sign = jnp.sign(jnp.linalg.det(q))
    q = q.at[..., :, 0].multiply(sign[..., None])
  return q


def eigenangle_density(theta, d: int) -> np.ndarray:
  """Weyl's one-point density of the eigen-angles ``θ ∈ [0, π]`` of a Haar matrix in SO(d),
  normalised to 1.

  The non-trivial eigenvalues come in pairs ``e^{±iθ_j}``, ``j = 1..N``. With the orthonormal
  polynomials of the Weyl weight, the one-point function (integrating to ``N``) is

  * SO(2N):   ``[(2N − 1) + sin((2N − 1)θ) / sin θ] / (2π)``;
  * SO(2N+1): ``[2N − sin(2Nθ) / sin θ] / (2π)`` (plus the fixed eigenvalue 1, not counted here).

  Returned divided by ``N``, as a probability density of one angle drawn from the ``N``.
  """
  d = int(d)
  if d < 2:
    raise ValueError(f"d must be >= 2; got {d}")
  theta = np.asarray(theta, np.float64)
  n = d // 2
  s = np.sin(theta)
  small = np.abs(s) < 1e-12
  s = np.where(small, 1.0, s)
  if d % 2 == 0:
    ratio = np.where(small, 2 * n - 1, np.sin((2 * n - 1) * theta) / s)
    return ((2 * n - 1) + ratio) / (2 * np.pi * n)
  ratio = np.where(small, np.where(np.cos(theta) < 0, -2.0 * n, 2.0 * n), np.sin(2 * n * theta) / s)
  return (2 * n - ratio) / (2 * np.pi * n)


def eigenangles(r: np.ndarray) -> np.ndarray:
  """The ``N = ⌊d/2⌋`` angles in ``[0, π]`` of the conjugate pairs of eigenvalues of an orthogonal
  ``R``.

  The eigenvalues forced by the determinant (1 for odd d in SO(d); ±1 in the ``det = −1`` coset) are
  dropped: the angles are sorted and only one angle per conjugate pair is kept.
  """
  r = np.asarray(r, np.float64)
  d = r.shape[-1]
  # R is normal, so its symmetric part (R + Rᵀ)/2 has the eigenvalues cos θ of R's e^{±iθ}: a
  # symmetric eigenproblem, about 30× cheaper than the general one at d = 512. arccos is
  # ill-conditioned near 0 and π, so R is first made orthogonal to rounding by a Newton–Schulz step,
  # R(3I − RᵀR)/2 (a matrix orthogonal to 1e-7, as a float32 draw is, would otherwise move those
  # angles by 1e-4); the angles are then within about 1e-7 of arg λ's.
  r = r @ (3 * np.eye(d) - np.swapaxes(r, -1, -2) @ r) / 2
  cos = np.linalg.eigvalsh((r + np.swapaxes(r, -1, -2)) / 2)
  angles = np.sort(np.arccos(np.clip(cos, -1.0, 1.0)), axis=-1)
  dets = np.linalg.det(r)
  negative = bool(np.all(dets < 0))
  if r.ndim > 2 and not (negative or np.all(dets > 0)):
    raise ValueError(
      "a stack of matrices passed to eigenangles must all have the same determinant sign"
    )
  if d % 2 == 1 or negative:
    # Remove the forced real eigenvalue(s): +1 (angle 0) for odd SO(d); for det = −1, a −1 (angle π)
    # and, for even d, also a +1 (angle 0).
    if not negative:
      angles = angles[..., 1:]
    else:
      angles = angles[..., :-1] if d % 2 == 1 else angles[..., 1:-1]
  return angles[..., ::2]


def _ks_statistic(x: np.ndarray, cdf) -> float:
  """The one-sample Kolmogorov–Smirnov statistic ``sup |F_n − F|`` (scipy's
  ``kstest(...).statistic``)."""
  x = np.sort(x)
  n = len(x)
  f = cdf(x)
  return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def _excess_kurtosis(x: np.ndarray) -> float:
  """Fisher's excess kurtosis ``m₄/m₂² − 3`` with population moments (scipy's ``kurtosis``
  defaults)."""
  c = x - x.mean()
  m2 = np.mean(c * c)
  return float(np.mean(c**4) / (m2 * m2) - 3.0) if m2 > 0 else 0.0


def nearest_signed_permutation(r: np.ndarray) -> np.ndarray:
  """``π``, the pattern of the signed permutation nearest to ``R``: the column matched to each row
  by the linear assignment that maximises ``Σ_i |R_{iπ(i)}|``. ``R[:, π]`` puts the matched entries
  on the diagonal, where a privileged basis shows as a bright signed diagonal."""
  rows, cols = optimize.linear_sum_assignment(-np.abs(np.asarray(r, np.float64)))
  return cols[np.argsort(rows)]


def signed_permutation_distance(r: np.ndarray) -> float:
  """``min_P ‖R − P‖_F`` over signed permutation matrices: ``√(2d − 2 max_π Σ_i |R_{iπ(i)}|)``
  (:func:`nearest_signed_permutation`)."""
  a = np.abs(np.asarray(r, np.float64))
  matched = a[np.arange(a.shape[0]), nearest_signed_permutation(a)]
  return float(np.sqrt(max(2 * a.shape[0] - 2 * matched.sum(), 0.0)))


def _statistics(r: np.ndarray, angle_cdf) -> dict[str, float]:
  d = r.shape[0]
  flat = r.ravel() * np.sqrt(d)
  angles = eigenangles(r)
  ks = _ks_statistic(angles, angle_cdf) if len(angles) else 0.0
  return {
    "frobenius_to_identity": float(np.linalg.norm(r - np.eye(d))),
    "trace": float(np.trace(r)),
    "signed_permutation_distance": signed_permutation_distance(r),
    "max_abs_entry_per_row": float(np.mean(np.max(np.abs(r), axis=1))),
    "entry_kurtosis": _excess_kurtosis(flat),
    "eigenangle_ks": float(ks),
  }


# Which tail of the null counts as evidence against Haar.
TAILS = {
  "frobenius_to_identity": "two-sided",
  "trace": "two-sided",
  "signed_permutation_distance": "lower",
  "max_abs_entry_per_row": "upper",
  "entry_kurtosis": "upper",
  "eigenangle_ks": "upper",
}


def _p_value(obs: float, null: np.ndarray, tail: str) -> float:
  m = len(null)
  upper = (1 + np.sum(null >= obs)) / (1 + m)
  lower = (1 + np.sum(null <= obs)) / (1 + m)
  if tail == "upper":
    return float(upper)
  if tail == "lower":
    return float(lower)
  return float(min(1.0, 2 * min(upper, lower)))


@dataclasses.dataclass(frozen=True)
class HaarReference:
  """What :func:`haar_test` compares a matrix with, for one ``d`` and one coset: the sorted pool of
  Haar eigen-angles (the reference CDF of the KS statistic) and the statistics of ``num_null`` Haar
  matrices. It depends on ``d``, the determinant's sign and the key alone, so one reference serves
  every matrix of that size and coset (every site of a model): build it once with
  :func:`haar_reference`. The p-values of the matrices tested against one reference are each
  exact, and dependent on one another through it.

  Args:
    d: the matrices' size.
    negative: the coset: determinant −1 (True) or +1.
    pool: the sorted eigen-angles of the pool's Haar matrices.
    null: per statistic (:data:`TAILS`' keys), its values on the null's Haar matrices.
  """

  d: int
  negative: bool
  pool: np.ndarray
  null: dict[str, np.ndarray]

  def angle_cdf(self, x):
    return np.searchsorted(self.pool, x, side="right") / len(self.pool)


def haar_reference(d: int, negative: bool, key: jax.Array, num_null: int = 199) -> HaarReference:
  """The :class:`HaarReference` of the ``d × d`` orthogonal matrices with determinant −1
  (``negative``) or +1: ``max(200, 4000 // ⌊d/2⌋)`` Haar matrices for the eigen-angle pool and
  ``num_null`` for the null, drawn from ``key`` in one call.

  Args:
    d: the size of the matrices to test.
    negative: their coset: determinant −1 (True) or +1.
    key: PRNG key of the pool and the null (what :func:`haar_test` is given as ``key``).
    num_null: Haar matrices in the null, at least 19.
  """
  if int(num_null) < 19:
    raise ValueError(f"num_null must be >= 19 for a p-value that can reach 0.05; got {num_null}")
  num_pool = max(200, 4000 // max(d // 2, 1))
  qs = np.asarray(haar_orthogonal(key, d, special=True, shape=(num_pool + int(num_null),)))

  def coset(q):  # float64 copies, in the coset: a few at a time (at d = 512 all are 0.8 GB)
    q = np.array(q, np.float64)
    if negative:
      q[..., :, 0] *= -1
    return q

  chunk = max(1, 2**24 // (d * d))
  angles = [eigenangles(coset(qs[i : min(i + chunk, num_pool)])) for i in range(0, num_pool, chunk)]
  pool = np.sort(np.concatenate(angles, axis=0).ravel())
  ref = HaarReference(d, bool(negative), pool, {})
  null = [_statistics(coset(q), ref.angle_cdf) for q in qs[num_pool:]]
  return dataclasses.replace(ref, null={k: np.array([n[k] for n in null]) for k in TAILS})


def haar_test(
  r, key: jax.Array | None = None, num_null: int = 199, reference: HaarReference | None = None
) -> dict[str, dict[str, float]]:
  """Tests whether the orthogonal matrix ``r`` looks like a Haar sample from its own coset.

  Returns, per statistic, ``{"value", "null_mean", "null_sd", "p_value", "tail"}``. The null is
  ``num_null`` Haar matrices of the same ``d`` and determinant; the eigen-angle reference CDF comes
  from an independent pool of Haar eigen-angles. p-values are ``(1 + #{null at least as extreme}) /
  (1 + num_null)``.

  Args:
    r: the ``(d, d)`` orthogonal matrix to test, ``d ≥ 2`` (array-like; e.g. a fitted Procrustes
      rotation). Its determinant sign picks the coset the null is drawn from.
    key: PRNG key for the null sample and the eigen-angle reference pool
      (:func:`haar_reference`); not used with ``reference``.
    num_null: number of Haar null matrices, at least 19; p-values have resolution
      ``1 / (num_null + 1)``.
    reference: a :class:`HaarReference` of ``r``'s size and coset, built once for many matrices
      (the eigen-values of the pool and the null are most of the test's time at large ``d``).

  Returns:
    A dict keyed by statistic (``"frobenius_to_identity"``, ``"trace"``,
    ``"signed_permutation_distance"``, ``"max_abs_entry_per_row"``, ``"entry_kurtosis"``,
    ``"eigenangle_ks"``), each entry the dict described above; ``"tail"`` is ``"upper"``,
    ``"lower"`` or ``"two-sided"``.
  """
  r = np.asarray(r, np.float64)
  if r.ndim != 2 or r.shape[0] != r.shape[1] or r.shape[0] < 2:
    raise ValueError(f"r must be a square (d, d) matrix with d >= 2; got shape {r.shape}")
  d = r.shape[0]
  if not np.allclose(r @ r.T, np.eye(d), atol=1e-4 * np.sqrt(d)):
    raise ValueError("r must be orthogonal (r @ r.T = I); fit it with orthogonal_procrustes first")
  negative = bool(np.linalg.det(r) < 0)
  if reference is None:
    if key is None:
      raise ValueError("haar_test needs a key, or a reference built with haar_reference")
    reference = haar_reference(d, negative, key, num_null)
  elif (reference.d, reference.negative) != (d, negative):
    raise ValueError(
      f"the reference is of d={reference.d}, det {'-1' if reference.negative else '+1'}; r is of "
      f"d={d}, det {'-1' if negative else '+1'}"
    )
  observed = _statistics(r, reference.angle_cdf)
  out = {}
  for name, value in observed.items():
    values = reference.null[name]
    out[name] = {
      "value": value,
      "null_mean": float(values.mean()),
      "null_sd": float(values.std()),
      "p_value": _p_value(value, values, TAILS[name]),
      "tail": TAILS[name],
    }
  return out


def privileged_basis_test(
  x, key: jax.Array, num_null: int = 199, max_rows: int = 4096
) -> dict[str, float]:
  """Is the coordinate basis of activations ``x_NxD`` special, compared with a random rotation of
  them?

  The statistic is the mean over activation vectors of the excess kurtosis of their ``d``
  coordinates (large when a few coordinates carry outsized values, as in the basis-aligned outlier
  features of Adam-trained transformers). Its null distribution is the same statistic of ``x @ Q``
  for ``num_null`` Haar-random ``Q``: under the hypothesis that nothing singles out the coordinate
  axes, ``x`` is one more draw from that orbit, so the upper-tail p-value ``(1 + #{null >=
  observed}) / (1 + num_null)`` is calibrated. Unlike tests of a fitted rotation, this needs no
  second model and no full-rank cross-covariance. At most ``max_rows`` rows (evenly spaced) are
  used.

  Args:
    x: activations of shape ``(n, d)`` with ``d ≥ 4`` (array-like, one row per input).
    key: PRNG key for the Haar rotations of the null.
    num_null: number of Haar-rotated copies ``x @ Q`` in the null, at least 19.
    max_rows: the most rows used; a larger ``x`` is subsampled at evenly spaced rows.

  Returns:
    ``{"value", "null_mean", "null_sd", "p_value"}``.
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2 or x.shape[1] < 4:
    raise ValueError(f"x must have shape (n, d) with d >= 4; got {x.shape}")
  if int(num_null) < 19:
    raise ValueError(f"num_null must be >= 19 for a p-value that can reach 0.05; got {num_null}")
  if x.shape[0] > max_rows:
    x = x[np.linspace(0, x.shape[0] - 1, max_rows).astype(int)]
  stat = lambda a: float(np.mean(stats.kurtosis(a, axis=-1)))
  qs = np.asarray(haar_orthogonal(key, x.shape[1], shape=(int(num_null),)), np.float64)
  null = np.array([stat(x @ q) for q in qs])
  value = stat(x)
  return {
    "value": value,
    "null_mean": float(null.mean()),
    "null_sd": float(null.std()),
    "p_value": _p_value(value, null, "upper"),
  }
