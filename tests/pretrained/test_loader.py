"""mechjax.models.pretrained against transformers, without torch: the tiny checkpoints in
``checkpoints/`` and what transformers computed on them (``make_checkpoints.py``)."""

import importlib.util
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.models import pretrained
from mechjax.models.pretrained import families
from tests.helpers import expect_unmixed
from tests.pretrained import grid

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints")
NAMES = ("gpt2", "gpt_neox", "gpt_neox_sequential", "llama_gqa", "qwen2")


def expected(name):
  with np.load(os.path.join(HERE, name, "expected.npz")) as f:
    return dict(f)


def compared_sites(want):
  """transformers' residual sites in an ``expected.npz``, by mechjax's site names."""
  compared = {"resid_pre_0": want["resid_pre_0"], "final_norm": want["final_norm"]}
  compared.update({k[5:]: v for k, v in want.items() if k.startswith("site/")})
  return compared


def max_abs(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


@pytest.mark.parametrize(
  "name", [n if n == "gpt_neox" else pytest.param(n, marks=pytest.mark.slow) for n in NAMES]
)
def test_logits_sites_and_loss_gradients_match_transformers(name):
  model, params = pretrained.load(os.path.join(HERE, name))
  want = expected(name)
  tokens = jnp.asarray(want["tokens"])

  loss_fn, _ = pretrained.lm_losses(model)  # the loss the SLT calls sample with

  def loss(p):
    return loss_fn(p, tokens), model.apply({"params": p}, tokens, return_sites=True)

  (value, (logits, sites)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  assert logits.shape == want["logits"].shape
  assert max_abs(logits, want["logits"]) <= 1e-4
  # The tolerance would catch a wrong model: the logits are far from uniform.
  assert float(np.std(want["logits"])) > 0.1
  compared = compared_sites(want)
  for site, value_ in compared.items():
    assert max_abs(sites[site], value_) <= 1e-4, site
  # Every site the model names was checked, bar resid_pre_l (= resid_post_{l-1}) and resid_mid_l.
  derived = {s for s in sites if s.startswith(("resid_pre_", "resid_mid_"))}
  assert set(sites) - derived <= set(compared) and "final_norm" in sites
  for l in range(1, model.arch.num_layers):
    np.testing.assert_array_equal(sites[f"resid_pre_{l}"], sites[f"resid_post_{l - 1}"])
  if not model.arch.parallel_residual:
    mid = want["resid_pre_0"] + want["site/attn_out_0"]
    assert max_abs(sites["resid_mid_0"], mid) <= 1e-4

  assert abs(float(value) - float(want["loss"])) <= 1e-5
  # Map transformers' gradients through the same conversion as the weights (a linear
  # re-indexing), with zeros for the weights whose gradients were not kept.
  hf = {k[5:]: v for k, v in want.items() if k.startswith("grad/")}
  tensors = pretrained.read_weights(os.path.join(HERE, name))
  source = {k: hf.get(k, np.zeros(v.shape, np.float32)) for k, v in tensors.items()}
  prefix = families.prefix(model.arch)
  get = lambda key, shape: np.asarray(
    source.get(prefix + key, source.get(key)),
    np.float32,
  ).reshape(shape)
  mapped = pretrained.params_from_hf(model.arch, get, lambda k: k in source)
  checked = 0
  for (path, g), m in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(mapped)):
    if not np.any(m):
      continue
    rel = np.linalg.norm(np.asarray(g) - m) / np.linalg.norm(m)
    assert rel <= 1e-4, (jax.tree_util.keystr(path), rel)
    checked += 1
  assert checked >= len(hf)


def program_shapes(jaxpr):
  """The shape of every value a jaxpr computes, inside its loops and custom rules too."""
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
  for eqn in jaxpr.eqns:
    yield from (tuple(v.aval.shape) for v in eqn.outvars)
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else [param]:
        if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
          yield from program_shapes(sub)


@pytest.mark.slow
def test_the_chunked_head_is_logsumexp_and_its_gradient_without_the_logits(monkeypatch):
  # 7 chunks of 16 columns for a vocabulary of 100: the last chunk is padded.
  monkeypatch.setattr(pretrained.model, "VOCAB_CHUNK", 16)
  rng = np.random.default_rng(0)
  n, d, v = 12, 8, 100
  x = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(d, v)), jnp.float32)
  bias = jnp.asarray(rng.normal(size=(v,)), jnp.float32)
  weights = jnp.asarray(rng.normal(size=(n,)), jnp.float32)  # a non-uniform cotangent

  def chunked(x, kernel, bias):
    return jnp.sum(weights * pretrained.logsumexp_head(x, kernel, bias))

  def direct(x, kernel, bias):
    return jnp.sum(weights * jax.nn.logsumexp(x @ kernel + bias[None], axis=-1))

  got, want = (
    jax.jit(jax.value_and_grad(f, (0, 1, 2)))(x, kernel, bias) for f in (chunked, direct)
  )
  assert abs(float(got[0]) - float(want[0])) <= 1e-5 * abs(float(want[0]))
  for g, w in zip(got[1], want[1]):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  # Without a bias, and vmapped over windows (as the per-sample losses at w* are computed).
  lse = jax.jit(jax.vmap(lambda xs: pretrained.logsumexp_head(xs, kernel)))(x.reshape(3, 4, d))
  np.testing.assert_allclose(lse.reshape(n), jax.nn.logsumexp(x @ kernel, axis=-1), rtol=1e-6)
  # No array of the gradient's program holds a row of the vocabulary for every token.
  shapes = set(program_shapes(jax.make_jaxpr(jax.grad(chunked, (0, 1, 2)))(x, kernel, bias)))
  assert (n, 16) in shapes and not {(n, v), (n, 112), (v, n)} & shapes, sorted(shapes)
  # Nor a padded, chunked or transposed copy of the unembedding (vocabulary-sized temporaries).
  assert not {(d, 112), (7, d, 16), (d, 7, 16), (7, 16, d)} & shapes, sorted(shapes)
  assert (n, v) in set(program_shapes(jax.make_jaxpr(jax.grad(direct))(x, kernel, bias)))
  # bf16 params: float32 output, bf16 gradients, close to the float32 values.
  b16 = lambda a: a.astype(jnp.bfloat16)  # noqa: E731
  lse16, grads16 = jax.jit(jax.value_and_grad(chunked, (1, 2)))(b16(x), b16(kernel), b16(bias))
  assert lse16.dtype == jnp.float32 and {g.dtype for g in grads16} == {jnp.dtype(jnp.bfloat16)}
  assert abs(float(lse16) - float(want[0])) <= 0.05 * abs(float(want[0]))


def test_both_config_styles_read_the_same_rotary():
  with open(os.path.join(HERE, "gpt_neox_sequential", "config.json")) as f:
    hub = json.load(f)
  assert "rotary_pct" in hub and "rope_parameters" not in hub
  a = pretrained.arch_from_config(hub)
  v5 = {k: v for k, v in hub.items() if k not in ("rotary_pct", "rotary_emb_base")}
  v5["rope_parameters"] = {"rope_type": "default", "rope_theta": 500, "partial_rotary_factor": 0.5}
  assert pretrained.arch_from_config(v5) == a and a.rotary_dim == 4 and a.rope_theta == 500


@pytest.mark.slow
@pytest.mark.parametrize("rotary_dim, head_dim", [(3, 12), (5, 6), (4, 12), (6, 6)])
def test_an_odd_rotary_dimension_rotates_as_transformers_does(rotary_dim, head_dim):
  """transformers' rotary (GPT-NeoX's, written out in NumPy): ``⌈d/2⌉`` frequencies
  ``base^(−2i/d)``, a cosine of twice that width, and that many leading dimensions rotated by
  halves."""
  from mechjax.models.pretrained import model as model_lib

  x = np.asarray(jax.random.normal(jax.random.key(0), (2, 5, 3, head_dim)), np.float32)
  inv_freq = 1.0 / (10000.0 ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / rotary_dim))
  freqs = np.arange(5, dtype=np.float32)[:, None] * inv_freq
  cos, sin = np.cos(np.c_[freqs, freqs])[None, :, None], np.sin(np.c_[freqs, freqs])[None, :, None]
  w = cos.shape[-1]
  rot = x[..., :w]
  half = np.concatenate([-rot[..., w // 2 :], rot[..., : w // 2]], -1)
  expected = np.concatenate([rot * cos + half * sin, x[..., w:]], -1)
  got = model_lib.rotary(jnp.asarray(x), rotary_dim, 10000.0)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_the_grid_of_configs_matches_transformers():
  """Each config of the grid (odd and even rotary dimensions, rotary fractions, grouped-query
  ratios, a head_dim of its own, tied and untied heads, both residual orders, biases on and off)
  loads and gives transformers' logits and every residual site to 1e-4."""
  names = sorted(os.listdir(os.path.join(HERE, "grid")))
  assert names == sorted(grid.GRID)  # every config of the grid has its fixture
  rotary = set()
  for name in names:
    model, params = pretrained.load(os.path.join(HERE, "grid", name))
    rotary.add(model.arch.rotary_dim)
    want = expected(os.path.join("grid", name))
    forward = jax.jit(lambda p, t: model.apply({"params": p}, t, return_sites=True))
    logits, sites = forward(params, jnp.asarray(want["tokens"]))  # one program, not op by op
    assert max_abs(logits, want["logits"]) <= 1e-4, name
    assert float(np.std(want["logits"])) > 0.1, name
    for site, value in compared_sites(want).items():
      assert max_abs(sites[site], value) <= 1e-4, (name, site)
  assert {1, 3, 5} <= rotary and {2, 6, 12} <= rotary  # odd and even rotary dimensions were met


def test_bf16_keeps_bf16_weights_and_stays_close():
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"), dtype=jnp.bfloat16)
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))
  want = expected("llama_gqa")
  logits = model.apply({"params": params}, jnp.asarray(want["tokens"]))
  assert logits.dtype == jnp.float32
  assert max_abs(logits, want["logits"]) <= 0.1 * float(np.max(np.abs(want["logits"])))


def copy(name, tmp_path):
  folder = tmp_path / name
  shutil.copytree(os.path.join(HERE, name), folder)
  return folder


def edit_config(folder, **changes):
  path = folder / "config.json"
  cfg = json.loads(path.read_text())
  cfg.update(changes)
  path.write_text(json.dumps(cfg))


@pytest.mark.parametrize(
  "name, changes, message",
  [
    (
      "gpt2",
      {"architectures": ["BertForMaskedLM"]},
      "architecture .*BertForMaskedLM.* supported: GPT2LMHeadModel",
    ),
    ("llama_gqa", {"hidden_act": "gelu_10"}, "activation 'gelu_10' is not implemented; supported"),
    (
      "llama_gqa",
      {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0}},
      "rope type 'yarn'",
    ),
    ("qwen2", {"use_sliding_window": True}, "sliding attention window"),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    (
      "llama_gqa",
      {"partial_rotary_factor": 0.5},
      "partial_rotary_factor=0.5 of head_dim 8 gives a rotary width of 4, not the whole head",
    ),
    ("gpt_neox", {"head_dim": 6}, "head_dim=6 differs from hidden_size / num_attention_heads = 8"),
    ("gpt2", {"n_head": 3}, "n_embd=32 is not divisible by n_head=3"),
    (
      "llama_gqa",
      {"num_key_value_heads": 3},
      "num_attention_heads=4 is not divisible by num_key_value_heads=3",
    ),
    (
      "llama_gqa",
      {"intermediate_size": 50},
      r"model.layers.0.mlp.gate_proj.weight has shape \(48, 32\); the config implies \(50, 32\)",
    ),
  ],
)
def test_a_bad_checkpoint_gets_one_line_naming_it(tmp_path, name, changes, message):
  folder = copy(name, tmp_path)
  edit_config(folder, **changes)
  with pytest.raises(pretrained.CheckpointError, match=message) as err:
    pretrained.load(folder)
  assert "\n" not in str(err.value)


def test_a_missing_weight_is_named(tmp_path):
  from safetensors.numpy import save_file

  folder = copy("gpt_neox", tmp_path)
  tensors = {k: np.asarray(v) for k, v in pretrained.read_weights(folder).items()}
  del tensors["gpt_neox.layers.1.mlp.dense_h_to_4h.bias"]
  save_file(tensors, folder / "model.safetensors")
  with pytest.raises(
    pretrained.CheckpointError, match="weight gpt_neox.layers.1.mlp.dense_h_to_4h.bias is missing"
  ):
    pretrained.load(folder)


def test_tokens_outside_the_vocabulary_or_past_the_positions_are_refused():
  model, params = pretrained.load(os.path.join(HERE, "gpt2"))
  with pytest.raises(
    ValueError, match=r"token ids must lie in \[0, 61\) \(vocab_size\); got ids from 0 to 61"
  ):
    model.apply({"params": params}, np.array([[0, 61]]))
  with pytest.raises(ValueError, match="25 positions; this model accepts at most 24"):
    model.apply({"params": params}, np.zeros((1, 25), np.int32))


def test_sharded_safetensors_and_the_reader_agree_with_safetensors(tmp_path):
  from safetensors.numpy import load_file
  from safetensors.numpy import save_file

  folder = copy("llama_gqa", tmp_path)
  whole = load_file(folder / "model.safetensors")
  mine = pretrained.read_safetensors(str(folder / "model.safetensors"))
  assert set(mine) == set(whole)
  for k in whole:
    np.testing.assert_array_equal(mine[k], whole[k])
  keys = sorted(whole)
  shards = {
    "model-00001-of-00002.safetensors": keys[::2],
    "model-00002-of-00002.safetensors": keys[1::2],
  }
  for shard, names in shards.items():
    save_file({k: whole[k] for k in names}, folder / shard)
  (folder / "model.safetensors").unlink()
  weight_map = {k: shard for shard, names in shards.items() for k in names}
  (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
  model, params = pretrained.load(folder)
  want = expected("llama_gqa")
  assert (
    max_abs(model.apply({"params": params}, jnp.asarray(want["tokens"])), want["logits"]) <= 1e-4
  )


def test_save_writes_safetensors_that_load_reads_back_exactly_and_never_overwrites(tmp_path):
  from safetensors.numpy import load_file

  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  q = pretrained.mean_preserving(np.linalg.qr(np.random.default_rng(0).normal(size=(31, 31)))[0])
  rotated, rotated_params = pretrained.rotate_residual(model, params, q)
  out = pretrained.save(tmp_path / "rotated", rotated, rotated_params)
  on_disk = load_file(os.path.join(out, "model.safetensors"))  # the format, read by its own package
  np.testing.assert_array_equal(
    on_disk["attn_0.query.kernel"], rotated_params["attn_0"]["query"]["kernel"]
  )
  back, back_params = pretrained.load(out)
  assert back.arch == rotated.arch and back.arch != model.arch  # folded: untied, with biases
  for a, b in zip(jax.tree.leaves(back_params), jax.tree.leaves(rotated_params), strict=True):
    np.testing.assert_array_equal(a, b)
  tokens = jnp.asarray(expected("gpt_neox")["tokens"])
  assert (
    max_abs(back.apply({"params": back_params}, tokens), model.apply({"params": params}, tokens))
    < 1e-4
  )
  with pytest.raises(
    FileExistsError, match="already holds config.json; save writes a new directory"
  ):
    pretrained.save(out, rotated, rotated_params)
  cfg = json.loads((tmp_path / "rotated" / "config.json").read_text())
  del cfg["mechjax_arch"]["d_model"]
  (tmp_path / "rotated" / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(pretrained.CheckpointError, match="mechjax_arch must give exactly the fields"):
    pretrained.load(out)
  # The source's tokenizer.json travels with the saved model when asked.
  (tmp_path / "source").mkdir()
  (tmp_path / "source" / "tokenizer.json").write_text('{"model": {"type": "WordLevel"}}')
  with_tok = pretrained.save(tmp_path / "t", rotated, rotated_params, tokenizer=tmp_path / "source")
  assert (tmp_path / "t" / "tokenizer.json").read_text() == '{"model": {"type": "WordLevel"}}'
  assert not os.path.exists(os.path.join(out, "tokenizer.json")) and os.path.isdir(with_tok)
  with pytest.raises(pretrained.CheckpointError, match="tokenizer=.*nope does not exist"):
    pretrained.save(tmp_path / "u", rotated, rotated_params, tokenizer=tmp_path / "nope")
  assert not (tmp_path / "u").exists()  # refused before anything is written


def test_a_folder_without_weights_says_what_it_expected(tmp_path):
  folder = copy("gpt2", tmp_path)
  (folder / "model.safetensors").unlink()
  with pytest.raises(pretrained.CheckpointError, match="no weights: expected model.safetensors"):
    pretrained.load(folder)


def test_against_a_live_transformers_model(tmp_path):
  """Where torch and transformers are installed: a fresh random model of every config of the grid,
  saved by transformers and loaded here, gives transformers' logits (the committed fixtures are
  made the same way, by an older run)."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  tokens = np.arange(2 * grid.SEQ).reshape(2, grid.SEQ) * 7 % grid.VOCAB
  for name, (cls, kwargs) in grid.GRID.items():
    torch.manual_seed(1)
    hf = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs))
    with torch.no_grad():
      for p in hf.parameters():
        p.add_(0.15 * torch.randn_like(p))
      want = hf.eval()(torch.tensor(tokens)).logits.numpy()
    hf.save_pretrained(tmp_path / name)
    model, params = pretrained.load(tmp_path / name)
    assert max_abs(model.apply({"params": params}, jnp.asarray(tokens)), want) <= 1e-4, name


@expect_unmixed
@pytest.mark.slow
def test_the_llc_of_a_loaded_checkpoint():
  """The SLT pillar on a loaded model: the LM loss helpers feed estimate_llc directly."""
  from mechjax import slt

  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  loss_fn, per_sample = pretrained.lm_losses(model)
  windows = np.random.default_rng(1).integers(0, model.arch.vocab_size, (64, 12)).astype(np.int32)
  np.testing.assert_allclose(
    per_sample(params, windows[:4]).mean(), loss_fn(params, windows[:4]), rtol=1e-6
  )
  want = expected("gpt_neox")
  np.testing.assert_allclose(loss_fn(params, want["tokens"]), want["loss"], atol=1e-5)
  result = slt.estimate_llc(
    loss_fn,
    params,
    jnp.asarray(windows),
    key=jax.random.key(0),
    num_chains=2,
    num_draws=20,
    num_burnin=10,
    batch_size=16,
    step_size=1e-4,
    nbeta=20.0,
    localization=100.0,
  )
  assert result.llc_per_chain.shape == (2,) and np.all(np.isfinite(result.llc_per_chain))
  assert float(result.init_loss) == pytest.approx(float(loss_fn(params, windows)), rel=1e-5)


def test_pytorch_model_bin_without_torch_says_how_to_convert(tmp_path):
  if importlib.util.find_spec("torch") is not None:
    pytest.skip("torch is installed here; the live test reads .bin files")
  folder = copy("gpt2", tmp_path)
  (folder / "model.safetensors").unlink()
  (folder / "pytorch_model.bin").write_bytes(b"")
  with pytest.raises(pretrained.CheckpointError, match="needs torch to read.*save_file") as err:
    pretrained.load(folder)
  assert "\n" not in str(err.value)
  (folder / "config.json").unlink()
  with pytest.raises(pretrained.CheckpointError, match="has no config.json"):
    pretrained.load(folder)
