"""Token corpora: the token file format, seeded windows, and text files tokenized with a
tokenizer.json (mechjax.data.tokens)."""

import json
import pathlib

import numpy as np
import pytest

from mechjax.data import tokens


def test_the_token_file_round_trips_and_says_its_format(tmp_path):
  docs = [[5, 6, 7], [], [65535, 1]]
  path = tokens.write_tokens(tmp_path / "c.tokens", docs, eos_id=0)
  raw = pathlib.Path(path).read_bytes()
  assert raw[:8] == b"MJXTOK02" and np.frombuffer(raw[8:16], "<u4").tolist() == [2, 0]
  assert raw[16:48] == bytes(32) and tokens.read_tokens(path).fingerprint is None  # not known
  ids = tokens.read_tokens(path)
  assert isinstance(ids, np.memmap) and ids.eos_id == 0 and ids.dtype == np.dtype("<u2")
  assert ids.tolist() == [5, 6, 7, 0, 0, 65535, 1, 0]
  wide = tokens.read_tokens(tokens.write_tokens(tmp_path / "w.tokens", [[70000]], eos_id=3))
  assert wide.dtype == np.dtype("<u4") and wide.tolist() == [70000, 3]
  with pytest.raises(FileExistsError, match="exists"):
    tokens.write_tokens(path, docs, eos_id=0)
  with pytest.raises(ValueError, match=r"document 1: token ids must lie in \[0, 10\)"):
    tokens.write_tokens(tmp_path / "bad.tokens", [[1], [12]], eos_id=0, vocab_size=10)
  assert not (tmp_path / "bad.tokens").exists() and not (tmp_path / "bad.tokens.partial").exists()
  (tmp_path / "x.bin").write_bytes(b"not a token file at all")
  with pytest.raises(tokens.CorpusError, match="not a mechjax token file.*corpus_from_text"):
    tokens.read_tokens(tmp_path / "x.bin")
  with pytest.raises(tokens.CorpusError, match="is a folder; pass a token file"):
    tokens.read_tokens(tmp_path)
  with pytest.raises(tokens.CorpusError, match="nothing.tokens does not exist"):
    tokens.read_tokens(tmp_path / "nothing.tokens")


def test_windows_are_seeded_and_consecutive(tmp_path):
  ids = tokens.read_tokens(tokens.write_tokens(tmp_path / "c.tokens", [np.arange(1, 500)], 0))
  a = tokens.sample_windows(ids, seq_len=16, num=32, seed=0)
  assert a.shape == (32, 16) and a.dtype == np.int32
  np.testing.assert_array_equal(a, tokens.sample_windows(ids, 16, 32, seed=0))
  assert not np.array_equal(a, tokens.sample_windows(ids, 16, 32, seed=1))
  assert (np.diff(a[a[:, 0] < 480], axis=1) == 1).all()  # consecutive ids of the corpus
  with pytest.raises(tokens.CorpusError, match="fewer than one window"):
    tokens.sample_windows(ids, seq_len=1000, num=1, seed=0)


def test_a_folder_of_text_files_becomes_a_corpus_in_one_call(tmp_path):
  tk = pytest.importorskip("tokenizers")
  # A tiny word-level tokenizer.json made here (nothing is downloaded).
  vocab = {"<|endoftext|>": 0, "[UNK]": 1, "the": 2, "cat": 3, "sat": 4, "mat": 5, "on": 6}
  model = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token="[UNK]"))
  model.pre_tokenizer = tk.pre_tokenizers.Whitespace()
  model.add_special_tokens(["<|endoftext|>"])
  model.save(str(tmp_path / "tokenizer.json"))
  assert json.loads((tmp_path / "tokenizer.json").read_text())["model"]["type"] == "WordLevel"
  texts = tmp_path / "texts"
  (texts / "b").mkdir(parents=True)
  (texts / "a.txt").write_text("the cat sat")
  (texts / "b" / "c.txt").write_text("on the mat dog")
  (texts / "skip.md").write_text("the the the")
  path = tokens.corpus_from_text(texts, tmp_path, tmp_path / "corpus.tokens")
  ids = tokens.read_tokens(path)
  assert ids.tolist() == [2, 3, 4, 0, 6, 2, 5, 1, 0] and ids.eos_id == 0
  assert ids.fingerprint == tokens.fingerprint(tmp_path / "tokenizer.json")
  # Other endings, by suffix or by a glob pattern.
  md = tokens.read_tokens(
    tokens.corpus_from_text(texts, tmp_path, tmp_path / "md.tokens", suffixes=(".txt", ".md"))
  )
  assert md.tolist() == [2, 3, 4, 0, 6, 2, 5, 1, 0, 2, 2, 2, 0]
  glob = tokens.read_tokens(tokens.corpus_from_text(f"{texts}/**/*.md", tmp_path, tmp_path / "g"))
  assert glob.tolist() == [2, 2, 2, 0]
  with pytest.raises(tokens.CorpusError, match="nothing does not exist"):
    tokens.corpus_from_text(texts / "b" / "nothing", tmp_path, tmp_path / "x.tokens")
  with pytest.raises(tokens.CorpusError, match="no files ending in .rst under .*suffixes="):
    tokens.corpus_from_text(texts, tmp_path, tmp_path / "x.tokens", suffixes=".rst")
  with pytest.raises(tokens.CorpusError, match=r"no files match the pattern .*\*\.rst"):
    tokens.corpus_from_text(f"{texts}/*.rst", tmp_path, tmp_path / "x.tokens")
  # A model's config.json passed as the tokenizer says so.
  (tmp_path / "model").mkdir()
  (tmp_path / "model" / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
  with pytest.raises(tokens.CorpusError, match="config.json is not a tokenizer.json.*model conf"):
    tokens.corpus_from_text(texts, tmp_path / "model" / "config.json", tmp_path / "x.tokens")
  with pytest.raises(tokens.CorpusError, match="model/tokenizer.json does not exist"):
    tokens.corpus_from_text(texts, tmp_path / "model", tmp_path / "x.tokens")
  assert not (tmp_path / "x.tokens").exists()


def test_the_corpus_records_its_tokenizer_and_a_mismatch_is_refused(tmp_path):
  from tests.pretrained.test_bad_inputs import fingerprinted_corpus
  from tests.pretrained.test_bad_inputs import word_tokenizer

  (tmp_path / "model").mkdir()
  mine = word_tokenizer(tmp_path / "model" / "tokenizer.json")
  other = word_tokenizer(tmp_path / "other.json", shift=7)
  mark = tokens.fingerprint(mine)
  assert len(mark) == 64 and mark != tokens.fingerprint(other)
  # The same tokenizer written with other formatting has the same fingerprint.
  (tmp_path / "pretty.json").write_text(
    json.dumps(json.loads(pathlib.Path(mine).read_text()), indent=4)
  )
  assert tokens.fingerprint(tmp_path / "pretty.json") == mark
  ids = tokens.read_tokens(fingerprinted_corpus(tmp_path / "c.tokens", mine))
  assert (
    ids.fingerprint == mark
    and pathlib.Path(tmp_path / "c.tokens").read_bytes()[16:48].hex() == mark
  )
  tokens.check_tokenizer(ids, tmp_path / "model")  # the same tokenizer: no warning, no error
  theirs = tokens.read_tokens(fingerprinted_corpus(tmp_path / "o.tokens", other))
  with pytest.raises(tokens.CorpusError, match="another tokenizer than .*allow_other_tokenizer"):
    tokens.check_tokenizer(theirs, tmp_path / "model")
  with pytest.warns(tokens.CorpusWarning, match=r"another tokenizer .*\(allowed\)"):
    tokens.check_tokenizer(theirs, tmp_path / "model", allow_mismatch=True)
  with pytest.warns(tokens.CorpusWarning, match="has no tokenizer.json"):
    tokens.check_tokenizer(ids, tmp_path)
  # A version-1 file (16-byte header, no fingerprint) is still read, and gets a warning.
  old = tmp_path / "old.tokens"
  old.write_bytes(
    b"MJXTOK01" + np.array([2, 0], "<u4").tobytes() + np.array([5, 6, 0], "<u2").tobytes()
  )
  v1 = tokens.read_tokens(old)
  assert v1.tolist() == [5, 6, 0] and v1.fingerprint is None and v1.eos_id == 0
  with pytest.warns(tokens.CorpusWarning, match="records no tokenizer"):
    tokens.check_tokenizer(v1, tmp_path / "model")


def test_the_report_decoder_falls_back_to_ids_without_a_tokenizer(tmp_path):
  assert tokens.decoder(tmp_path)([5, 17]) == "#5 #17"
