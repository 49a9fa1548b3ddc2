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

import jax
import numpy as np

from mechjax import config
from mechjax import plotting
from mechjax import rng
from mechjax import sharding
from mechjax import slt
from mechjax.data import tokens as tokens_lib
from mechjax.models import pretrained
from mechjax.slt import restriction as restriction_lib
from mechjax.slt.settings import SGLDSettings
from mechjax.studies import frame

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
  components: str = config.setting(
    "",
    "Weight restrictions sampled besides the whole model, comma-separated: l0h1 (a head), l0g0 (a "
    "key/value group), 'l2 attn', 'l2 mlp', embed, unembed, all, and unions joined by +. Empty: "
    "every head and every MLP.",
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
    super().validate()


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Loads the checkpoint and the corpus, samples every component's posterior in one program, and
  writes the summary, the susceptibilities and the figure."""
  model, params = pretrained.load(cfg.model)
  if cfg.seq_len > model.arch.max_positions:
    raise config.ConfigError(
      ["seq_len"],
      f"must be at most {model.arch.max_positions}, the model's position limit "
      "(max_position_embeddings)",
    )
  ids = tokens_lib.read_tokens(cfg.corpus)
  windows = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.num_windows, cfg.seed, "sgld-windows")
  probes = tokens_lib.sample_windows(ids, cfg.seq_len, cfg.num_probes, cfg.seed, "probe-windows")
  pretrained.check_tokens(model.arch, windows)
  components = restrictions(cfg.components, model, params)
  ctx.log(f"{len(components)} components: sampling {cfg.sgld.num_chains} chains of each")
  total = sum(np.size(x) for x in jax.tree.leaves(params))
  for name, r in components.items():
    sampled = total if r is None else count(r)
    ctx.log(f"  {name}: {sampled:,} weights ({100 * sampled / total:.3g}% of {total:,})")

  def compute():
    result = slt.estimate_susceptibilities(
      # Jitted: the losses at w* outside the sampler's program are then one program each.
      jax.jit(functools.partial(pretrained.next_token_losses, model)),
      params,
      windows,
      probes,
      key=rng.key(cfg.seed, "pretrained-llc"),
      components=components,
      eval_size=cfg.eval_size,
      settings=cfg.sgld,
      mesh=sharding.devices_mesh(cfg.model_axis, cfg.sgld.num_chains),
    )
    return {
      "chi": result.chi[:, 0],
      "standard_error": result.standard_error[:, 0],
      "rhat": result.chi_rhat[:, 0],
      "ess": result.chi_ess[:, 0],
      "llc": result.llc,
      "nbeta": result.nbeta,
      "probes": probes,
    }

  sus = ctx.stage("susceptibilities", compute, fmt="npz")
  names = list(components)
  chi, se = sus["chi"], sus["standard_error"]
  summary = {
    "model": {
      "family": model.arch.family,
      "layers": model.arch.num_layers,
      "d_model": model.arch.d_model,
      "parameters": sum(np.size(x) for x in jax.tree.leaves(params)),
    },
    "nbeta": sus["nbeta"],
    "probe_tokens": chi.shape[1],
    "components": {
      name: {
        "llc": sus["llc"][c],
        "chi_mean": np.mean(chi[c]),
        "chi_abs_mean": np.mean(np.abs(chi[c])),
        "chi_se_mean": np.mean(se[c]),
        # Tokens whose χ is more than two standard errors from zero: what the chains resolve.
        "resolved_fraction": np.mean(np.abs(chi[c]) > 2 * se[c]),
        "mixing": slt.mixing.worst(sus["rhat"][c], sus["ess"][c], cfg.sgld.num_chains),
      }
      for c, name in enumerate(names)
    },
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [plot(names, chi, f"{folder}/susceptibilities.png")],
    files={"components.json": names},
    captions={
      "susceptibilities.png": "The susceptibility χ of every probe token (columns, window by "
      "window) for each component (rows; 'all' frees every weight): red where the token's loss "
      "moves against the component's loss change in the posterior, blue where with it. Each "
      "component's LLC is in the results above."
    },
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


def count(component) -> int:
  """The weights a component samples: a restriction's, or a mask's non-zero entries."""
  if isinstance(component, restriction_lib.Restriction):
    return component.num_sampled
  return int(sum(np.count_nonzero(m) for m in jax.tree.leaves(component)))


def report(summary: dict) -> list[str]:
  """The model, nβ, and per component its LLC and how many probe tokens the chains resolve."""
  m = summary["model"]
  lines = [
    f"  {m['family']}: {m['layers']} layers, d_model {m['d_model']}, {m['parameters']:,} "
    f"parameters; nβ = {summary['nbeta']:.1f}, {summary['probe_tokens']} probe tokens"
  ]
  for name, c in summary["components"].items():
    if c["mixing"]["rhat_max"] is None:  # one chain: no spread over chains to judge by
      spread = "one chain: no standard error, R̂ or ESS"
    else:
      spread = (
        f"|χ| > 2 s.e. for {100 * c['resolved_fraction']:.0f}% of tokens | R̂ ≤ "
        f"{c['mixing']['rhat_max']:.3f}, {100 * c['mixing']['share_failing']:.0f}% of tokens fail "
        "R̂ or ESS"
      )
    lines.append(f"  {name:<16} LLC {c['llc']:8.2f} | mean χ {c['chi_mean']:+.3g} | {spread}")
  return lines


def plot(names: list[str], chi: np.ndarray, path: str) -> str:
  fig, ax = plotting.plt.subplots(
    figsize=(min(16, 4 + 0.08 * chi.shape[1]), 1.2 + 0.25 * len(names))
  )
  vmax = float(np.max(np.abs(chi))) or 1.0
  im = ax.imshow(chi, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
  ax.set_yticks(range(len(names)), names, fontsize=7)
  ax.set_xlabel("probe token (windows in order)")
  ax.set_title("per-token susceptibility χ of each component", fontsize=10)
  fig.colorbar(im, ax=ax, fraction=0.03)
  return plotting.save(fig, path)


STUDY = frame.Study(NAME, Config, science, report, required=REQUIRED)
run = STUDY.run
