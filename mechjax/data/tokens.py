"""Token corpora for pretrained language models: text files tokenized with a checkpoint's own
``tokenizer.json``, stored in one memory-mapped token file, and seeded windows drawn from it.

The token file (``.tokens``) is a 48-byte header, then the ids::

    bytes 0-7    b"MJXTOK02"                 (the format and its version)
    bytes 8-11   uint32 little-endian: 2 or 4 (bytes per id: uint16 or uint32)
    bytes 12-15  uint32 little-endian: the end-of-document id written between documents
    bytes 16-47  the fingerprint of the tokenizer that made the ids (:func:`fingerprint`), or 32
                 zero bytes when it is not known
    bytes 48-    the ids, little-endian, one document after another, each followed by that id

uint16 is used whenever the vocabulary fits (ids below 65,536), uint32 otherwise.
:func:`read_tokens` memory-maps the ids, so a corpus larger than memory costs nothing until it is
read. Version 1 (``b"MJXTOK01"``, a 16-byte header without the fingerprint) is still read.

The pretrained studies compare the corpus's fingerprint with the checkpoint's ``tokenizer.json``
(:func:`check_tokenizer`) and refuse a corpus made with another tokenizer, whose ids would fit the
vocabulary and mean other words.

Example::

    from mechjax.data import tokens
    path = tokens.corpus_from_text("my_texts/", "checkpoints/pythia-70m", "corpus.tokens")
    ids = tokens.read_tokens(path)
    windows = tokens.sample_windows(ids, seq_len=256, num=512, seed=0)  # (512, 256) int32
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import warnings
from typing import Sequence

import numpy as np

from mechjax import rng
from mechjax.errors import InputError

MAGIC = b"MJXTOK02"
HEADER = 48
HEADERS = {b"MJXTOK01": 16, MAGIC: HEADER}  # every version read, and its header's length
UNKNOWN = bytes(32)  # the fingerprint of a corpus whose tokenizer is not known


# The end-of-document tokens looked for, in this order, in a tokenizer that is not told its id.
EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>")

MAKE_ONE = (
  'python -c "from mechjax.data import tokens; '
  "tokens.corpus_from_text('texts/', 'MODEL_DIR', 'corpus.tokens')\""
)


class CorpusError(InputError):
  """A token file, a text folder or a tokenizer that cannot be used; the message says why and how
  to make a token file."""


class CorpusWarning(UserWarning):
  """A corpus that cannot be checked against its model's tokenizer."""


class TokenFile(np.memmap):
  """The ids of a token file (a read-only memory map) with its ``eos_id`` and ``fingerprint``
  (the hex digest of its tokenizer's :func:`fingerprint`, or None when not known)."""

  eos_id: int
  fingerprint: str | None


def write_tokens(
  path: str | os.PathLike,
  documents,
  eos_id: int,
  *,
  vocab_size: int | None = None,
  tokenizer_fingerprint: str | None = None,
) -> str:
  """Writes ``documents`` (an iterable of id sequences) to the token file ``path``, ``eos_id`` after
  each one, and returns the path. With ``vocab_size`` the documents are streamed to disk (the id
  width follows from it); without, they are held until the widest id is known. Refuses to
  overwrite an existing file, and ids outside ``[0, vocab_size)``. ``tokenizer_fingerprint`` (the
  hex digest :func:`fingerprint` gives) records the tokenizer that made the ids;
  :func:`corpus_from_text` passes it."""
  path = os.fspath(path)
  mark = UNKNOWN if tokenizer_fingerprint is None else bytes.fromhex(tokenizer_fingerprint)
  if len(mark) != len(UNKNOWN):
    raise ValueError(f"tokenizer_fingerprint must be a SHA-256 hex digest; got {mark.hex()!r}")
  if os.path.exists(path):
    raise FileExistsError(f"{path} exists; remove it or choose another path for the token file")
  if vocab_size is None:
    documents = [np.asarray(d, np.int64).ravel() for d in documents]
    vocab_size = 1 + max([int(eos_id)] + [int(d.max()) for d in documents if d.size])
  if not 0 <= int(eos_id) < vocab_size:
    raise ValueError(f"eos_id must lie in [0, {vocab_size}); got {eos_id}")
  width = 2 if vocab_size <= 2**16 else 4
  dtype = np.dtype("<u2" if width == 2 else "<u4")
  eos = np.array([eos_id], dtype).tobytes()
  tmp, count = path + ".partial", 0
  try:
    with open(tmp, "wb") as f:
      f.write(MAGIC + np.array([width, eos_id], "<u4").tobytes() + mark)
      for d in documents:
        d = np.asarray(d, np.int64).ravel()
        if d.size and (d.min() < 0 or d.max() >= vocab_size):
          raise ValueError(
            f"document {count}: token ids must lie in [0, {vocab_size}); got ids from {d.min()} "
            f"to {d.max()}"
          )
        f.write(d.astype(dtype).tobytes() + eos)
        count += 1
    if count == 0:
      raise ValueError("no documents to write; pass at least one sequence of token ids")
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return path


def read_tokens(path: str | os.PathLike) -> TokenFile:
  """The ids of a token file as a read-only memory map, with ``.eos_id`` and ``.fingerprint``."""
  path = os.fspath(path)
  if not os.path.exists(path):
    raise CorpusError(f"{path} does not exist; pass a token file, which {MAKE_ONE} makes from text")
  if os.path.isdir(path):
    raise CorpusError(
      f"{path} is a folder; pass a token file, which {MAKE_ONE} makes from the folder's text files"
    )
  with open(path, "rb") as f:
    head = f.read(HEADER)
  size = HEADERS.get(head[:8])
  if size is None or len(head) < size:
    raise CorpusError(
      f"{path} is not a mechjax token file (it does not start with {MAGIC!r}); to make one from "
      f"text files: {MAKE_ONE}"
    )
  width, eos_id = np.frombuffer(head[8:16], "<u4")
  if width not in (2, 4):
    raise CorpusError(f"{path}: bytes per id must be 2 or 4; the header says {width}")
  ids = np.memmap(path, dtype="<u2" if width == 2 else "<u4", mode="r", offset=size)
  out = ids.view(TokenFile)
  out.eos_id = int(eos_id)
  mark = head[16:size]
  out.fingerprint = mark.hex() if mark and mark != UNKNOWN else None
  return out


def sample_windows(ids, seq_len: int, num: int, seed: int, stream: str = "windows") -> np.ndarray:
  """``num`` windows of ``seq_len`` consecutive ids, ``(num, seq_len)`` int32, at start positions
  drawn uniformly (with replacement) from the named stream ``stream`` of ``seed``
  (:func:`mechjax.rng.numpy`): the same seed gives the same windows."""
  n = len(ids)
  if seq_len < 1 or num < 1:
    raise ValueError(f"seq_len and num must be positive; got seq_len={seq_len}, num={num}")
  if n < seq_len:
    raise CorpusError(f"the corpus has {n} tokens, fewer than one window of seq_len={seq_len}")
  starts = rng.numpy(seed, stream).integers(0, n - seq_len + 1, size=num)
  return np.stack([np.asarray(ids[s : s + seq_len], np.int32) for s in starts])


def decoder(model_dir: str | os.PathLike):
  """``decode(ids) -> text`` with the checkpoint's ``tokenizer.json``, for reports; the ids as
  ``#123`` where it has none."""
  if os.path.exists(os.path.join(model_dir, "tokenizer.json")):
    tok = tokenizer(model_dir)
    return lambda ids: tok.decode(list(ids))
  return lambda ids: " ".join(f"#{i}" for i in ids)


def tokenizer(path: str | os.PathLike):
  """The ``tokenizers.Tokenizer`` of a ``tokenizer.json`` (a checkpoint's own)."""
  try:
    import tokenizers
  except ImportError:
    raise ImportError(
      "reading tokenizer.json needs the tokenizers package: pip install -r requirements.txt"
    ) from None
  path = os.fspath(path)
  if os.path.isdir(path):
    path = os.path.join(path, "tokenizer.json")
  if not os.path.exists(path):
    raise CorpusError(f"{path} does not exist; pass a checkpoint's tokenizer.json or its directory")
  try:
    return tokenizers.Tokenizer.from_file(path)
  except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
    hint = (
      "; this is a model config: pass the tokenizer.json beside it, or the checkpoint directory"
      if os.path.basename(path) == "config.json"
      else "; pass a checkpoint's tokenizer.json or its directory"
    )
    raise CorpusError(f"{path} is not a tokenizer.json ({_first_line(e)}){hint}") from None


def _first_line(e: Exception) -> str:
  text = str(e).strip().splitlines()
  return text[0] if text else type(e).__name__


def corpus_from_text(
  texts: str | os.PathLike,
  tokenizer_json: str | os.PathLike,
  out: str | os.PathLike,
  *,
  eos_id: int | None = None,
  suffixes: str | Sequence[str] = (".txt",),
) -> str:
  """Tokenizes the text files ``texts`` names (sorted by path) with ``tokenizer_json`` and writes
  them, one document per file, to the token file ``out``.

  Args:
    texts: a folder (searched recursively for files ending in one of ``suffixes``), one file, or a
      glob pattern (``"books/**/*.md"``; ``**`` matches any depth).
    tokenizer_json: the checkpoint's ``tokenizer.json``, or the checkpoint directory.
    out: the token file to write (refused if it exists).
    eos_id: the id written between documents; default the tokenizer's ``<|endoftext|>``, ``</s>``
      or ``<eos>``, whichever it has.
    suffixes: the file endings read from a folder, e.g. ``(".txt", ".md")``.

  Returns:
    ``out``.
  """
  files = text_files(texts, suffixes)
  tok = tokenizer(tokenizer_json)
  if eos_id is None:
    eos_id = next(
      (tok.token_to_id(t) for t in EOS_TOKENS if tok.token_to_id(t) is not None),
      None,
    )
    if eos_id is None:
      raise CorpusError(
        "the tokenizer has no <|endoftext|>, </s> or <eos> token; pass eos_id= for the id written "
        "between documents"
      )

  def documents():
    for f in files:
      with open(f, encoding="utf-8") as fh:
        yield tok.encode(fh.read(), add_special_tokens=False).ids

  return write_tokens(
    out,
    documents(),
    eos_id,
    vocab_size=tok.get_vocab_size(),
    tokenizer_fingerprint=fingerprint(tok),
  )


# The parts of a tokenizer.json that decide which ids a text becomes (add_special_tokens=False):
# not its decoder, padding, truncation or post-processor.
_ENCODING = ("normalizer", "pre_tokenizer", "model", "added_tokens")


def fingerprint(tok) -> str:
  """The SHA-256 hex digest of what in a tokenizer decides the ids a text becomes: its
  normalizer, pre-tokenizer, model (vocabulary and merges) and added tokens, as sorted JSON. Two
  copies of one tokenizer.json, or the same one formatted otherwise, agree; a tokenizer with one
  token more does not. ``tok`` is a ``tokenizers.Tokenizer``, a ``tokenizer.json`` or its
  checkpoint directory."""
  if isinstance(tok, (str, os.PathLike)):
    tok = tokenizer(tok)
  spec = json.loads(tok.to_str())
  encoding = {k: spec.get(k) for k in _ENCODING}
  return hashlib.sha256(json.dumps(encoding, sort_keys=True).encode()).hexdigest()


def check_tokenizer(ids: TokenFile, checkpoint: str | os.PathLike, *, allow_mismatch: bool = False):
  """Refuses, in one line, a corpus made with another tokenizer than ``checkpoint``'s
  ``tokenizer.json``: its ids fit the vocabulary but are other words. With ``allow_mismatch`` the
  refusal becomes a :class:`CorpusWarning`, as are a corpus without a fingerprint (token file
  version 1, or written without one) and a checkpoint without a ``tokenizer.json``, which cannot be
  checked."""
  checkpoint = os.fspath(checkpoint)
  path = os.path.join(checkpoint, "tokenizer.json")
  recorded = getattr(ids, "fingerprint", None)
  if recorded is None:
    warnings.warn(
      "the corpus records no tokenizer (a token file from before format 2, or written without "
      f"one), so it is not checked against {path}; remake it with corpus_from_text to check it",
      CorpusWarning,
      stacklevel=2,
    )
    return
  if not os.path.exists(path):
    warnings.warn(
      f"{checkpoint} has no tokenizer.json, so the corpus is not checked against the model's "
      "tokenizer",
      CorpusWarning,
      stacklevel=2,
    )
    return
  model = fingerprint(path)
  if model == recorded:
    return
  message = (
    f"the corpus was made with another tokenizer than {path} (fingerprints {recorded[:12]} and "
    f"{model[:12]}): its ids would be other words; make it "
    "with this checkpoint's tokenizer.json"
  )
  if not allow_mismatch:
    raise CorpusError(message + ", or pass --allow_other_tokenizer if you know they agree")
  warnings.warn(message + " (allowed)", CorpusWarning, stacklevel=2)


def text_files(texts: str | os.PathLike, suffixes: str | Sequence[str] = (".txt",)) -> list[str]:
  """The files :func:`corpus_from_text` reads, sorted: ``texts`` itself when it is a file, the files
  under the folder ``texts`` that end in one of ``suffixes``, or the files that match the glob
  ``texts``. Refuses, in one line, a path that does not exist and a selection with no files."""
  texts = os.fspath(texts)
  suffixes = (suffixes,) if isinstance(suffixes, str) else tuple(suffixes)
  if os.path.isfile(texts):
    return [texts]
  if os.path.isdir(texts):
    found = glob.glob(os.path.join(glob.escape(texts), "**", "*"), recursive=True)
    files = sorted(f for f in found if os.path.isfile(f) and f.endswith(suffixes))
    if not files:
      raise CorpusError(
        f"no files ending in {', '.join(suffixes)} under {texts}; pass suffixes= for other "
        "endings, or a glob pattern as texts"
      )
    return files
  if any(c in texts for c in "*?["):
    files = sorted(f for f in glob.glob(texts, recursive=True) if os.path.isfile(f))
    if not files:
      raise CorpusError(f"no files match the pattern {texts}")
    return files
  raise CorpusError(f"{texts} does not exist; pass a folder of text files, a text file or a glob")


def disk_windows(ids, seq_len: int) -> np.ndarray:
  """The corpus cut into its ``len(ids) // seq_len`` consecutive, non-overlapping windows,
  ``(n, seq_len)``, as a view of ``ids`` (of a token file's memory map: nothing is read until a
  window is indexed). What :class:`mechjax.slt.stream.Streamed` streams to the sampler, e.g.
  ``slt.estimate_llc(loss_fn, params, Streamed(disk_windows(ids, 256), dtype=np.int32), ...)``.
  The ids after the last whole window are left out."""
  if seq_len < 1:
    raise ValueError(f"seq_len must be positive; got {seq_len}")
  n = len(ids) // seq_len
  if n < 1:
    raise CorpusError(
      f"the corpus has {len(ids)} tokens, fewer than one window of seq_len={seq_len}"
    )
  return ids[: n * seq_len].reshape(n, seq_len)
