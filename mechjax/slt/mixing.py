"""Whether SGLD chains mixed: rank-normalised split-R̂ and the bulk and tail effective sample sizes.

The definitions are those of Vehtari, Gelman, Simpson, Carpenter and Bürkner, "Rank-normalization,
folding, and localization: an improved R̂ for assessing convergence of MCMC", Bayesian Analysis
16(2), 2021 (arXiv:1903.08008), which Stan and ArviZ report:

* **Split chains.** Each of the ``M`` chains of ``N`` draws is cut into its first and last
  ``⌊N/2⌋`` draws (the middle draw is dropped when ``N`` is odd), giving ``2M`` chains, so that a
  trend inside a chain shows up as a difference between chains.
* **Rank normalisation** (their eq. 14). The ``S`` pooled draws are replaced by their normal scores
  ``z = Φ⁻¹((r − 3/8) / (S + 1/4))``, ``r`` the rank (ties averaged): R̂ and the bulk ESS then
  exist for any distribution, heavy tails included.
* **R̂** (their eqs. 1–4). With ``W`` the mean within-chain variance and ``B/N`` the variance of the
  chain means, ``var⁺ = (N − 1)/N · W + B/N`` and ``R̂ = √(var⁺ / W)``. The rank-normalised split-R̂
  is the larger of R̂ of the normal scores (the bulk) and of the normal scores of ``|θ − median θ|``
  (the tails: "folding"). It is 1 for chains that sample the same distribution.
* **ESS** (their eqs. 10–13, with Geyer's initial monotone sequence). From the per-chain
  autocovariances, the combined autocorrelation ``ρ̂_t = 1 − (W − mean_m acov_m(t)) / var⁺``; the
  pair sums ``P̂_k = ρ̂_{2k} + ρ̂_{2k+1}`` are added up to the first negative one, each capped by
  the one before (the initial monotone sequence), ``τ̂ = −1 + 2 Σ_k P̂_k + max(ρ̂_{2K}, 0)`` (the last
  term is Stan's correction for the truncation), ``τ̂ ≥ 1 / log₁₀ S``, and ``ESS = S / τ̂``.
  The **bulk ESS** is that of the rank-normalised split chains; the **tail ESS** is the smaller of
  those of the indicators ``θ ≤ q₅ %`` and ``θ ≤ q₉₅ %`` on the split chains.

Their rule of thumb: trust the chains when R̂ < 1.01 and the bulk ESS is at least 100 per chain
(:data:`RHAT_MAX`, :data:`ESS_PER_CHAIN_MIN`; :func:`warning` says which one failed).

Every function takes ``(..., chains, draws)`` arrays and returns ``(...)``: the leading axes are
independent quantities (the entries of a susceptibility matrix, say). A quantity whose draws do not
vary within any chain has no defined variance ratio and gets NaN.
"""

from __future__ import annotations

import numpy as np

RHAT_MAX = 1.01  # Vehtari et al. (2021), section 4: R̂ above 1.01 means "do not use the draws yet"
ESS_PER_CHAIN_MIN = 100  # their section 4: a bulk ESS of at least 100 per chain (400 for 4 chains)


class ChainsNotMixedWarning(UserWarning):
  """An estimate's chains fail Vehtari et al.'s rule of thumb: R̂ above 1.01, or an effective
  sample size under 100 per chain (:func:`warning`). Silence it with
  ``warnings.simplefilter("ignore", ChainsNotMixedWarning)``."""


def split_chains(x: np.ndarray) -> np.ndarray:
  """``(..., M, N) → (..., 2M, ⌊N/2⌋)``: each chain's first and last halves as separate chains
  (the middle draw dropped when ``N`` is odd)."""
  x = _traces(x, "split_chains")
  half = x.shape[-1] // 2
  return np.concatenate([x[..., :half], x[..., x.shape[-1] - half :]], axis=-2)


def rank_normalize(x: np.ndarray) -> np.ndarray:
  """The normal scores ``Φ⁻¹((r − 3/8) / (S + 1/4))`` of the pooled draws of each quantity (Vehtari
  et al. 2021, eq. 14; ``r`` the rank among all ``S`` draws of all chains, ties averaged)."""
  # Imported here: scipy.stats takes about 0.6 s to import, which every `import mechjax.slt` (a
  # command line that stops at a bad flag, say) would otherwise pay.
  from scipy import special  # noqa: PLC0415
  from scipy import stats  # noqa: PLC0415

  x = np.asarray(x, np.float64)
  flat = x.reshape(*x.shape[:-2], -1)
  ranks = stats.rankdata(flat, method="average", axis=-1)
  return special.ndtri((ranks - 0.375) / (flat.shape[-1] + 0.25)).reshape(x.shape)


def _variances(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """``(W, var⁺)`` of ``(..., M, N)`` chains: the mean within-chain variance and the pooled
  estimate ``(N − 1)/N · W + B/N`` (Vehtari et al. 2021, eqs. 2–3)."""
  n = x.shape[-1]
  within = x.var(axis=-1, ddof=1).mean(axis=-1)
  between = x.mean(axis=-1).var(axis=-1, ddof=1) if x.shape[-2] > 1 else 0.0
  return within, (n - 1) / n * within + between


def _rhat(x: np.ndarray) -> np.ndarray:
  within, var_plus = _variances(x)
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(within > 0, np.sqrt(var_plus / within), np.nan)


def rhat(x: np.ndarray) -> np.ndarray:
  """The rank-normalised split-R̂ of ``(..., chains, draws)`` traces: the larger of the bulk and
  the folded (tail) R̂ (Vehtari et al. 2021, section 4.2). NaN where a trace is constant."""
  x = _traces(x, "rhat")
  folded = np.abs(x - np.median(x.reshape(*x.shape[:-2], -1), axis=-1)[..., None, None])
  bulk = _rhat(rank_normalize(split_chains(x)))
  tail = _rhat(rank_normalize(split_chains(folded)))
  return np.fmax(bulk, tail)


def _autocovariance(x: np.ndarray) -> np.ndarray:
  """Each chain's autocovariance at lags ``0 … N − 1``, ``(1/N) Σ_i (x_i − x̄)(x_{i+t} − x̄)``, by
  FFT (zero-padded to twice the length, so the sums do not wrap around)."""
  n = x.shape[-1]
  centred = x - x.mean(axis=-1, keepdims=True)
  spectrum = np.fft.rfft(centred, n=2 * n, axis=-1)
  return np.fft.irfft(spectrum * np.conj(spectrum), n=2 * n, axis=-1)[..., :n] / n


def _ess(x: np.ndarray) -> np.ndarray:
  """The effective sample size of ``(..., M, N)`` chains as they are (no splitting or ranks): eq. 10
  of Vehtari et al. (2021) with Geyer's initial monotone sequence (module docstring)."""
  m, n = x.shape[-2:]
  if n < 4:
    raise ValueError(f"an effective sample size needs at least 4 draws per chain, got {n}")
  acov = _autocovariance(x).mean(axis=-2)  # (..., N): the chains' mean autocovariance at lag t
  within = acov[..., 0] * n / (n - 1)
  between = x.mean(axis=-1).var(axis=-1, ddof=1) if m > 1 else 0.0
  var_plus = (n - 1) / n * within + between
  with np.errstate(divide="ignore", invalid="ignore"):
    rho = 1.0 - (within[..., None] - acov) / var_plus[..., None]
  rho[..., 0] = 1.0
  pairs = (n - 3) // 2 + 1  # pair sums P̂_0 … P̂_K examined: ρ̂ up to lag 2K + 1 ≤ N − 2
  p = rho[..., 0 : 2 * pairs : 2] + rho[..., 1 : 2 * pairs : 2]
  # The first negative pair sum (after P̂_0) ends the sequence; none: the last pair examined.
  negative = p[..., 1:] < 0
  if pairs > 1:
    first = np.where(negative.any(axis=-1), negative.argmax(axis=-1) + 1, pairs - 1)
  else:
    first = np.zeros(p.shape[:-1], int)
  first = np.where(p[..., 0] <= 0, 0, first)
  kept = np.arange(pairs) < first[..., None]
  monotone = np.minimum.accumulate(p, axis=-1)
  last_even = np.take_along_axis(rho, 2 * first[..., None], axis=-1)[..., 0]
  tau = -1.0 + 2.0 * np.where(kept, monotone, 0.0).sum(axis=-1) + np.maximum(last_even, 0.0)
  total = m * n
  tau = np.maximum(tau, 1.0 / np.log10(total))
  with np.errstate(invalid="ignore"):
    return np.where(within > 0, total / tau, np.nan)


def ess_bulk(x: np.ndarray) -> np.ndarray:
  """The bulk effective sample size: the ESS of the rank-normalised split chains (Vehtari et al.
  2021, section 4.3). Of ``S`` draws; compare with ``100 × chains``."""
  return _ess(rank_normalize(split_chains(_traces(x, "ess_bulk"))))


def ess_tail(x: np.ndarray) -> np.ndarray:
  """The tail effective sample size: the smaller ESS of the split-chain indicators of the draws at
  or below the pooled 5 % and 95 % quantiles (Vehtari et al. 2021, section 4.3)."""
  x = _traces(x, "ess_tail")
  pooled = x.reshape(*x.shape[:-2], -1)
  out = []
  for q in (0.05, 0.95):
    level = np.quantile(pooled, q, axis=-1)[..., None, None]
    out.append(_ess(split_chains((x <= level).astype(np.float64))))
  return np.fmin(*out)


def summary(x: np.ndarray) -> dict[str, np.ndarray]:
  """``{"rhat", "ess_bulk", "ess_tail"}`` of ``(..., chains, draws)`` traces."""
  return {"rhat": rhat(x), "ess_bulk": ess_bulk(x), "ess_tail": ess_tail(x)}


def warning(name: str, stats_: dict, num_chains: int, ess: str = "bulk ESS") -> str | None:
  """One line when the worst entry of ``stats_`` (:func:`summary`'s) fails Vehtari et al.'s rule of
  thumb (R̂ > :data:`RHAT_MAX`, or an ESS, ``stats_["ess_bulk"]``, named ``ess`` in the line, under
  :data:`ESS_PER_CHAIN_MIN` per chain), naming the estimate and what to change; None when the
  chains look mixed."""
  rhat_worst = np.nanmax(np.append(np.asarray(stats_["rhat"], np.float64).ravel(), -np.inf))
  ess_worst = np.nanmin(np.append(np.asarray(stats_["ess_bulk"], np.float64).ravel(), np.inf))
  need = ESS_PER_CHAIN_MIN * num_chains
  problems = []
  if rhat_worst > RHAT_MAX:
    problems.append(f"R̂ = {rhat_worst:.4f} > {RHAT_MAX}")
  if ess_worst < need:
    problems.append(
      f"{ess} = {ess_worst:.0f} < {need} ({ESS_PER_CHAIN_MIN} per chain × {num_chains})"
    )
  if not problems:
    return None
  return (
    f"{name}: the chains have not mixed ({'; '.join(problems)}): run more burn-in "
    "(num_burnin), a smaller step_size, or more num_draws"
  )


def worst(rhat, ess, num_chains: int) -> dict[str, float]:
  """What a report says of many entries' diagnostics: the largest R̂, the smallest ESS, and the
  share of entries that fail the rule of thumb (R̂ > :data:`RHAT_MAX` or ESS under
  :data:`ESS_PER_CHAIN_MIN` per chain); NaNs ignored."""
  rhat, ess = np.asarray(rhat, np.float64).ravel(), np.asarray(ess, np.float64).ravel()
  failing = (rhat > RHAT_MAX) | (ess < ESS_PER_CHAIN_MIN * num_chains)
  return {
    "rhat_max": float(np.nanmax(np.append(rhat, -np.inf))),
    "ess_min": float(np.nanmin(np.append(ess, np.inf))),
    "share_failing": float(failing.mean()) if failing.size else 0.0,
  }


def _traces(x, name: str) -> np.ndarray:
  x = np.asarray(x, np.float64)
  if x.ndim < 2:
    raise ValueError(f"{name} needs traces shaped (..., chains, draws), got shape {x.shape}")
  return x
