"""Language models trained here, on real text, and written as Hugging Face checkpoints.

Several seeds of a small GPT-NeoX (Pythia's architecture) or Llama model train in one vmapped
program on the Wikipedia corpus (:mod:`mechjax.data.language`; made in the workdir unless
``--corpus`` names one), with AdamW, a linear warm-up and a cosine decay. The batch of step ``t``
is ``seq_len + 1`` consecutive tokens at start positions drawn from the step's key, so it is a
function of ``(seed, t)`` alone and a resumed run is the run that never stopped.

At log-spaced steps (and at step 0) each seed's params are exported with
:func:`mechjax.models.pretrained.export_hf` to ``hf/seed<i>/step<t>/``, beside the corpus's
``tokenizer.json``: folders that transformers, :func:`mechjax.models.pretrained.load` and
``experiments.llc_over_training`` read, named as Pythia's revisions are.

    python -m experiments.train_lm                       # 2 seeds; the plan says how long
    python -m experiments.train_lm --arch=llama --num_seeds=3

The report gives what was trained on what, and each seed's held-out loss (nats per token on
articles the tokenizer and the training never saw), against the unigram entropy of the training
split, the loss of a model that ignores the context.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mechjax import config
from mechjax.data import language
from mechjax.data import tokens as tokens_lib
from mechjax.models import pretrained
from mechjax.models.pretrained import Arch
from mechjax.studies import frame
from mechjax.train import loop

NAME = "train_lm"
ARCHES = ("gpt_neox", "llama")
# A training split held on the device above this many tokens would be a constant of the compiled
# program too large to compile quickly; such a corpus needs a host-streamed loader.
MAX_DEVICE_TOKENS = 1 << 25


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(
    config.RunSettings(steps=2_000, num_seeds=2, log_every=100, checkpoint_every=500)
  )
  corpus: str = config.setting(
    "",
    "A folder made by mechjax.data.language.make_corpus; empty: make the Wikipedia corpus in "
    "<workdir>/corpus.",
  )
  arch: str = config.setting(
    "gpt_neox", "Architecture: gpt_neox (Pythia's) or llama.", check=config.one_of(ARCHES)
  )
  d_model: int = config.setting(128, "Residual stream width.", check=config.at_least(8))
  num_layers: int = config.setting(2, "Transformer blocks.", check=config.at_least(1))
  num_heads: int = config.setting(4, "Attention heads per block.", check=config.at_least(1))
  seq_len: int = config.setting(128, "Tokens per training window.", check=config.at_least(4))
  batch_size: int = config.setting(32, "Windows per step.", check=config.at_least(1))
  learning_rate: float = config.setting(3e-3, "Peak AdamW learning rate.", check=config.positive)
  warmup_steps: int = config.setting(
    200, "Steps of linear warm-up from 0 to the peak.", check=config.at_least(0)
  )
  weight_decay: float = config.setting(
    0.1, "AdamW weight decay (not on norms, biases or embeddings).", check=config.non_negative
  )
  num_exports: int = config.setting(
    16,
    "Log-spaced steps (besides step 0) at which each seed is written as a Hugging Face folder.",
    check=config.at_least(1),
  )
  eval_windows: int = config.setting(
    32, "Held-out windows for the held-out loss logged during training.", check=config.at_least(1)
  )

  def validate(self) -> None:
    if self.d_model % self.num_heads:
      raise config.ConfigError(
        ("d_model", "num_heads"),
        f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}",
      )
    if self.warmup_steps >= self.run.steps:
      raise config.ConfigError(
        ("warmup_steps", "steps"),
        f"warmup_steps={self.warmup_steps} must be fewer than steps={self.run.steps}",
      )


def make_arch(cfg: Config, vocab_size: int) -> Arch:
  """The model of ``cfg``: GPT-NeoX as Pythia has it (LayerNorm, GELU, a quarter of each head
  rotary, the parallel residual, biases, an untied head), or Llama (RMSNorm, SwiGLU, whole-head
  rotary, no biases, an untied head)."""
  head_dim = cfg.d_model // cfg.num_heads
  llama = cfg.arch == "llama"
  return Arch(
    family=cfg.arch,
    vocab_size=vocab_size,
    d_model=cfg.d_model,
    num_layers=cfg.num_layers,
    num_heads=cfg.num_heads,
    num_kv_heads=cfg.num_heads,
    head_dim=head_dim,
    d_mlp=16 * math.ceil(8 * cfg.d_model / 3 / 16) if llama else 4 * cfg.d_model,
    max_positions=cfg.seq_len,
    norm="rmsnorm" if llama else "layernorm",
    norm_eps=1e-5,
    activation="silu" if llama else "gelu",
    gated_mlp=llama,
    learned_positions=False,
    rotary_dim=head_dim if llama else head_dim // 4,
    rope_theta=10000.0,
    parallel_residual=not llama,
    qkv_bias=not llama,
    out_bias=not llama,
    mlp_bias=not llama,
    tied_embeddings=False,
  )


def init_params(model: pretrained.DecoderLM, key: jax.Array, std: float = 0.02) -> dict:
  """GPT-2's initialisation (Radford et al. 2019): every kernel and embedding normal with sd
  ``std``, the projections back into the residual stream (attention ``out``, MLP ``down``) with sd
  ``std / sqrt(2 · num_layers)``, biases zero and norm scales one."""
  shapes = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))["params"]
  leaves, tree = jax.tree_util.tree_flatten_with_path(shapes)
  keys = jax.random.split(key, len(leaves))
  deep = std / math.sqrt(2 * model.arch.num_layers)
  out = []
  for (path, leaf), k in zip(leaves, keys):
    names = [str(getattr(p, "key", p)) for p in path]
    if names[-1] == "scale":
      out.append(jnp.ones_like(leaf))
    elif names[-1] == "bias":
      out.append(jnp.zeros_like(leaf))
    else:
      sd = deep if names[-2] in ("out", "down") else std
      out.append(sd * jax.random.normal(k, leaf.shape, leaf.dtype))
  return jax.tree_util.tree_unflatten(tree, out)


def windows_at(ids_N: jax.Array, starts_B: jax.Array, length: int) -> jax.Array:
  """``(B, length)`` int32: the ``length`` tokens from each start."""
  take = lambda s: jax.lax.dynamic_slice_in_dim(ids_N, s, length)  # noqa: E731
  return jax.vmap(take)(starts_B).astype(jnp.int32)


def make_problem(
  cfg: Config, model: pretrained.DecoderLM, train_ids: np.ndarray, eval_B: np.ndarray
) -> loop.Problem:
  """Next-token cross-entropy on ``batch_size`` windows of ``seq_len + 1`` tokens drawn from the
  step's key; the held-out loss on the fixed windows ``eval_B`` at every logged step."""
  ids = jnp.asarray(train_ids)  # uint16 or uint32 ids, on the device
  last_start = len(train_ids) - (cfg.seq_len + 1)

  def loss(params, key):
    starts = jax.random.randint(key, (cfg.batch_size,), 0, last_start + 1)
    w = windows_at(ids, starts, cfg.seq_len + 1)
    return jnp.mean(pretrained.next_token_losses(model, params, w)), {}

  def evaluate(params, key):
    del key  # the held-out windows are fixed
    return {"heldout_loss": jnp.mean(pretrained.next_token_losses(model, params, eval_B))}

  return loop.Problem(lambda key: init_params(model, key), loss, evaluate)


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
  """AdamW (β = 0.9, 0.95) after clipping the global gradient norm at 1, with a linear warm-up
  (from ``learning_rate / warmup_steps`` at the first step) to ``learning_rate`` and a cosine decay
  to a tenth of it at the last step; no weight decay on norms, biases and embeddings."""
  # The first update (count 0) already moves: lr / warmup_steps, rising to lr at warmup_steps.
  start = cfg.learning_rate / max(1, cfg.warmup_steps)
  schedule = optax.warmup_cosine_decay_schedule(
    start, cfg.learning_rate, cfg.warmup_steps, cfg.run.steps, cfg.learning_rate / 10
  )

  def decayed(params):
    return jax.tree_util.tree_map_with_path(
      lambda path, _: str(getattr(path[-1], "key", "")) == "kernel", params
    )

  return optax.chain(
    optax.clip_by_global_norm(1.0),
    optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=cfg.weight_decay, mask=decayed),
  )


def export_steps(cfg: Config) -> list[int]:
  """``num_exports`` steps spaced evenly in log between 1 and ``steps`` (rounded, deduplicated;
  the last is ``steps``)."""
  grid = np.geomspace(1, cfg.run.steps, cfg.num_exports)
  return sorted({int(round(s)) for s in grid} | {cfg.run.steps})


def seed_dir(workdir: str, seed: int) -> str:
  return os.path.join(workdir, "hf", f"seed{seed}")


def exporter(model, corpus: language.Corpus, workdir: str):
  """``on_save(step, state)`` for :func:`mechjax.train.loop.train`: every seed's params at
  ``step`` to ``hf/seed<i>/step<step>/``, written to a ``.partial`` folder and renamed, so an
  interrupted export is redone and a finished one is not."""

  def export(step: int, params_S) -> None:
    for i in range(jax.tree.leaves(params_S)[0].shape[0]):
      folder = os.path.join(seed_dir(workdir, i), f"step{step}")
      if os.path.exists(folder):
        continue
      partial = folder + ".partial"
      shutil.rmtree(partial, ignore_errors=True)
      params = jax.tree.map(lambda a: np.asarray(a[i]), params_S)
      pretrained.export_hf(partial, model, params, tokenizer=corpus.tokenizer)
      os.replace(partial, folder)

  return export


def corpus_of(cfg: Config, ctx: frame.Context) -> language.Corpus:
  """The corpus ``--corpus`` names, or the Wikipedia corpus made (once) in ``<workdir>/corpus``."""
  if cfg.corpus:
    return language.load_corpus(cfg.corpus)
  folder = ctx.path("corpus")
  if not os.path.exists(os.path.join(folder, language.MANIFEST)):
    ctx.log(f"making the Wikipedia corpus in {folder} (tokenizer, train and held-out token files)")
  with ctx.timed("corpus"):
    return language.make_corpus(folder)


def heldout_windows(ids: np.ndarray, length: int, num: int) -> np.ndarray:
  """``num`` of the held-out split's non-overlapping windows of ``length`` tokens, evenly spaced
  through it (all of them when there are fewer), ``(num, length)`` int32."""
  all_W = tokens_lib.disk_windows(ids, length)
  pick = np.unique(np.linspace(0, len(all_W) - 1, min(num, len(all_W))).round().astype(int))
  return np.asarray(all_W[pick], np.int32)


def unigram_entropy(ids: np.ndarray, vocab_size: int) -> float:
  """The entropy of the training split's token frequencies, in nats: the loss of the best model
  that ignores the context."""
  p = np.bincount(np.asarray(ids), minlength=vocab_size) / len(ids)
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())


def heldout_loss(model, params_S, windows_W: np.ndarray, batch: int = 32) -> np.ndarray:
  """Each seed's mean next-token loss over every window of ``windows_W``, ``(S,)``: batches of
  ``batch`` windows in one compiled program (the last one padded, its padding left out)."""
  per_window = jax.jit(
    jax.vmap(lambda p, w: pretrained.next_token_losses(model, p, w).mean(axis=-1), (0, None))
  )
  parts = []
  for start in range(0, len(windows_W), batch):
    w = windows_W[start : start + batch]
    real = len(w)
    w = np.concatenate([w, np.repeat(w[:1], batch - real, axis=0)]) if real < batch else w
    parts.append(np.asarray(per_window(params_S, w))[:, :real])
  return np.concatenate(parts, axis=1).mean(axis=1)


PROMPT = "The history of"


def continue_text(model, params_S, tok, prompt: str, num_tokens: int) -> list[str]:
  """Each seed's greedy continuation of ``prompt`` by up to ``num_tokens`` tokens, as far as the
  model's window allows (one compiled program of the full window: the causal mask makes the padding
  after the last token harmless)."""
  t = model.arch.max_positions
  ids = tok.encode(prompt, add_special_tokens=False).ids[: max(1, t // 2)]
  num_tokens = min(num_tokens, t - len(ids))
  step = jax.jit(jax.vmap(lambda p, w, n: jnp.argmax(model.apply({"params": p}, w)[0, n - 1])))
  seeds = jax.tree.leaves(params_S)[0].shape[0]
  out = [list(ids) for _ in range(seeds)]
  for _ in range(num_tokens):
    w = np.zeros((seeds, 1, t), np.int32)
    for i, o in enumerate(out):
      w[i, 0, : len(o)] = o
    n = np.array([len(o) for o in out])
    for i, nxt in enumerate(np.asarray(step(params_S, w, n))):
      out[i].append(int(nxt))
  return [tok.decode(o) for o in out]


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """Makes or reads the corpus, trains every seed in one program with exports at log-spaced steps,
  then measures each seed's held-out loss on the whole held-out split."""
  corpus = corpus_of(cfg, ctx)
  train_ids, held_ids = tokens_lib.read_tokens(corpus.train), tokens_lib.read_tokens(corpus.heldout)
  if len(train_ids) > MAX_DEVICE_TOKENS:
    raise frame.StudyStopped(
      f"the training split has {len(train_ids):,} tokens; train_lm holds it on the device and "
      f"takes at most {MAX_DEVICE_TOKENS:,}"
    )
  if len(held_ids) < cfg.seq_len + 1 or len(train_ids) < 2 * (cfg.seq_len + 1):
    raise frame.StudyStopped(f"the corpus is too short for windows of seq_len={cfg.seq_len} + 1")
  tok = tokens_lib.tokenizer(corpus.tokenizer)
  model = pretrained.DecoderLM(make_arch(cfg, tok.get_vocab_size()))
  problem = make_problem(
    cfg, model, np.asarray(train_ids), heldout_windows(held_ids, cfg.seq_len + 1, cfg.eval_windows)
  )
  keys = loop.seed_keys(cfg.run.seed, cfg.run.num_seeds)
  init = jax.jit(jax.vmap(lambda k: problem.init(jax.random.split(k, 3)[0])))(keys)
  facts = describe(cfg, model, init, corpus, len(train_ids))
  ctx.log(plan_line(cfg, facts))
  export = exporter(model, corpus, ctx.workdir)
  wanted = set(export_steps(cfg))
  export(0, init)  # the initialisation, as the first point of a developmental landscape
  result = ctx.train(
    "lm",
    problem,
    make_optimizer(cfg),
    checkpoint_steps=sorted(wanted),
    binary_chunks=True,
    on_save=lambda step, state: export(step, state["params"]) if step in wanted else None,
  )
  params_S = result.state["params"]
  final = ctx.stage(
    "heldout",
    lambda: {
      "loss": heldout_loss(model, params_S, heldout_windows(held_ids, cfg.seq_len + 1, 1 << 30)),
      "samples": continue_text(model, params_S, tok, PROMPT, 24),
    },
  )
  summary = {
    **facts,
    "heldout_loss": [float(x) for x in final["loss"]],
    "unigram_entropy": unigram_entropy(train_ids, tok.get_vocab_size()),
    "export_steps": [0, *sorted(wanted)],
    "exports": [seed_dir(ctx.workdir, i) for i in range(cfg.run.num_seeds)],
    "samples": {"prompt": PROMPT, "continuations": list(final["samples"])},
  }
  return frame.Outputs(
    summary,
    figures=lambda folder: [plot(summary, result.history, folder)],
    captions={
      "loss.png": "Next-token loss (nats per token) against training step, log scale: the "
      "training loss (chunk means) and the held-out loss on fixed held-out windows, one line per "
      "seed; dotted, the unigram entropy of the training split (a model that ignores context)."
    },
  )


def describe(cfg: Config, model, params_S, corpus: language.Corpus, train_tokens: int) -> dict:
  """What is trained, on what, and for how long (the summary's first keys)."""
  one = jax.tree.map(lambda a: a[0], params_S)
  a = model.arch
  return {
    "model": {
      "arch": cfg.arch,
      "parameters": int(sum(np.size(x) for x in jax.tree.leaves(one))),
      "d_model": a.d_model,
      "num_layers": a.num_layers,
      "num_heads": a.num_heads,
      "d_mlp": a.d_mlp,
      "vocab_size": a.vocab_size,
      "seq_len": cfg.seq_len,
    },
    "corpus": {
      "folder": corpus.directory,
      "source": corpus.manifest.get("source"),
      "licence": corpus.manifest.get("licence"),
      "train_tokens": train_tokens,
      "heldout_tokens": corpus.manifest["splits"]["heldout"]["tokens"],
    },
    "tokens_seen": cfg.run.steps * cfg.batch_size * cfg.seq_len,
    "passes": cfg.run.steps * cfg.batch_size * cfg.seq_len / train_tokens,
    "seeds": cfg.run.num_seeds,
  }


def plural(n: int, noun: str) -> str:
  return f"{n} {noun}" + ("" if n == 1 else "s")


def plan_line(cfg: Config, f: dict) -> str:
  m = f["model"]
  return (
    f"train_lm: {cfg.run.num_seeds} seeds of a {m['arch']} model ({m['parameters']:,} parameters: "
    f"d_model {m['d_model']}, {plural(m['num_layers'], 'layer')} of "
    f"{plural(m['num_heads'], 'head')}, vocabulary "
    f"{m['vocab_size']:,}) on {f['corpus']['train_tokens']:,} training tokens; {cfg.run.steps:,} "
    f"steps of {cfg.batch_size} × {cfg.seq_len} tokens ({f['passes']:.1f} passes); "
    f"{len(export_steps(cfg)) + 1} exports per seed"
  )


def plot(summary: dict, history: list[dict], folder: str) -> str:
  from mechjax import plotting

  fig, ax = plotting.plt.subplots(figsize=(7.5, 4.2))
  steps = np.array([r["step"] for r in history])
  train = np.array([r["train_loss"] for r in history], float)
  held = np.array([r["heldout_loss"] for r in history], float)
  for i in range(train.shape[1]):
    (line,) = ax.plot(steps, train[:, i], lw=1, alpha=0.6, label=f"seed {i}: training")
    ax.plot(steps, held[:, i], lw=1.8, color=line.get_color(), label=f"seed {i}: held out")
  ax.axhline(summary["unigram_entropy"], color="gray", ls=":", label="unigram entropy")
  ax.set_xscale("log")
  m = summary["model"]
  plotting.label_panel(
    ax,
    f"{m['arch']}, {m['parameters']:,} parameters, on Wikipedia",
    "loss (nats per token)",
    "step",
  )
  return plotting.save(fig, os.path.join(folder, "loss.png"))


def report(summary: dict) -> list[str]:
  """What was trained on what, each seed's held-out loss, and a greedy continuation per seed."""
  m, c = summary["model"], summary["corpus"]
  lines = [
    f"  model: {m['arch']}, {m['parameters']:,} parameters (d_model {m['d_model']}, "
    f"{plural(m['num_layers'], 'layer')}, {plural(m['num_heads'], 'head')}, vocabulary "
    f"{m['vocab_size']:,})",
    f"  corpus: {c['source']}; {c['train_tokens']:,} training and {c['heldout_tokens']:,} "
    f"held-out tokens; {summary['tokens_seen']:,} tokens seen ({summary['passes']:.1f} passes)",
    f"  unigram entropy of the training split: {summary['unigram_entropy']:.3f} nats per token",
  ]
  for i, loss in enumerate(summary["heldout_loss"]):
    lines.append(f"  seed {i}: held-out loss {loss:.3f} nats per token; {summary['exports'][i]}")
  samples = summary["samples"]
  for i, text in enumerate(samples["continuations"]):
    lines.append(f"  seed {i} continues {samples['prompt']!r}: {text!r}")
  return lines


STUDY = frame.Study(NAME, Config, science, report)
run = STUDY.run
