"""SGLD on a localized, tempered posterior, with chains under ``vmap`` and draws under ``lax.scan``.

The target is ``p(w) ∝ exp(−nβ·L_n(w) − (γ/2)‖w − w*‖²)`` (Lau et al. 2023, arXiv:2308.12108), where ``L_n``
is the mean loss over the ``n`` samples, ``nβ`` the inverse temperature times ``n`` and ``γ`` the strength of
the localization at ``w*``. One step, in devinterp's convention, is

    Δw = −(ε/2)·[nβ·∇L_B(w) + γ·(w − w*)] + √ε·ξ,      ξ ~ N(0, I),

with ``L_B`` the mean loss on a minibatch ``B`` of ``batch_size`` samples drawn *with replacement* from the
step's key. ``nβ`` multiplies the *mean* minibatch loss, so it plays the role of ``n·β`` whatever the batch
size; see :func:`default_nbeta`.

With ``rmsprop=α`` the step is preconditioned as in pSGLD (Li et al. 2016, without the Γ correction term):
``V ← αV + (1 − α)(∇L_B)²``, ``G = 1/(√V + δ)``, ``Δw = −(ε/2)·G⊙[…] + √ε·√G⊙ξ``.

A ``param_mask`` (a pytree of 0/1 arrays like ``params``) restricts sampling to part of the parameters (the
weight-refined LLC): masked-out coordinates stay at ``w*``.

Randomness is a function of the key only: chain ``c`` uses ``fold_in(key, c)`` and its step ``t`` uses
``fold_in(chain_key, t)``, so the same key gives the same draws bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from mechjax.slt import susceptibility

Params = Any


def default_nbeta(n: int) -> float:
  """``nβ = n / ln n``: the inverse temperature ``β* = 1/ln n`` (Watanabe's WBIC temperature) times ``n``.

  ``n`` is the number of *samples in the dataset*, not the batch size: the minibatch loss is a mean, an
  unbiased estimate of ``L_n``, so ``nβ·∇L_B`` estimates the full ``nβ·∇L_n`` whatever the batch. devinterp's
  default uses the batch size ``b`` instead (``b / ln b``), a much higher temperature; both are valid
  choices of ``β`` (the LLC estimate is consistent for any fixed ``β`` as n grows), but they are not
  interchangeable, and the estimate should be reported with the ``nβ`` used.
  """
  if n < 2:
    raise ValueError(f"n must be >= 2 for n / ln n; got {n}")
  return float(n / math.log(n))


@dataclasses.dataclass(frozen=True)
class SGLDSettings:
  step_size: float
  nbeta: float
  localization: float
  batch_size: int
  rmsprop: float | None = None  # the decay α of the preconditioner, or None for plain SGLD
  rmsprop_eps: float = 1e-8
  mala: bool = True  # estimate a MALA acceptance probability per step (one more gradient per step)

  def __post_init__(self):
    for name in ("step_size", "nbeta"):
      value = getattr(self, name)
      if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    if not (math.isfinite(self.localization) and self.localization >= 0):
      raise ValueError(f"localization (gamma) must be a finite number >= 0; got {self.localization!r}")
    if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
      raise ValueError(f"batch_size must be an integer >= 1; got {self.batch_size!r}")
    if self.rmsprop is not None and not 0.0 < self.rmsprop < 1.0:
      raise ValueError(f"rmsprop (the preconditioner's decay) must be in (0, 1) or None; got {self.rmsprop!r}")


def _tree_dot(a, b):
  return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def sample_chain(loss_fn: Callable[[Params, Any], jax.Array], params_star: Params, data: Any, key: jax.Array,
                 num_steps: int, settings: SGLDSettings, param_mask: Params | None = None,
                 observe: Callable[[Params, Any], tuple[jax.Array, jax.Array]] | None = None, observe_data: Any = None,
                 stream_from: int | None = None):
  """Runs one chain from ``w*`` for ``num_steps`` steps; returns per-step traces (each ``(num_steps,)``).

  With ``observe``, ``observe(w, observe_data) -> (phi_K, dloss_M)`` is evaluated at every draw ``w``
  (before the step, like ``loss``): K observables and M loss changes, the inputs of
  :mod:`mechjax.slt.susceptibility`. With ``stream_from=None`` they are returned as traces ``phi``
  ``(num_steps, K)`` and ``dloss`` ``(num_steps, M)``; with ``stream_from=b`` only their running moments over
  the steps ``t ≥ b`` are kept (``moments``, a :class:`mechjax.slt.susceptibility.Moments`), so memory does
  not grow with the number of draws.

  Traces: ``loss`` (the minibatch loss at ``w`` *before* the step), ``loss_at_star`` (the same minibatch's
  loss at ``w*``: their difference is what the LLC averages, see :mod:`mechjax.slt.llc`),
  ``distance`` (``‖w − w*‖`` after the step), ``drift_norm`` (``‖(ε/2)·nβ·∇L_B‖``), ``noise_norm``
  (``‖√ε·ξ‖``) and, with ``settings.mala``, ``acceptance``: the Metropolis–Hastings acceptance probability
  ``min(1, exp(U(w) − U(w') + log q(w|w') − log q(w'|w)))`` of the proposal, with ``U = nβ·L_B + (γ/2)‖w − w*‖²``
  on the step's minibatch. Values near 1 mean the step size is small enough for the discretisation.
  """
  s = settings
  n = jax.tree.leaves(data)[0].shape[0]
  mask = jax.tree.map(jnp.ones_like, params_star) if param_mask is None else param_mask
  eps = s.step_size

  def potential_and_grad(w, batch):
    """``U = nβ·L_B + (γ/2)‖w − w*‖²``, ``L_B``, and the masked gradients of ``U`` and of ``L_B``."""
    loss, loss_grad = jax.value_and_grad(loss_fn)(w, batch)
    diff = jax.tree.map(lambda a, b: a - b, w, params_star)
    value = s.nbeta * loss + 0.5 * s.localization * _tree_dot(diff, diff)
    loss_grad = jax.tree.map(lambda g, m: g * m, loss_grad, mask)
    grad_u = jax.tree.map(lambda g, d, m: s.nbeta * g + s.localization * d * m, loss_grad, diff, mask)
    return value, loss, grad_u, loss_grad

  def log_q(w_to, w_from, grad_from, precond):
    # log N(w_to; w_from − (ε/2) G ∇U(w_from), ε G), up to a constant that cancels in the ratio.
    mean = jax.tree.map(lambda w, g, p: w - 0.5 * eps * p * g, w_from, grad_from, precond)
    resid = jax.tree.map(lambda a, b, p, m: (a - b) * m / jnp.sqrt(p), w_to, mean, precond, mask)
    return -_tree_dot(resid, resid) / (2 * eps)

  def step(carry, t):
    w, v, mom = carry
    k_batch, k_noise = jax.random.split(jax.random.fold_in(key, t))
    idx = jax.random.randint(k_batch, (s.batch_size,), 0, n)
    batch = jax.tree.map(lambda a: a[idx], data)
    u_w, loss, grad_u, loss_grad = potential_and_grad(w, batch)
    if s.rmsprop is None:
      precond = jax.tree.map(jnp.ones_like, w)
    else:
      v = jax.tree.map(lambda v_, g: s.rmsprop * v_ + (1 - s.rmsprop) * g**2, v, loss_grad)
      precond = jax.tree.map(lambda v_: 1.0 / (jnp.sqrt(v_) + s.rmsprop_eps), v)
    leaves, treedef = jax.tree.flatten(w)
    noise_keys = jax.random.split(k_noise, len(leaves))
    noise = jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(noise_keys, leaves)])
    noise = jax.tree.map(lambda z, p, m: jnp.sqrt(eps * p) * z * m, noise, precond, mask)
    w_new = jax.tree.map(lambda w_, p, g, z: w_ - 0.5 * eps * p * g + z, w, precond, grad_u, noise)
    drift = jax.tree.map(lambda p, g: 0.5 * eps * p * s.nbeta * g, precond, loss_grad)
    diff = jax.tree.map(lambda a, b: a - b, w_new, params_star)
    out = {"loss": loss, "loss_at_star": loss_fn(params_star, batch), "distance": jnp.sqrt(_tree_dot(diff, diff)),
           "drift_norm": jnp.sqrt(_tree_dot(drift, drift)), "noise_norm": jnp.sqrt(_tree_dot(noise, noise))}
    if observe is not None:
      phi, dloss = observe(w, observe_data)
      if stream_from is None:
        out["phi"], out["dloss"] = phi, dloss
      else:
        mom = susceptibility.moments_update(mom, phi, dloss, (t >= stream_from).astype(phi.dtype))
    if s.mala:
      u_new, _, grad_new, _ = potential_and_grad(w_new, batch)
      log_ratio = u_w - u_new + log_q(w, w_new, grad_new, precond) - log_q(w_new, w, grad_u, precond)
      out["acceptance"] = jnp.minimum(1.0, jnp.exp(jnp.minimum(log_ratio, 0.0)))
    return (w_new, v, mom), out

  v0 = jax.tree.map(jnp.zeros_like, params_star)
  mom0 = None
  if observe is not None and stream_from is not None:
    phi0, dloss0 = jax.eval_shape(observe, params_star, observe_data)
    if phi0.ndim != 1 or dloss0.ndim != 1:
      raise ValueError(f"observe must return two vectors (phi_K, dloss_M); got shapes {phi0.shape} and {dloss0.shape}")
    mom0 = susceptibility.moments_init(phi0.shape[0], dloss0.shape[0], phi0.dtype)
  (_, _, mom), traces = jax.lax.scan(step, (params_star, v0, mom0), jnp.arange(num_steps))
  if mom is not None:
    traces["moments"] = mom
  return traces


def sample_chains(loss_fn, params_star, data, key: jax.Array, num_chains: int, num_steps: int, settings: SGLDSettings,
                  param_mask=None, observe=None, observe_data=None, stream_from: int | None = None):
  """``num_chains`` chains from ``w*`` in one ``jit(vmap(scan))`` program; every trace is ``(num_chains, num_steps)``.

  When JAX sees more than one device and ``num_chains`` is a multiple of their number, the chain axis is
  sharded over all of them (a 1-D ``Mesh`` named ``"chains"``; ``w*`` and the data are replicated), so
  each device runs its share of the chains in parallel. On a CPU, ``jax.config.update("jax_num_cpu_devices",
  os.cpu_count())`` before JAX starts makes every core a device: with 2 cores the sampler runs about 1.5×
  faster than on one device, because XLA runs the elementwise work of one device on one core. The draws
  depend on the key and on the number of devices (the partitioned matmuls round differently), not on
  anything else. ``observe``, ``observe_data`` and ``stream_from``: see :func:`sample_chain`.
  """
  if not (isinstance(num_chains, int) and num_chains >= 1 and isinstance(num_steps, int) and num_steps >= 1):
    raise ValueError(f"num_chains and num_steps must be integers >= 1; got {num_chains!r} and {num_steps!r}")
  n = jax.tree.leaves(data)[0].shape[0]
  if settings.batch_size > n:
    raise ValueError(f"batch_size={settings.batch_size} exceeds the {n} samples in data")
  keys = jax.vmap(lambda c: jax.random.fold_in(key, c))(jnp.arange(num_chains))
  shards = chain_shards(num_chains)
  if stream_from is not None and not (isinstance(stream_from, int) and 0 <= stream_from < num_steps):
    raise ValueError(f"stream_from must be an integer in [0, num_steps={num_steps}); got {stream_from!r}")
  program = _program(loss_fn, num_steps, settings, param_mask is not None, shards, observe, stream_from)
  return program(params_star, data, keys, param_mask, observe_data)


@functools.lru_cache(maxsize=64)
def _program(loss_fn, num_steps: int, settings: SGLDSettings, masked: bool, shards: int = 1, observe=None,
             stream_from: int | None = None):
  """One compiled program per (loss, length, settings, devices, observables): repeated calls (another key,
  another w*, other data of the same shapes) reuse it instead of tracing and compiling again."""

  def run(params_star, data, keys, param_mask, observe_data):
    chain = lambda k: sample_chain(loss_fn, params_star, data, k, num_steps, settings, param_mask if masked else None,
                                   observe, observe_data, stream_from)
    return jax.vmap(chain)(keys)

  return jit_over_chains(run, shards)


def chain_shards(num_chains: int) -> int:
  """Over how many devices the chain axis is split: all of them when there are several and their number
  divides ``num_chains``, else 1."""
  ndev = len(jax.devices())
  return ndev if ndev > 1 and num_chains % ndev == 0 else 1


def jit_over_chains(run: Callable, shards: int, chain_axis: int = 0):
  """``jit(run)`` for ``run(params, data, keys, mask, observe_data)``: with ``shards > 1`` the chain keys and
  axis ``chain_axis`` of every output are split over the first ``shards`` devices (a 1-D ``Mesh`` named
  ``"chains"``), and everything else is replicated."""
  if shards == 1:
    return jax.jit(run)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:shards]), ("chains",))
  sharding = lambda *spec: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
  replicated, by_chain = sharding(), sharding("chains")
  return jax.jit(run, in_shardings=(replicated, replicated, by_chain, replicated, replicated),
                 out_shardings=sharding(*([None] * chain_axis), "chains"))
