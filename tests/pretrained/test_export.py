"""export_hf: models written in their Hugging Face architecture's own layout, checked against the
checkpoints transformers wrote (checkpoints/), and against a live transformers where torch is."""

import glob
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mechjax.models import pretrained
from mechjax.models.pretrained import export

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoints")
WRITTEN_BY_TRANSFORMERS = sorted(
  os.path.relpath(os.path.dirname(p), HERE)
  for p in glob.glob(os.path.join(HERE, "*", "config.json"))
  + glob.glob(os.path.join(HERE, "grid", "*", "config.json"))
  if not os.path.relpath(p, HERE).startswith("trained")
)


def test_every_checkpoint_transformers_wrote_is_written_back_tensor_for_tensor():
  """The reader run backwards: from the loaded params, the same names, shapes and bytes as
  transformers' save_pretrained wrote, for every family and option of the grid."""
  assert len(WRITTEN_BY_TRANSFORMERS) >= 20
  for name in WRITTEN_BY_TRANSFORMERS:
    folder = os.path.join(HERE, name)
    model, params = pretrained.load(folder)
    want = pretrained.read_weights(folder)
    got = export.hf_tensors(model.arch, params)
    assert sorted(got) == sorted(want), name
    for key, value in got.items():
      np.testing.assert_array_equal(value, np.asarray(want[key]), err_msg=f"{name}: {key}")
    with open(os.path.join(folder, "config.json")) as f:
      cfg = json.load(f)
    assert pretrained.arch_from_config(export.hf_config(model.arch)) == model.arch
    assert export.hf_config(model.arch)["architectures"] == cfg["architectures"]


@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "llama_gqa", "qwen2"])
def test_export_then_load_gives_the_params_back_exactly(name, tmp_path):
  model, params = pretrained.load(os.path.join(HERE, name))
  params = jax.tree.map(lambda a: a + 0.01, params)  # not the committed weights
  out = pretrained.export_hf(tmp_path / "out", model, params)
  again, back = pretrained.load(out)
  assert again.arch == model.arch
  assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), params, back))
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["dtype"] == "float32"


def test_a_tokenizer_is_copied_and_its_end_of_text_id_recorded(tmp_path):
  tokenizer = tmp_path / "tokenizer.json"
  tokenizer.write_text(json.dumps({"added_tokens": [{"id": 3, "content": "<|endoftext|>"}]}))
  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  out = pretrained.export_hf(tmp_path / "out", model, params, tokenizer=tmp_path)
  with open(os.path.join(out, "config.json")) as f:
    cfg = json.load(f)
  assert cfg["eos_token_id"] == cfg["bos_token_id"] == 3
  assert os.path.exists(os.path.join(out, "tokenizer.json"))


def test_what_the_architecture_cannot_express_is_refused_by_name(tmp_path):
  model, params = pretrained.load(os.path.join(HERE, "gpt_neox"))
  folded, folded_params = pretrained.fold_norms(model, params)
  with pytest.raises(pretrained.CheckpointError, match=r"cannot express .*unembed_bias=True.*save"):
    pretrained.export_hf(tmp_path / "a", folded, folded_params)
  assert not (tmp_path / "a").exists()
  odd = pretrained.DecoderLM(
    pretrained.Arch(**{**vars(model.arch), "qkv_bias": True, "out_bias": False})
  )
  with pytest.raises(pretrained.CheckpointError, match="GPTNeoXForCausalLM cannot .*out_bias"):
    pretrained.export_hf(tmp_path / "b", odd, params)


def test_wrong_params_and_an_existing_checkpoint_are_refused(tmp_path):
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"))
  with pytest.raises(pretrained.CheckpointError, match="structure of a llama DecoderLM"):
    pretrained.export_hf(tmp_path / "a", model, {"embed": params["embed"]})
  bad = {**params, "embed": {"embedding": params["embed"]["embedding"][:5]}}
  with pytest.raises(pretrained.CheckpointError, match=r"param \['embed'\]\['embedding'\] has"):
    pretrained.export_hf(tmp_path / "a", model, bad)
  pretrained.export_hf(tmp_path / "a", model, params)
  before = (tmp_path / "a" / "model.safetensors").read_bytes()
  with pytest.raises(pretrained.CheckpointError, match="already holds config.json"):
    pretrained.export_hf(tmp_path / "a", model, jax.tree.map(lambda a: a * 2, params))
  assert (tmp_path / "a" / "model.safetensors").read_bytes() == before


def test_transformers_reads_what_export_hf_writes(tmp_path):
  """Where torch and transformers are installed: every family and option of the grid, exported
  with changed weights, gives transformers the logits mechjax computes."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  for name in WRITTEN_BY_TRANSFORMERS:
    model, params = pretrained.load(os.path.join(HERE, name))
    params = jax.tree.map(lambda a: a * 1.1, params)
    out = pretrained.export_hf(tmp_path / name, model, params)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    seq = min(8, model.arch.max_positions)
    tokens = np.arange(2 * seq).reshape(2, seq) * 5 % model.arch.vocab_size
    with torch.no_grad():
      want = hf(torch.tensor(tokens)).logits.numpy()
    got = np.asarray(model.apply({"params": params}, jnp.asarray(tokens)))
    assert np.max(np.abs(got - want)) <= 1e-4, name


def test_bfloat16_params_are_written_as_bfloat16(tmp_path):
  model, params = pretrained.load(os.path.join(HERE, "llama_gqa"), dtype=jnp.bfloat16)
  out = pretrained.export_hf(tmp_path / "bf16", model, params)
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["dtype"] == "bfloat16"
  assert {str(a.dtype) for a in pretrained.read_weights(out).values()} == {"bfloat16"}
  _, back = pretrained.load(out, dtype=jnp.bfloat16)
  assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), params, back))
