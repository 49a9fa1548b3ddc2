"""The LLC over training: a deep linear network learns a low-rank teacher mode by mode, and the local
learning coefficient (Lau et al. 2023, arXiv:2308.12108) is estimated at every checkpoint.

The data are ``x ~ N(0, I)`` and ``y = x·M (+ noise)`` with a teacher ``M = V diag(s) Uᵀ`` of rank
``R = len(s)``, fixed by ``--seed``. The student is ``f(x) = x W_1 ⋯ W_L`` with layer widths
``(H_0, …, H_L)``, trained by SGD on minibatches of a fixed dataset of ``n`` samples from a small
initialisation. It learns the teacher's modes one at a time, strongest first (saddle-to-saddle dynamics),
so the loss falls in steps and the number of learned modes ``r`` rises ``0 → R``.

At every checkpoint the LLC is estimated with ``num_chains`` vmapped SGLD chains (one compiled program for
all checkpoints, seeds and localizations). Two reference values are drawn with it:

* the converged network sits at a true parameter of a rank-``R`` deep linear network, whose learning
  coefficient is known in closed form (Aoyagi 2024; :func:`mechjax.slt.closed_forms.deep_linear_network`).
  The last checkpoint's estimate is compared with it, as in :mod:`theory.llc_closed_forms`.
* a plateau with ``r < R`` learned modes is *not* a minimum: it is a degenerate saddle whose escape
  directions are cubic (for three layers) in the unused hidden units. A chain started there drifts
  downhill at a rate set by ``nβ`` against the localization ``γ``, and its estimate is then negative or
  unstable. The closed-form ``λ(r)`` of a rank-``r`` network is drawn for these plateaus as the value a
  local minimum with that rank would have; whether an estimate approaches it depends on ``γ``, which is
  why the study runs more than one ``γ``.

Outputs in the workdir: ``metrics.jsonl`` (training), ``llc.jsonl`` (one line per checkpoint, seed and
``γ``; an interrupted run resumes after the last complete checkpoint), ``summary.json`` and
``figures/llc_dynamics.png``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import plotting
from mechjax.slt import closed_forms as cf
from mechjax.slt import llc as llc_lib
from mechjax.slt import sgld
from mechjax.train import checkpoint as ckpt_lib
from mechjax.train import loop
from mechjax.train import metrics as metrics_lib

RUN = "dln"
TEACHER_STREAM = 2**31 - 1  # seed_keys uses fold_in(PRNGKey(seed), i) for i < num_seeds, far below this.
DATA_STREAM = 2**31 - 2
LLC_STREAM = 2**31 - 3


@dataclasses.dataclass(frozen=True)
class Config:
  widths: tuple[int, ...] = (5, 5, 5, 5)
  singular_values: tuple[float, ...] = (3.0, 2.0, 1.0)
  noise: float = 0.0
  n: int = 10_000
  init_scale: float = 0.01
  batch_size: int = 64
  learning_rate: float = 0.05
  seed: int = 0
  num_seeds: int = 2
  steps: int = 4000
  log_every: int = 50
  checkpoint_every: int = 100
  llc_chains: int = 4
  llc_draws: int = 2000
  llc_burnin: int = 200
  llc_step_size: float = 1e-5
  llc_batch_size: int = 256
  localizations: tuple[float, ...] = (100.0, 1000.0)
  nbeta: float | None = None  # None: n / ln n

  def __post_init__(self):
    if len(self.widths) < 3:
      raise ValueError(f"widths must list at least input, one hidden and output width; got {self.widths}")
    if any(int(w) != w or w < 1 for w in self.widths):
      raise ValueError(f"widths must be positive integers; got {self.widths}")
    if not self.singular_values or len(self.singular_values) > min(self.widths):
      raise ValueError(f"the teacher's rank len(singular_values)={len(self.singular_values)} must be between 1 and "
                       f"the narrowest width {min(self.widths)}")
    if any(not s > 0 for s in self.singular_values):
      raise ValueError(f"singular_values must be > 0; got {self.singular_values}")
    if self.llc_batch_size > self.n or self.batch_size > self.n:
      raise ValueError(f"batch sizes ({self.batch_size}, {self.llc_batch_size}) must not exceed n={self.n}")

  @property
  def rank(self) -> int:
    return len(self.singular_values)

  @property
  def nbeta_value(self) -> float:
    return sgld.default_nbeta(self.n) if self.nbeta is None else float(self.nbeta)


def teacher(cfg: Config) -> np.ndarray:
  """``M = V diag(s) Uᵀ`` (``H_0 × H_L``) with random orthonormal ``V``, ``U`` fixed by ``cfg.seed``."""
  kv, ku = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(cfg.seed), TEACHER_STREAM))
  r = cfg.rank
  v = np.linalg.qr(np.asarray(jax.random.normal(kv, (cfg.widths[0], r))))[0]
  u = np.linalg.qr(np.asarray(jax.random.normal(ku, (cfg.widths[-1], r))))[0]
  s = np.sort(np.asarray(cfg.singular_values, np.float64))[::-1]
  return ((v * s) @ u.T).astype(np.float32)


def make_data(cfg: Config) -> dict:
  """The fixed training set ``{"x": (n, H_0), "y": (n, H_L)}``; the LLC is estimated on the same set."""
  kx, ke = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(cfg.seed), DATA_STREAM))
  x = jax.random.normal(kx, (cfg.n, cfg.widths[0]))
  y = x @ jnp.asarray(teacher(cfg)) + cfg.noise * jax.random.normal(ke, (cfg.n, cfg.widths[-1]))
  return {"x": x, "y": y}


def forward(params: dict, x: jax.Array) -> jax.Array:
  out = x
  for i in range(len(params)):
    out = out @ params[f"W{i + 1}"]
  return out


def half_mse(params: dict, batch: dict) -> jax.Array:
  """``½·mean_i ‖y_i − f(x_i)‖²``, the loss that is trained and sampled."""
  return 0.5 * jnp.mean(jnp.sum((forward(params, batch["x"]) - batch["y"]) ** 2, axis=-1))


def learned_modes(product: jax.Array, singular_values) -> jax.Array:
  """How many teacher modes the product ``W_1⋯W_L`` has learned: its ``i``-th singular value (descending)
  counts once it exceeds half of the teacher's ``i``-th."""
  s = jnp.sort(jnp.asarray(singular_values, jnp.float32))[::-1]
  sv = jnp.linalg.svd(product, compute_uv=False)[: s.shape[0]]
  return jnp.sum(sv > 0.5 * s)


def make_problem(cfg: Config, data: dict) -> loop.Problem:
  shapes = list(zip(cfg.widths[:-1], cfg.widths[1:]))

  def init(key):
    keys = jax.random.split(key, len(shapes))
    return {f"W{i + 1}": cfg.init_scale * jax.random.normal(k, s) for i, (k, s) in enumerate(zip(keys, shapes))}

  def loss(params, key):
    idx = jax.random.randint(key, (cfg.batch_size,), 0, cfg.n)
    return half_mse(params, jax.tree.map(lambda a: a[idx], data)), {}

  def evaluate(params, key):
    del key
    product = forward(params, jnp.eye(cfg.widths[0]))
    return {"full_loss": half_mse(params, data), "learned_modes": learned_modes(product, cfg.singular_values)}

  return loop.Problem(init=init, loss=loss, evaluate=evaluate)


def closed_form_llcs(cfg: Config) -> list[float]:
  """``λ(r)`` of a deep linear network with these widths and true rank ``r``, for ``r = 0 … R``."""
  return [float(cf.deep_linear_network(cfg.widths, r)[0]) for r in range(cfg.rank + 1)]


def estimate_checkpoints(cfg: Config, workdir: str, data: dict, problem: loop.Problem, optimizer,
                         progress: bool = True) -> list[dict]:
  """The LLC at every saved checkpoint, for every seed and localization; appends to ``llc.jsonl``.

  Rows of checkpoints already in ``llc.jsonl`` are kept and not recomputed. Every estimate uses the same
  key (per seed), so neighbouring checkpoints share their random numbers and their difference is less noisy.
  """
  path = os.path.join(workdir, "llc.jsonl")
  rows = metrics_lib.read_jsonl(path)
  expected = cfg.num_seeds * len(cfg.localizations)
  done = {s for s in {r["step"] for r in rows} if sum(r["step"] == s for r in rows) == expected}
  rows = [r for r in rows if r["step"] in done]  # a torn checkpoint (killed mid-way) is redone
  if metrics_lib.is_writer():
    with open(path, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in rows)
  keys = loop.seed_keys(cfg.seed, cfg.num_seeds)
  abstract = jax.eval_shape(jax.vmap(lambda k: loop.init_state(problem, optimizer, k)), keys)
  nbeta = cfg.nbeta_value
  with ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints", RUN), max_to_keep=None) as checkpointer:
    steps = checkpointer.all_steps()
    for i, step in enumerate(steps):
      if step in done:
        continue
      t0 = time.perf_counter()
      params_S = checkpointer.restore(abstract, step)["params"]
      new = []
      for seed in range(cfg.num_seeds):
        params = jax.tree.map(lambda a: a[seed], params_S)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(cfg.seed), LLC_STREAM), seed)
        loss_at = float(half_mse(params, data))
        modes = int(learned_modes(forward(params, jnp.eye(cfg.widths[0])), cfg.singular_values))
        for gamma in cfg.localizations:
          res = llc_lib.estimate_llc(half_mse, params, data, key=key, num_chains=cfg.llc_chains,
                                     num_draws=cfg.llc_draws, num_burnin=cfg.llc_burnin,
                                     step_size=cfg.llc_step_size, nbeta=nbeta, localization=float(gamma),
                                     batch_size=cfg.llc_batch_size)
          new.append({"step": int(step), "seed": seed, "localization": float(gamma), "llc_mean": res.llc_mean,
                      "llc_std": res.llc_std, "llc_per_chain": res.llc_per_chain.tolist(), "loss": loss_at,
                      "learned_modes": modes,
                      "fraction_below_init_loss": res.diagnostics["fraction_below_init_loss"],
                      "mala_acceptance": res.diagnostics["mala_acceptance"],
                      "distance_mean": res.diagnostics["distance_mean"]})
      if metrics_lib.is_writer():
        with open(path, "a") as f:
          f.writelines(json.dumps(r) + "\n" for r in new)
      rows.extend(new)
      if progress:
        text = ", ".join(f"γ={r['localization']:g}: {r['llc_mean']:.2f}" for r in new if r["seed"] == 0)
        print(f"[llc] checkpoint {step} ({i + 1}/{len(steps)}), seed 0: {text}  "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
  return sorted(rows, key=lambda r: (r["step"], r["seed"], r["localization"]))


def summarize(cfg: Config, history: list[dict], rows: list[dict]) -> dict:
  lams = closed_form_llcs(cfg)
  last = max(r["step"] for r in rows)
  out = {"closed_form_llc_by_rank": lams, "nbeta": cfg.nbeta_value, "final_step": last, "localizations": {}}
  first_full = next((int(h["step"]) for h in history if np.min(h["learned_modes"]) >= cfg.rank), None)
  out["first_step_all_modes_learned"] = first_full
  for gamma in cfg.localizations:
    g = [r for r in rows if r["localization"] == gamma]
    final = np.array([r["llc_mean"] for r in g if r["step"] == last])
    by_rank = {}
    for rank in range(cfg.rank + 1):
      vals = np.array([r["llc_mean"] for r in g if r["learned_modes"] == rank])
      if vals.size:
        by_rank[str(rank)] = {"checkpoints_x_seeds": int(vals.size), "median_llc": float(np.median(vals)),
                              "negative_fraction": float(np.mean(vals < 0)), "closed_form": lams[rank]}
    out["localizations"][f"{gamma:g}"] = {
        "final_llc_mean": float(final.mean()), "final_llc_sd_over_seeds": float(final.std()),
        "final_relative_error": float(final.mean() / lams[cfg.rank] - 1), "by_learned_modes": by_rank,
        "final_mala_acceptance": float(np.mean([r["mala_acceptance"] for r in g if r["step"] == last]))}
  out["final_loss"] = float(np.mean(history[-1]["full_loss"]))
  return out


def plot(cfg: Config, history: list[dict], rows: list[dict], path: str) -> str:
  """Loss (log scale) and learned modes over training; the LLC per checkpoint with the closed-form ``λ(r)``."""
  plt = plotting.plt
  lams = closed_form_llcs(cfg)
  fig, (ax_loss, ax_llc) = plt.subplots(1, 2, figsize=(13, 4.2))
  steps = np.array([h["step"] for h in history])
  loss = np.array([h["full_loss"] for h in history], float)
  modes = np.array([h["learned_modes"] for h in history], float)
  for s in range(loss.shape[1]):
    ax_loss.semilogy(steps, loss[:, s], color="C0", lw=1.4, alpha=0.8, label="full-data loss" if s == 0 else None)
  ax_loss.set_ylim(bottom=max(1e-6, 0.3 * np.nanmin(loss)))
  ax_loss.set_xlabel("training step")
  ax_loss.set_ylabel("½·mean ‖y − f(x)‖²")
  ax_modes = ax_loss.twinx()
  for s in range(modes.shape[1]):
    ax_modes.step(steps, modes[:, s], where="post", color="C3", lw=1.0, alpha=0.7,
                  label="learned modes r" if s == 0 else None)
  ax_modes.set_ylabel("learned teacher modes r")
  ax_modes.set_ylim(-0.2, cfg.rank + 0.5)
  ax_modes.set_yticks(range(cfg.rank + 1))
  handles = ax_loss.get_legend_handles_labels()[0] + ax_modes.get_legend_handles_labels()[0]
  ax_loss.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper right")
  ax_loss.set_title(f"deep linear network {'-'.join(map(str, cfg.widths))}, teacher rank {cfg.rank}", fontsize=10)
  ax_loss.grid(alpha=0.3)

  floor = -0.25 * lams[-1]
  styles = ["-", "--", ":", "-."]
  for j, gamma in enumerate(cfg.localizations):
    for seed in range(cfg.num_seeds):
      g = sorted((r for r in rows if r["localization"] == gamma and r["seed"] == seed), key=lambda r: r["step"])
      xs = np.array([r["step"] for r in g])
      mean, sd = np.array([r["llc_mean"] for r in g]), np.array([r["llc_std"] for r in g])
      shown = mean >= floor
      ax_llc.errorbar(xs[shown], mean[shown], yerr=sd[shown], fmt="o", ls=styles[seed % 4], ms=3, lw=1.1, capsize=2,
                      color=f"C{j}", label=f"γ = {gamma:g}, seed {seed}")
      if (~shown).any():
        ax_llc.plot(xs[~shown], np.full((~shown).sum(), floor), "v", color=f"C{j}", ms=6,
                    label=f"γ = {gamma:g}: below {floor:.1f} (chains leave a saddle)" if seed == 0 else None)
  for r, lam in enumerate(lams):
    ax_llc.axhline(lam, color="gray", ls=":", lw=1)
    ax_llc.text(steps[0], lam, f"λ(r={r}) = {lam:g}", va="bottom", ha="left", fontsize=7, color="gray")
  ax_llc.axhline(0, color="black", lw=0.6, alpha=0.4)
  ax_llc.set_ylim(floor * 1.15, lams[-1] * 1.3)
  ax_llc.set_xlabel("training step")
  ax_llc.set_ylabel("LLC estimate (bar: sd over chains)")
  ax_llc.set_title(f"SGLD: {cfg.llc_chains} chains × {cfg.llc_draws} draws, nβ = {cfg.nbeta_value:.0f}, "
                   f"ε = {cfg.llc_step_size:g}", fontsize=10)
  ax_llc.grid(alpha=0.3)
  ax_llc.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def run(cfg: Config, workdir: str, progress: bool = True) -> dict:
  """Trains (resuming), estimates the LLC at every checkpoint (resuming), writes summary.json and the figure."""
  data = make_data(cfg)
  problem = make_problem(cfg, data)
  optimizer = optax.sgd(cfg.learning_rate)
  t0 = time.perf_counter()
  result = loop.train(problem, optimizer, keys=loop.seed_keys(cfg.seed, cfg.num_seeds), steps=cfg.steps,
                      workdir=workdir, run=RUN, log_every=cfg.log_every, checkpoint_every=cfg.checkpoint_every,
                      progress=progress, keep_checkpoints=None,
                      summarize=lambda row: f"loss {np.mean(row['full_loss']):.4f} | learned modes "
                                            f"{np.asarray(row['learned_modes']).tolist()}")
  t_train = time.perf_counter() - t0
  rows = estimate_checkpoints(cfg, workdir, data, problem, optimizer, progress=progress)
  t_llc = time.perf_counter() - t0 - t_train
  summary = summarize(cfg, result.history, rows)
  summary["seconds"] = {"train": t_train, "llc": t_llc}
  if metrics_lib.is_writer():
    figures = os.path.join(workdir, "figures")
    os.makedirs(figures, exist_ok=True)
    summary["figures"] = [os.path.basename(plot(cfg, result.history, rows, os.path.join(figures, "llc_dynamics.png")))]
    metrics_lib.write_json(os.path.join(workdir, "summary.json"), summary)
  return summary


def config_from_flags(values: dict) -> Config:
  """A Config from the experiment's flag values (same names; lists become tuples of numbers)."""
  convert = {"widths": lambda v: tuple(int(w) for w in v),
             "singular_values": lambda v: tuple(float(s) for s in v),
             "localizations": lambda v: tuple(float(g) for g in v),
             "nbeta": lambda v: None if v in (None, 0, 0.0) else float(v)}
  values = {**values, "localizations": values["localization"]}
  fields = [f.name for f in dataclasses.fields(Config)]
  return Config(**{name: convert.get(name, lambda v: v)(values[name]) for name in fields})
