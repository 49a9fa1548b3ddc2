"""Known learning coefficients λ (and multiplicities m), to validate LLC estimators against.

For a model ``p(y | x, w)`` with true parameter ``w₀`` and ``K(w) = KL(q ‖ p_w)``, the free energy
is ``F_n = n L_n(w₀) + λ log n − (m − 1) log log n + O_p(1)`` (Watanabe 2009). λ = d/2 for regular
models and is smaller for singular ones. Every function here returns ``(λ, m)`` as exact rationals
(``fractions.Fraction``) and integers, so tests compare them exactly.

* :func:`regular`: λ = d/2, m = 1.
* :func:`normal_crossing`: ``K(w) = ∏ w_j^{2 k_j}`` near 0 with a prior positive at 0: λ = min_j
  1/(2k_j), m = the number of j attaining the minimum. ``f = x ∏ w_j^{p_j}`` under squared loss has
  ``k_j = p_j``.
* :func:`reduced_rank_regression`: ``y = B A x`` with ``A`` (H × M), ``B`` (N × H), true rank r
  (Aoyagi & Watanabe 2005, Main Theorem).
* :func:`deep_linear_network`: ``y = W_L ⋯ W_1 x`` with widths ``H_0`` (input), …, ``H_L`` (output)
  and true rank r (Aoyagi 2024, "Consideration on the learning efficiency of multiple-layered neural
  networks with linear units", Neural Networks 172; also Furman & Lau 2024, arXiv:2402.03698,
  Theorem 1).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence


def regular(d: int) -> tuple[Fraction, int]:
  """λ = d/2, m = 1 for a model whose Fisher information is non-degenerate at the truth."""
  d = _count("d", d, minimum=1)
  return Fraction(d, 2), 1


def normal_crossing(powers: Sequence[int]) -> tuple[Fraction, int]:
  """``K(w) = ∏ w_j^{2 k_j}`` (``powers`` = the k_j ≥ 1): λ = min_j 1/(2k_j), m = #{j attaining it}.

  Examples: ``w1·w2²`` under squared loss has ``powers = (1, 2)``: λ = 1/4, m = 1; ``w1·w2`` has λ =
  1/2, m = 2.
  """
  ks = [_count("each power", k, minimum=1) for k in powers]
  if not ks:
    raise ValueError("powers must name at least one coordinate, e.g. (1, 2) for K = w1² w2⁴")
  lam = min(Fraction(1, 2 * k) for k in ks)
  return lam, sum(Fraction(1, 2 * k) == lam for k in ks)


def reduced_rank_regression(m_in: int, h: int, n_out: int, r: int) -> tuple[Fraction, int]:
  """λ and m of ``y = B A x``: M inputs, H hidden units, N outputs, true rank r ≤ min(M, H, N).

  Aoyagi & Watanabe (2005):

  * M + H < N + r: λ = (HM − Hr + Nr)/2;
  * N + H < M + r: λ = (HN − Hr + Mr)/2;
  * M + N < H + r: λ = MN/2;
  * otherwise λ = [2(H + r)(M + N) − (M − N)² − (H + r)² + s]/8 with s = (M + N + H + r) mod 2, and
    m = 2 when that sum is odd (m = 1 in every other case).
  """
  m_in, h, n_out = (_count(name, v, minimum=1) for name, v in (("M", m_in), ("H", h), ("N", n_out)))
  r = _count("r", r, minimum=0)
  if r > min(m_in, h, n_out):
    raise ValueError(f"the true rank r={r} cannot exceed min(M, H, N) = {min(m_in, h, n_out)}")
  if m_in + h < n_out + r:
    return Fraction(h * m_in - h * r + n_out * r, 2), 1
  if n_out + h < m_in + r:
    return Fraction(h * n_out - h * r + m_in * r, 2), 1
  if m_in + n_out < h + r:
    return Fraction(m_in * n_out, 2), 1
  odd = (m_in + n_out + h + r) % 2
  lam = Fraction(2 * (h + r) * (m_in + n_out) - (m_in - n_out) ** 2 - (h + r) ** 2 + odd, 8)
  return lam, 2 if odd else 1


def deep_linear_network(widths: Sequence[int], r: int) -> tuple[Fraction, int]:
  """λ and m of ``y = W_L ⋯ W_1 x`` with layer widths ``widths = (H_0, …, H_L)`` (input first) and
  true rank r.

  With ``M_j = H_j − r``, take the subset Σ of the indices (|Σ| = ℓ + 1) made of the smallest M_j
  such that ``max_Σ M_j < min_{not Σ} M_k``, ``Σ_Σ M_j ≥ ℓ · max_Σ M_j`` and ``Σ_Σ M_j < ℓ ·
  min_{not Σ} M_k`` (Aoyagi 2024). With ``S = Σ_Σ M_j``, ``c = ⌈S/ℓ⌉`` and ``a = S − (c − 1) ℓ``:

    λ = [−r² + r(H_0 + H_L)]/2 + a(ℓ − a)/(4ℓ) − ℓ(ℓ − 1)/4 · (S/ℓ)² + ½ Σ_{i<j ∈ Σ} M_i M_j,
    m = a(ℓ − a) + 1.

  With two weight matrices this is :func:`reduced_rank_regression` (tested).
  """
  hs = [_count("each width", w, minimum=1) for w in widths]
  if len(hs) < 2:
    raise ValueError(
      f"widths must list the input and output widths at least (H_0, ..., H_L); got {list(widths)}"
    )
  r = _count("r", r, minimum=0)
  if r > min(hs):
    raise ValueError(f"the true rank r={r} cannot exceed the narrowest width {min(hs)}")
  ms = [w - r for w in hs]
  order = sorted(range(len(ms)), key=lambda j: ms[j])
  for size in range(2, len(ms) + 1):
    sigma, rest = [ms[j] for j in order[:size]], [ms[j] for j in order[size:]]
    ell, total = size - 1, sum(sigma)
    if rest and not max(sigma) < min(rest):
      continue
    if total < ell * max(sigma):
      continue
    if rest and not total < ell * min(rest):
      continue
    c = -(-total // ell)  # ceil
    a = total - (c - 1) * ell
    pairs = sum(sigma[i] * sigma[j] for i in range(size) for j in range(i + 1, size))
    lam = (
      Fraction(-r * r + r * (hs[0] + hs[-1]), 2)
      + Fraction(a * (ell - a), 4 * ell)
      - Fraction(ell * (ell - 1), 4) * Fraction(total, ell) ** 2
      + Fraction(pairs, 2)
    )
    return lam, a * (ell - a) + 1
  raise AssertionError(f"no admissible subset for M = {ms}")  # Aoyagi 2024 proves one always exists


def _count(name: str, value, minimum: int) -> int:
  try:
    ok = not isinstance(value, bool) and int(value) == value and value >= minimum
  except (TypeError, ValueError):
    ok = False
  if not ok:
    raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
  return int(value)


def crossing_expectation(
  p: int, nbeta: float, localization: float = 1.0, scale: float = 1.0
) -> float:
  """What an exact sampler's LLC estimate converges to at finite ``nβ`` for ``K(w) = scale · w1² ·
  w2^{2p}``.

  This is the model ``f = x·w1·w2^p`` under the loss ``½(y − f)²`` with noiseless targets
  (``scale = E[x²]/2``), sampled at ``w* = 0`` from ``exp(−nβ·K(w) − (γ/2)‖w‖²)``:

      E[nβ·K] → λ = min(1/2, 1/(2p))   as nβ → ∞,

  but at finite ``nβ`` it is smaller, by ``(m − 1)/ln nβ`` to leading order when ``m = 2`` (``p =
  1``) and by a power of ``nβ`` otherwise. Comparing an estimate with this value separates the
  sampler's error from the finite-``nβ`` one. ``w1`` integrates out in closed form (for fixed ``w2``
  the density is Gaussian in ``w1``), leaving a 1-D integral over ``w2`` done by adaptive
  quadrature.
  """
  import numpy as np  # local: the closed forms above need nothing but fractions
  from scipy import integrate

  p = _count("p", p, minimum=1)
  if not (nbeta > 0 and localization > 0 and scale > 0):
    raise ValueError(
      f"nbeta, localization and scale must be > 0; got {nbeta}, {localization}, {scale}"
    )
  c = localization / 2

  def a(w2):  # nβ·K = a(w2)·w1²
    return nbeta * scale * w2 ** (2 * p)

  weight = lambda w2: (
    (a(w2) + c) ** -0.5 * np.exp(-c * w2 * w2)
  )  # ∫ exp(−(a + c) w1²) dw1 ∝ (a + c)^{-1/2}
  mean_k = lambda w2: a(w2) / (2 * (a(w2) + c))  # E[a·w1²] under that Gaussian
  num = integrate.quad(lambda w: mean_k(w) * weight(w), 0, np.inf, limit=500)[0]
  den = integrate.quad(weight, 0, np.inf, limit=500)[0]
  return float(num / den)
