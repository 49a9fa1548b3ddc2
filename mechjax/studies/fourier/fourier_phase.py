"""The Fourier-phase study: amplitude information is learned before phase information.

Two-layer networks are trained with online SGD (a fresh batch every step, drawn on the device) on

* ``amplitude``: two Gaussian classes whose power spectra differ (``alpha0`` vs ``alpha1``), random
  phases;
* ``linear_process``: same spectrum ``alpha`` for both classes, class 1 is ``h ⊛ ξ`` with
  non-Gaussian ``ξ``;
* ``spiked_principal`` / ``spiked_isotropic``: same spectrum, class 1 is the coloured
  spiked-cumulant model with the spike drawn from the power-law spectrum (dominant principal
  subspace) or uniformly.

At every logged step the networks are evaluated on a fixed test set and on two transformed copies of
it: phase-scrambled (amplitudes kept, phases randomised) and amplitude-whitened (phases kept, flat
spectrum). Accuracy that survives scrambling comes from amplitude information; accuracy that
survives whitening comes from phase information. See :mod:`mechjax.data.fourier` for the data model
and its references.

The spiked tasks train ``num_spikes`` teacher spikes × ``num_seeds`` seeds in one vmapped program
(the spike is each member's ``member_data``, :func:`mechjax.train.loop.train`), so that their
numbers come with a spread over teachers as well as over seeds: how fast a principal spike is found
depends on the spike drawn.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax.data import fourier
from mechjax.models.mlp import ACTIVATIONS
from mechjax.models.mlp import TwoLayer
from mechjax.studies import frame
from mechjax.train import loop
from mechjax.train import metrics

TASKS = ("amplitude", "linear_process", "spiked_principal", "spiked_isotropic")
PHASE_TASKS = TASKS[1:]
SPIKED_TASKS = TASKS[2:]
TEST_SETS = {  # the accuracies evaluated, by the test set they are on
  "test_acc": "clean test set",
  "scrambled_acc": "phase-scrambled (amplitudes only)",
  "whitened_acc": "amplitude-whitened (phases only)",
}


NAME = "fourier_phase"


# Conditions are named with ``alpha:g``: two alphas equal to 6 significant digits would share a run.
_distinct_runs = config.distinct_as("g")
_SHAPE_ERROR = "must be N or H,W with integers >= 2, e.g. 32 or 16,16"
_shape = config.accepted_by(fourier.check_shape, _SHAPE_ERROR)


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=30_000, num_seeds=4, log_every=500, checkpoint_every=10_000)
  )
  tasks: tuple[str, ...] = config.setting(
    TASKS, "Tasks to train.", choices=TASKS, check=config.all_of(config.non_empty, config.distinct)
  )
  alphas: tuple[float, ...] = config.setting(
    (0.0, 1.0, 2.0),
    "Power-spectrum exponents for the phase tasks, E|x_k|^2 ~ |k|^-alpha.",
    flag="alpha",
    check=config.all_of(config.non_empty, config.each(config.non_negative), _distinct_runs),
  )
  shape: tuple[int, ...] = config.setting(
    (32,), "Input shape: N for 1D signals, or H,W for images (e.g. 16,16).", check=_shape
  )
  amplitude_alphas: tuple[float, float] = config.setting(
    (0.0, 1.0),
    "The two spectrum exponents of the amplitude task's classes.",
    check=config.all_of(config.each(config.non_negative), config.distinct),
  )
  beta: float = config.setting(
    5.0, "Spike strength beta of the spiked-cumulant task.", check=config.non_negative
  )
  num_spikes: int = config.setting(
    2,
    "Teacher spikes of the spiked tasks, each trained with --num_seeds seeds in the same program.",
    check=config.at_least(1),
  )
  noise: str = config.setting(
    "rademacher", "Non-Gaussian noise of the linear-process task.", choices=fourier.NOISES
  )
  width: int = config.setting(64, "Hidden units of the two-layer net.", check=config.at_least(1))
  activation: str = config.setting("relu", "Hidden activation.", choices=sorted(ACTIVATIONS))
  batch_size: int = config.setting(
    64,
    "Fresh samples per SGD step (online SGD: no sample is seen twice).",
    check=config.at_least(2),
  )
  learning_rate: float = config.setting(0.05, "SGD step size.", check=config.positive)
  eval_samples: int = config.setting(
    4096,
    "Size of the fixed test set (and its scrambled and whitened copies).",
    check=config.at_least(2),
  )
  target_accuracy: float = config.setting(
    0.6,
    "summary.json reports the samples needed to reach this test accuracy.",
    check=config.within(0.5, 1.0, high_open=False),
  )


@dataclasses.dataclass(frozen=True)
class Condition:
  run: str
  task: str
  alpha: float | None  # None for the amplitude task (its two are Config.amplitude_alphas)


def conditions(cfg: Config) -> list[Condition]:
  """One run per phase task and alpha, one for the amplitude task; their names are distinct, as
  ``Config`` refuses repeated tasks and alphas equal to 6 significant digits."""
  out = []
  for task in cfg.tasks:
    if task == "amplitude":
      a0, a1 = cfg.amplitude_alphas
      out.append(Condition(f"amplitude_alpha{a0:g}_vs_{a1:g}", task, None))
    else:
      out.extend(Condition(f"{task}_alpha{a:g}", task, a) for a in cfg.alphas)
  return out


def num_spikes(cfg: Config, cond: Condition) -> int:
  """Teacher spikes of a condition: ``cfg.num_spikes`` for the spiked tasks, else 1."""
  return cfg.num_spikes if cond.task in SPIKED_TASKS else 1


def member_keys(cfg: Config, cond: Condition) -> jax.Array:
  """Spike ``j``'s seed ``i`` is member ``j·num_seeds + i``, with key ``fold_in(PRNGKey(seed), j·
  num_seeds + i)``: spike 0's seeds are the seeds of every other condition."""
  return loop.seed_keys(cfg.run.seed, num_spikes(cfg, cond) * cfg.run.num_seeds)


def member_data(cfg: Config, cond: Condition):
  """Each member's spike, ``{"u": (members, *shape)}``, for the spiked tasks; None otherwise.

  Spike ``j`` is the stream ``("spike", j)`` of ``--seed`` (not any seed's training key), drawn
  for the condition's alpha; spike ``j`` at every alpha colours the same white draw, so conditions
  can be compared spike by spike."""
  if cond.task not in SPIKED_TASKS:
    return None
  kind = cond.task.removeprefix("spiked_")
  keys = [rng.key(cfg.run.seed, "spike", j) for j in range(cfg.num_spikes)]
  spikes = jnp.stack([fourier.make_spike(k, cfg.shape, cond.alpha, kind) for k in keys])
  return {"u": jnp.repeat(spikes, cfg.run.num_seeds, axis=0)}


def make_sampler(cfg: Config, cond: Condition):
  """``sample(key, n, member) -> (x, y)`` for one condition; ``member`` is the member's data (its
  spike ``member["u"]`` for the spiked tasks, None otherwise)."""
  if cond.task == "amplitude":
    a0, a1 = cfg.amplitude_alphas
    task = functools.partial(fourier.sample_amplitude_task, shape=cfg.shape, alpha0=a0, alpha1=a1)
    return lambda key, n, member: task(key, n)
  phase = functools.partial(fourier.sample_phase_task, shape=cfg.shape, alpha=cond.alpha)
  if cond.task == "linear_process":
    return lambda key, n, member: phase(key, n, signal="linear_process", noise=cfg.noise)
  return lambda key, n, member: phase(
    key, n, signal="spiked_cumulant", strength=cfg.beta, u=member["u"]
  )


def make_problem(cfg: Config, cond: Condition) -> loop.Problem:
  """Logistic loss on a fresh batch per step; evaluation on clean, phase-scrambled and whitened test
  sets. The spiked tasks' functions take the member's spike as a third argument."""
  model = TwoLayer(cfg.width, cfg.activation)
  sample = make_sampler(cfg, cond)
  ndim = len(cfg.shape)

  def loss(params, key, member=None):
    x, y = sample(key, cfg.batch_size, member)
    return jnp.mean(optax.sigmoid_binary_cross_entropy(model.apply(params, x), y)), {}

  def evaluate(params, key, member=None):
    k_data, k_scramble = jax.random.split(key)
    x, y = sample(k_data, cfg.eval_samples, member)
    acc = lambda inputs: jnp.mean((model.apply(params, inputs) > 0) == (y == 1))
    return {
      "test_loss": jnp.mean(optax.sigmoid_binary_cross_entropy(model.apply(params, x), y)),
      "test_acc": acc(x),
      "scrambled_acc": acc(fourier.phase_scramble(k_scramble, x, ndim=ndim)),
      "whitened_acc": acc(fourier.whiten_amplitudes(x, ndim=ndim)),
    }

  return loop.Problem(lambda key: model.init(key, jnp.zeros((1, *cfg.shape))), loss, evaluate)


def summarize_condition(cfg: Config, cond: Condition, history: list[dict]) -> dict:
  """The condition's numbers over all its members, and, for the spiked tasks, per spike with their
  spread over spikes. ``samples_to_target``: samples (steps × batch) at the first logged step where
  the members' mean test accuracy reaches the target."""

  def samples_to_target(members=slice(None)) -> int | None:
    step = metrics.first_step(history, "test_acc", cfg.target_accuracy, members)
    return None if step is None else step * cfg.batch_size

  last = history[-1]
  final = np.asarray(last["test_acc"])
  out = {
    "task": cond.task,
    "alpha": cond.alpha,
    "num_spikes": num_spikes(cfg, cond),
    "samples_to_target": samples_to_target(),
    "final_test_acc_mean": final.mean(),
    "final_test_acc_sd": final.std(),
    "final_scrambled_acc_mean": np.mean(last["scrambled_acc"]),
    "final_whitened_acc_mean": np.mean(last["whitened_acc"]),
    "steps": last["step"],
    "samples": last["step"] * cfg.batch_size,
  }
  if cond.task in SPIKED_TASKS:
    k = cfg.run.num_seeds
    per_spike = [slice(j * k, (j + 1) * k) for j in range(cfg.num_spikes)]
    acc = np.array([final[m].mean() for m in per_spike])
    reached = [samples_to_target(m) for m in per_spike]
    out["per_spike"] = {"final_test_acc_mean": acc, "samples_to_target": reached}
    out["spread_over_spikes"] = {f"final_test_acc_{k}": v for k, v in metrics.spread(acc).items()}
  return out


def spike_gains(conds: dict[str, dict]) -> dict:
  """For each spiked condition with alpha > 0 whose task also ran at alpha 0: the per-spike final
  accuracy minus that spike's at alpha 0 (paired by spike), and the per-spike ratio of samples to
  the target where both reached it."""
  out = {}
  for name, c in conds.items():
    base = [b for b in conds.values() if b["task"] == c["task"] and b["alpha"] == 0]
    if "per_spike" not in c or not c["alpha"] or not base:
      continue
    base, mine = base[0]["per_spike"], c["per_spike"]
    gain = mine["final_test_acc_mean"] - base["final_test_acc_mean"]
    pairs = zip(base["samples_to_target"], mine["samples_to_target"])
    out[name] = {
      "accuracy_gain_per_spike": gain,
      "accuracy_gain_min": gain.min(),
      "accuracy_gain_max": gain.max(),
      "speedup_to_target_per_spike": [None if b is None or not f else b / f for b, f in pairs],
    }
  return out


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Trains every condition (resuming any that were interrupted), then writes summary.json and
  figures."""
  histories, summary = {}, {"target_accuracy": cfg.target_accuracy, "conditions": {}}
  optimizer = optax.sgd(cfg.learning_rate)
  conds = conditions(cfg)
  ctx.plan(len(conds), "condition")
  summarize = lambda r: (
    f"loss {np.mean(r['train_loss']):.4f} | test acc {np.mean(r['test_acc']):.3f} "
    f"(scrambled {np.mean(r['scrambled_acc']):.3f}, whitened {np.mean(r['whitened_acc']):.3f})"
  )
  for cond in conds:
    result = ctx.train(
      cond.run,
      make_problem(cfg, cond),
      optimizer,
      summarize=summarize,
      keys=member_keys(cfg, cond),
      member_data=member_data(cfg, cond),
    )
    histories[cond.run] = result.history
    summary["conditions"][cond.run] = summarize_condition(cfg, cond, result.history)
  summary["spike_gains_vs_alpha0"] = spike_gains(summary["conditions"])
  return frame.Outputs(
    summary, figures=lambda folder: plot_all(cfg, histories, folder), captions=captions(cfg)
  )


def captions(cfg: Config) -> dict[str, str]:
  """One line per figure: what its curves and shaded bands are."""
  band = f"lines: the mean over {cfg.run.num_seeds} seeds; shaded bands: ±1 sd over seeds"
  return {
    "amplitude_vs_phase.png": "Test accuracy against training samples: the amplitude task and "
    f"each phase task at its best alpha; {band}; dotted: the target accuracy.",
    "phase_vs_alpha.png": "Test accuracy of each phase task against training samples, one line "
    f"per power-spectrum exponent alpha; {band}; dotted: the target accuracy.",
    "information_used.png": "Test accuracy on the clean test set, with phases scrambled "
    f"(amplitudes only) and with amplitudes whitened (phases only); {band}.",
  }


def report(summary: dict) -> list[str]:
  """What the command line prints: each condition's final accuracy and when it reached the
  target."""
  lines = []
  for name, c in summary["conditions"].items():
    reached = c["samples_to_target"]
    reached = f"{reached} samples" if reached is not None else f"not within {c['samples']} samples"
    lines.append(
      f"  {name:32s} final test acc {c['final_test_acc_mean']:.3f} ± {c['final_test_acc_sd']:.3f}; "
      f"{summary['target_accuracy']:g} reached: {reached}"
    )
    if c.get("num_spikes", 1) > 1:
      per = ", ".join(f"{a:.3f}" for a in c["per_spike"]["final_test_acc_mean"])
      lines.append(f"  {'':32s} per spike ({c['num_spikes']} spikes): {per}")
  for name, g in summary.get("spike_gains_vs_alpha0", {}).items():
    lines.append(
      f"  {name:32s} gain over alpha 0, spike by spike: {g['accuracy_gain_min']:+.3f} to "
      f"{g['accuracy_gain_max']:+.3f}"
    )
  return lines


def plot_all(cfg: Config, histories: dict[str, list[dict]], figures: str) -> list[str]:
  """Writes the study's figures into the folder ``figures``; returns their paths."""
  by_task = {t: [c for c in conditions(cfg) if c.task == t] for t in cfg.tasks}
  # Each task's condition shown alone: the amplitude task's one, a phase task's best alpha.
  final = lambda c: np.mean(histories[c.run][-1]["test_acc"])
  shown = {t: max(cs, key=final) for t, cs in by_task.items()}
  path = lambda name: os.path.join(figures, name)

  def curve(cond, label, key="test_acc"):  # against the training samples seen
    return plotting.history_curve(histories[cond.run], key, label, cfg.batch_size)

  accuracy = dict(ylabel="test accuracy", target=cfg.target_accuracy)
  name = lambda t, c: "amplitude task" if t == "amplitude" else f"{t} (alpha={c.alpha:g})"
  panel = [("amplitude vs. phase information", [curve(c, name(t, c)) for t, c in shown.items()])]
  written = [plotting.curves_figure(panel, path("amplitude_vs_phase.png"), **accuracy)]
  # Phase-task accuracy for each alpha: both regimes of the power-law effect side by side.
  panels = [
    (t, [curve(c, f"alpha={c.alpha:g}") for c in by_task[t]]) for t in PHASE_TASKS if t in by_task
  ]
  if panels:
    written.append(plotting.curves_figure(panels, path("phase_vs_alpha.png"), **accuracy))
  # Which information the network uses: clean vs phase-scrambled vs amplitude-whitened test sets.
  info = [
    (c.run, [curve(c, label, key) for key, label in TEST_SETS.items()]) for c in shown.values()
  ]
  written.append(plotting.curves_figure(info, path("information_used.png"), ylabel="test accuracy"))
  return written


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
