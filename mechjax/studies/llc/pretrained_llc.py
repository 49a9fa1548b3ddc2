"""The LLC and per-token susceptibilities of a pretrained language model, whole and per component.

One SGLD program (:func:`mechjax.slt.estimate_susceptibilities`) samples the localized, tempered
posterior at the checkpoint's weights ``w*`` once with every weight free (``"all"``) and once per
component with only that component's weights free: each attention head and each MLP
(:func:`mechjax.models.pretrained.component_boxes`, devinterp's "weight restrictions"), each chain
carrying only its component's weights (:class:`mechjax.slt.restriction.Restriction`). For each it
reports

* the (weight-refined) LLC ``λ̂_C = nβ·E_w[L(w) − L(w*)]`` (Lau et al. 2023, arXiv 2308.12108), on a
  fixed evaluation subset of the windows;
* the susceptibility of every probe token ``χ_C,i = −Cov(φ_C, ℓ_i − L)`` with ``φ_C = L(w) − L(w*)``
  (Baker et al. 2025, arXiv 2504.18274), from the same draws, with its standard error over chains.

The data are seeded windows of ``--seq_len`` tokens from a token file (:mod:`mechjax.data.tokens`),
``--num_windows`` for SGLD and ``--num_probes`` more whose tokens are the probes. Nothing is
downloaded: ``--model`` is a checkpoint directory on disk.

Outputs: ``summary.json``, ``susceptibilities.npz`` (``chi``, ``standard_error``, ``llc``, the probe
windows) and ``figures/susceptibilities.png``.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import numpy as np

from mechjax import config
from mechjax import rng
from mechjax import sharding
from mechjax import slt
from mechjax.data import tokens as tokens_lib
from mechjax.models import pretrained
from mechjax.slt import placement
from mechjax.slt import progress
from mechjax.slt import restriction as restriction_lib
from mechjax.slt.settings import SGLDSettings
from mechjax.studies import frame
from mechjax.studies.llc import pretrained_llc_report as report_lib

NAME = "pretrained_llc"
REQUIRED = {
  "model": "a Hugging Face checkpoint directory on disk (config.json and model.safetensors); get "
  "one once where the hub is reachable, e.g. huggingface-cli download EleutherAI/pythia-70m "
  "--local-dir pythia-70m",
  "corpus": 'a token file (python -c "from mechjax.data import tokens; '
  "tokens.corpus_from_text('texts/', 'pythia-70m', 'corpus.tokens')\")",
}


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  model: str = config.setting("", "The checkpoint directory (config.json and the weights).")
  corpus: str = config.setting("", "The token file (mechjax.data.tokens) the windows come from.")
  seq_len: int = config.setting(64, "Tokens per window.", check=config.at_least(2))
  num_windows: int = config.setting(
    1024, "Windows the posterior is tempered on (n).", check=config.at_least(2)
  )
  num_probes: int = config.setting(
    8, "Further windows whose next-token losses are the probes.", check=config.at_least(1)
  )
  seed: int = config.setting(0, "Seed of the windows and of the chains.", check=config.at_least(0))
  eval_size: int = config.setting(
    256, "Windows in the fixed evaluation subset that defines L.", check=config.at_least(1)
  )
  eval_every: int = config.setting(
    0,
    "Evaluate L and the probes on every k-th draw after burn-in (the chains still take every "
    "step); 0: the smallest k whose evaluation costs at most one gradient step, a forward pass "
    "counted as a third of a gradient: k = ceil((eval_size + num_probes) / (3 batch_size)), at "
    "most num_draws // 2 so that at least 2 draws are evaluated.",
    check=config.at_least(0),
  )
  components: str = config.setting(
    "",
    "Weight restrictions sampled besides the whole model, comma-separated: l0h1 (a head), l0g0 (a "
    "key/value group), 'l2 attn', 'l2 mlp', embed, unembed, all, and unions joined by +. Empty: "
    "every head and every MLP.",
  )
  allow_other_tokenizer: bool = config.setting(
    False,
    "Sample on a corpus whose recorded tokenizer differs from the checkpoint's tokenizer.json "
    "(refused otherwise: its ids would be other words).",
  )
  model_axis: int = config.setting(
    1, "Devices that split each parameter (the rest split the chains).", check=config.at_least(1)
  )
  sgld: SGLDSettings = config.group(
    SGLDSettings(
      step_size=1e-5,
      localization=100.0,
      batch_size=16,
      num_chains=4,
      num_draws=200,
      num_burnin=50,
    )
  )

  def validate(self):
    if self.sgld.num_draws < 2:
      raise config.ConfigError(
        ("sgld.num_draws",),
        "must be at least 2: χ is a covariance over the draws",
        self.sgld.num_draws,
      )
    if -(-self.sgld.num_draws // eval_stride(self)) < 2:
      raise config.ConfigError(
        ("sgld.num_draws", "eval_every"),
        f"evaluating every {eval_stride(self)}-th of {self.sgld.num_draws} draws leaves fewer "
        "than 2 per chain, and χ is a covariance over them: more draws or a smaller eval_every",
      )
    super().validate()


def eval_stride(cfg: Config) -> int:
  """Every how many draws L and the probes are evaluated: ``cfg.eval_every``, or when it is 0 the
  smallest k with ``(eval_size + num_probes) / k ≤ 3·batch_size`` windows (a forward pass costs
  about a third of a forward and backward pass). At the defaults: 6, one evaluation of 264 windows
  per 6 gradient steps of 16 windows each. The automatic ``k`` is at most ``num_draws // 2``, so a
  short run (2 draws) still evaluates 2 draws per chain, which χ, a covariance, needs."""
  if cfg.eval_every:
    return cfg.eval_every
  k = -(-(cfg.eval_size + cfg.num_probes) // (3 * cfg.sgld.batch_size))
  return max(1, min(k, cfg.sgld.num_draws // 2))


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Loads the checkpoint and the corpus, prints the plan, samples the components part by part
  (each part saved as it finishes), and writes the summary, the susceptibilities and the figure."""
  model, params = pretrained.load(cfg.model)
  if cfg.seq_len > model.arch.max_positions:
    raise config.ConfigError(
      ["seq_len"],
      f"must be at most {model.arch.max_positions}, the model's position limit "
      "(max_position_embeddings)",
    )
  ids = tokens_lib.read_tokens(cfg.corpus)
  tokens_lib.check_tokenizer(ids, cfg.model, allow_mismatch=cfg.allow_other_tokenizer)
  windows = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.num_windows, cfg.seed, "sgld-windows")
  probes = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.num_probes, cfg.seed, "probe-windows")
  pretrained.check_tokens(model.arch, windows)
  components = restrictions(cfg.components, model, params)
  sample = sampler(cfg, model, params, windows, probes)
  todo = parts(components)

  def compute():
    plan_run(cfg, ctx, params, components, todo, sample)
    return {**sample_parts(cfg, ctx, todo, sample), "probes": probes}

  sus = ctx.stage("susceptibilities", compute, fmt="npz")
  names = list(components)
  summary = summarise(cfg, model, params, components, sus)
  top = report_lib.top_tokens(sus["chi"], sus["probes"], tokens_lib.decoder(cfg.model))
  for name, entries in zip(names, top):
    summary["components"][name]["top_tokens"] = entries
  return frame.Outputs(
    summary,
    figures=lambda folder: [
      report_lib.llc_figure(summary, f"{folder}/llc.png"),
      report_lib.chi_figure(names, sus["chi"], top, f"{folder}/susceptibilities.png"),
    ],
    files={"components.json": names},
    captions={
      "llc.png": "Each restriction's LLC (bars) ± one standard error over chains (whiskers): the "
      "whole model and other restrictions on top; then one row per layer, its attention heads "
      "left and its MLP right. Red bars are below zero beyond two standard errors (see the "
      "verdict).",
      "susceptibilities.png": "The susceptibility χ of every probe token (columns, window by "
      "window) for each restriction (rows), each row divided by its own largest |χ| (printed at "
      "its right, with its three tokens of largest |χ|): red where the token's loss moves against "
      "the restriction's loss change in the posterior, blue where with it.",
    },
  )


def summarise(cfg: Config, model, params, components: dict, sus: dict) -> dict:
  """The summary: the model, nβ, L(w*) against the uniform loss, the sampling's size, and per
  restriction its LLC with its spread over chains, its χ's size and resolution, and mixing."""
  chi, se, per_chain = sus["chi"], sus["standard_error"], sus["llc_per_chain"]
  chains = cfg.sgld.num_chains
  total = sum(np.size(x) for x in jax.tree.leaves(params))
  return {
    "model": {
      "family": model.arch.family,
      "layers": model.arch.num_layers,
      "d_model": model.arch.d_model,
      "vocab_size": model.arch.vocab_size,
      "parameters": total,
    },
    "nbeta": sus["nbeta"],
    "loss_star": sus["loss_star"],
    "uniform_loss": report_lib.uniform_loss(model.arch.vocab_size),
    "eval_windows": cfg.eval_size,
    "probe_tokens": chi.shape[1],
    "chains": chains,
    "draws": cfg.sgld.num_draws,
    "evaluated_draws": -(-cfg.sgld.num_draws // eval_stride(cfg)),  # per chain
    "components": {
      name: {
        "llc": sus["llc"][c],
        # One standard error of the mean over chains; None with one chain.
        "llc_se": np.std(per_chain[c], ddof=1) / np.sqrt(chains) if chains > 1 else None,
        "llc_per_chain": per_chain[c],
        "weights": count(component, total),
        "chi_mean": np.mean(chi[c]),
        "chi_abs_mean": np.mean(np.abs(chi[c])),
        "chi_se_mean": np.mean(se[c]),
        # Tokens whose χ is more than two standard errors from zero: what the chains resolve.
        "resolved_fraction": np.mean(np.abs(chi[c]) > 2 * se[c]),
        "mixing": slt.mixing.worst(sus["rhat"][c], sus["ess"][c], chains),
      }
      for c, (name, component) in enumerate(components.items())
    },
  }


def sampler(cfg: Config, model, params, windows, probes):
  """The study's sampler: ``sample(components=..., analyze=False)`` runs (or, with ``analyze``,
  compiles and returns the memory analysis of) :func:`mechjax.slt.estimate_susceptibilities` on
  the given components, with the study's settings and ``--model_axis``'s mesh."""
  return functools.partial(
    slt.estimate_susceptibilities,
    # Jitted: the losses at w* outside the sampler's program are then one program each.
    jax.jit(functools.partial(pretrained.next_token_losses, model)),
    params,
    windows,
    probes,
    key=rng.key(cfg.seed, "pretrained-llc"),
    eval_size=cfg.eval_size,
    eval_every=eval_stride(cfg),
    eval_chunk=cfg.sgld.batch_size,
    settings=cfg.sgld,
    mesh=sharding.devices_mesh(cfg.model_axis, cfg.sgld.num_chains),
  )


def parts(components: dict) -> list[tuple[str, dict]]:
  """The components in the parts that are sampled one program each, in order: restrictions of one
  shape (the heads of a layer, say) together, and every other component alone. Each part is saved
  as it finishes (:func:`sample_parts`), so a rerun resumes after the last finished part."""
  groups: dict = {}
  for name, c in components.items():
    shape = c.sizes if isinstance(c, restriction_lib.Restriction) else ("alone", name)
    groups.setdefault(shape, {})[name] = c
  out = []
  for group in groups.values():
    names = list(group)
    out.append((names[0] if len(names) == 1 else f"{names[0]} … {names[-1]}", group))
  return out


def plan_run(cfg: Config, ctx: frame.Context, params, components: dict, todo: list, sample) -> None:
  """Logs the plan before the first chain step: the parameters, every restriction's weights, the
  chains and draws, the parts, and the per-device memory of the compiled program (its memory
  analysis) of the largest part still to sample, which its sampling then reuses; stops in one line
  when that does not fit the device. A rerun compiles no program for the parts it loads."""
  total = sum(np.size(x) for x in jax.tree.leaves(params))
  s, k = cfg.sgld, eval_stride(cfg)
  ctx.log(
    f"plan: {total:,} parameters; {len(components)} restrictions in {len(todo)} parts; "
    f"{s.num_chains} chains × ({s.num_burnin} burn-in + {s.num_draws} draws) each, L and the "
    f"probes evaluated {'on every draw' if k == 1 else f'every {k} draws'} "
    f"({-(-s.num_draws // k)} per chain)"
  )
  for i, (label, group) in enumerate(todo):
    sizes = [count(r, total) for r in group.values()]
    each = f"{len(sizes)} × {sizes[0]:,}" if len(set(sizes)) == 1 else " + ".join(map(str, sizes))
    share = 100 * sizes[0] / total
    ctx.log(f"  part {i + 1}: {label}, {each} weights ({share:.3g}% of the model each)")
  waiting = [part for i, part in enumerate(todo) if not ctx.saved(part_name(i), "npz")]
  if not waiting:
    ctx.log("  every part is sampled already: nothing to compile")
    return
  largest = largest_part(waiting, total)
  memory = sample(components=largest[1], analyze=True)
  # On one CPU device the chains run as thread groups, each a program with its own temporaries.
  groups = 1
  if cfg.model_axis == 1:
    groups = placement.cpu_thread_groups(s.num_chains, size=placement.float_size(params))
  temporaries = groups * (memory.output_size_in_bytes + memory.temp_size_in_bytes)
  need, have = memory.argument_size_in_bytes + temporaries, device_memory()
  ctx.log(
    f"  memory per device: {need / 2**30:.2f} GiB for the largest part to sample ({largest[0]}: "
    f"arguments {memory.argument_size_in_bytes / 2**30:.2f}, temporaries "
    f"{temporaries / 2**30:.2f} in {groups} program{'s' * (groups > 1)} at once) of "
    f"{have / 2**30:.1f} GiB, from the compiled program's memory analysis"
  )
  if need > have:
    raise config.ConfigError(
      ["sgld.num_chains", "sgld.batch_size", "components", "model_axis"],
      f"the plan needs {need / 2**30:.1f} GiB per device for part {largest[0]} and the device "
      f"has {have / 2**30:.1f} GiB: use fewer chains, a smaller batch_size or a microbatch_size, "
      "fewer restrictions (--components), or a model axis over more devices (--model_axis)",
    )


def part_name(index: int) -> str:
  """The stage name of part ``index`` (from 0) of :func:`parts`: ``part-NN.npz`` in the run
  folder."""
  return f"part-{index:02d}"


def largest_part(todo: list, total: int) -> tuple[str, dict]:
  """The part of :func:`parts` whose restrictions hold the most weights (the plan's memory is
  its program's)."""
  return max(todo, key=lambda part: max(count(r, total) for r in part[1].values()))


def device_memory() -> int:
  """Bytes of the first device's memory: its allocator's limit on an accelerator, the machine's
  physical memory on a CPU."""
  device = jax.devices()[0]
  stats = device.memory_stats() if device.platform != "cpu" else None
  if stats and "bytes_limit" in stats:
    return int(stats["bytes_limit"])
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def sample_parts(cfg: Config, ctx: frame.Context, todo: list, sample) -> dict:
  """Samples every part of :func:`parts` as a stage of its own (``part-NN.npz``), with one
  progress line at a time; a part saved by an earlier run is loaded, not sampled again. Returns
  the parts' results joined in the components' order."""
  steps = cfg.sgld.num_chains * cfg.sgld.num_steps
  meter = progress.Meter(steps * sum(len(group) for _, group in todo), ctx.log)
  hint = _LaptopHint(meter, ctx)
  results = []
  with progress.listening(hint):
    for i, (label, group) in enumerate(todo):
      name = part_name(i)
      if ctx.saved(name, "npz"):
        meter.skip(steps * len(group))
      meter.start(f"part {i + 1}/{len(todo)} ({label})")

      def compute(group=group):
        result = sample(components=group)
        return {
          "llc_per_chain": result.llc_per_chain,
          "loss_star": np.full(len(group), result.loss_star),
          "chi": result.chi[:, 0],
          "standard_error": result.standard_error[:, 0],
          "rhat": result.chi_rhat[:, 0],
          "ess": result.chi_ess[:, 0],
          "llc": result.llc,
          "nbeta": np.full(len(group), result.nbeta),
        }

      results.append(ctx.stage(name, compute, fmt="npz"))
      meter.end()
  joined = {key: np.concatenate([r[key] for r in results]) for key in results[0]}
  joined["nbeta"] = float(joined["nbeta"][0])
  joined["loss_star"] = float(joined["loss_star"][0])
  return joined


class _LaptopHint:
  """Passes the chains' reports to the meter, and once the rate is known on a CPU with an ETA over
  an hour, logs that the run is sized for an accelerator and where the laptop command is."""

  def __init__(self, meter: progress.Meter, ctx: frame.Context):
    self.meter, self.ctx, self.given = meter, ctx, False

  def __call__(self, steps: int) -> None:
    printed = self.meter.printed
    self.meter(steps)
    rate = self.meter.rate
    if self.given or self.meter.printed == printed or jax.default_backend() != "cpu":
      return
    self.given = True
    left = (self.meter.total - self.meter.done) / rate
    if left > 3600:
      self.ctx.log(
        f"  at this rate the run takes {progress.duration(left)} more: these settings are sized "
        "for an accelerator; docs/pretrained.md gives a command that runs on a laptop CPU"
      )


def restrictions(spec: str, model, params) -> dict:
  """``{name: restriction}`` to sample: the whole model (``"all"``, None) and then ``spec``'s
  restrictions (:func:`mechjax.models.pretrained.restriction_boxes`), or every head and MLP when it
  is empty. A union that is not one box per weight is sampled as a mask, full-size."""
  try:
    named = pretrained.restriction_boxes(model, spec) if spec else None
  except ValueError as e:
    raise config.ConfigError(["components"], str(e)) from None
  if named is None:
    named = {c: [b] for c, b in pretrained.component_boxes(model).items()}
  out: dict = {"all": None}
  for name, boxes in named.items():
    if boxes is None:
      out["all" if name == "all" else name] = None
      continue
    try:
      out[name] = restriction_lib.from_boxes(params, *boxes)
    except restriction_lib.NotABox:
      masks = [restriction_lib.from_boxes(params, b).mask(params) for b in boxes]
      out[name] = jax.tree.map(lambda *m: np.maximum.reduce(m), *masks)
  return out


def count(component, total: int = 0) -> int:
  """The weights a component samples: a restriction's, a mask's non-zero entries, or ``total``
  for None (the whole model)."""
  if component is None:
    return total
  if isinstance(component, restriction_lib.Restriction):
    return component.num_sampled
  return int(sum(np.count_nonzero(m) for m in jax.tree.leaves(component)))


report = report_lib.report
STUDY = frame.Study(NAME, Config, science, report, required=REQUIRED, verdict=report_lib.verdict)
run = STUDY.run
