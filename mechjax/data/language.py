"""A corpus of English written by people, made offline: Wikipedia articles that ship in a package, a
byte-level BPE tokenizer trained on them, and token files for training and for held-out loss.

The text is the slice of an English Wikipedia dump that gensim ships as test data
(``gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``,
in gensim 4.4.0, pinned in requirements.txt): 106 articles, Anarchism to Aldous Huxley, about 2.8
million characters once :mod:`mechjax.data.wikitext` has reduced their markup to prose. Wikipedia's
text is licensed CC BY-SA 3.0 (and the GFDL); mechjax reads the file where pip put it and never
imports gensim.

:func:`make_corpus` writes, into a new folder::

    tokenizer.json   byte-level BPE (the tokenizers package), trained on the training articles only
    train.tokens     the training articles, one document each (mechjax.data.tokens format)
    heldout.tokens   every ``heldout_every``-th article, never seen by the tokenizer or the training
    corpus.json      the source, its licence, the settings, and each split's articles and sizes

Both token files record the tokenizer's fingerprint, so the pretrained studies accept them for any
checkpoint that carries this ``tokenizer.json``. Example::

    from mechjax.data import language
    corpus = language.make_corpus("runs/corpus")       # about 30 s on two cores
    ids = tokens.read_tokens(corpus.train)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil

from mechjax.data import tokens
from mechjax.data import wikitext
from mechjax.data.tokens import CorpusError

DUMP = os.path.join(
  "test", "test_data", "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)
SOURCE = "English Wikipedia (enwiki-latest-pages-articles1, shortened), as shipped in gensim 4.4.0"
LICENCE = "CC BY-SA 3.0 (Wikipedia's text licence, with the GFDL)"
EOS = "<|endoftext|>"
MANIFEST = "corpus.json"
FILES = ("tokenizer.json", "train.tokens", "heldout.tokens", MANIFEST)


@dataclasses.dataclass(frozen=True)
class Corpus:
  """A made corpus: its folder, the paths of its files, and its manifest (``corpus.json``)."""

  directory: str
  manifest: dict

  @property
  def tokenizer(self) -> str:
    return os.path.join(self.directory, "tokenizer.json")

  @property
  def train(self) -> str:
    return os.path.join(self.directory, "train.tokens")

  @property
  def heldout(self) -> str:
    return os.path.join(self.directory, "heldout.tokens")


def wikipedia_dump() -> str:
  """The path of the Wikipedia dump inside the installed gensim package (found without importing
  gensim); one line when gensim is not installed or lacks the file."""
  spec = importlib.util.find_spec("gensim")
  if spec is None or not spec.submodule_search_locations:
    raise CorpusError(
      "the Wikipedia corpus ships in the gensim package, which is not installed: "
      "pip install -r requirements.txt"
    )
  path = os.path.join(list(spec.submodule_search_locations)[0], DUMP)
  if not os.path.exists(path):
    raise CorpusError(f"{path} is missing from the installed gensim; install gensim==4.4.0")
  return path


def split_articles(articles: list, heldout_every: int) -> tuple[list, list]:
  """``(train, heldout)``: every ``heldout_every``-th article (the 10th, 20th, ... for 10) is held
  out, the rest train, each in the dump's order."""
  if heldout_every < 2:
    raise ValueError(f"heldout_every must be at least 2; got {heldout_every}")
  heldout = [a for i, a in enumerate(articles) if i % heldout_every == heldout_every - 1]
  train = [a for i, a in enumerate(articles) if i % heldout_every != heldout_every - 1]
  return train, heldout


def train_tokenizer(texts: list[str], vocab_size: int):
  """A byte-level BPE ``tokenizers.Tokenizer`` of ``vocab_size`` ids trained on ``texts``, with
  ``<|endoftext|>`` as id 0 (every byte is in its alphabet, so any text encodes)."""
  import tokenizers

  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=[EOS],
    initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
  )
  tok.train_from_iterator(texts, trainer)
  return tok


def make_corpus(
  directory: str | os.PathLike,
  *,
  vocab_size: int = 4096,
  heldout_every: int = 10,
  dump: str | os.PathLike | None = None,
) -> Corpus:
  """Makes the corpus (module docstring) in ``directory`` and returns it.

  A folder that already holds a corpus made with the same settings is returned as it is; one made
  with other settings, or holding other files of these names, is refused in one line (nothing is
  overwritten). ``dump`` replaces the shipped Wikipedia file by another MediaWiki XML dump.
  """
  directory = os.fspath(directory)
  settings = {"vocab_size": int(vocab_size), "heldout_every": int(heldout_every)}
  if vocab_size < 257:
    raise ValueError(
      f"vocab_size must be at least 257 (the bytes and <|endoftext|>); got {vocab_size}"
    )
  existing = _existing(directory, settings)
  if existing is not None:
    return existing
  source = os.fspath(dump) if dump is not None else wikipedia_dump()
  articles = list(wikitext.articles(source))
  train, heldout = split_articles(articles, heldout_every)
  if not heldout:
    raise CorpusError(
      f"{source} has {len(articles)} articles: too few to hold out one in {heldout_every}"
    )
  tok = train_tokenizer([text for _, text in train], vocab_size)
  partial = directory + ".partial"
  shutil.rmtree(partial, ignore_errors=True)
  os.makedirs(partial)
  tok.save(os.path.join(partial, "tokenizer.json"))
  mark = tokens.fingerprint(tok)
  splits = {}
  for name, part in (("train", train), ("heldout", heldout)):
    ids = [tok.encode(text, add_special_tokens=False).ids for _, text in part]
    tokens.write_tokens(
      os.path.join(partial, f"{name}.tokens"),
      ids,
      tok.token_to_id(EOS),
      vocab_size=tok.get_vocab_size(),
      tokenizer_fingerprint=mark,
    )
    splits[name] = {
      "articles": [title for title, _ in part],
      "characters": sum(len(text) for _, text in part),
      "tokens": sum(len(i) + 1 for i in ids),  # each document and its end-of-document id
    }
  manifest = {
    "source": SOURCE if dump is None else source,
    "licence": LICENCE if dump is None else "that of the dump given",
    "settings": settings,
    "tokenizer_fingerprint": mark,
    "eos_id": tok.token_to_id(EOS),
    "splits": splits,
  }
  with open(os.path.join(partial, MANIFEST), "w") as f:
    json.dump(manifest, f, indent=1)
  os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
  if os.path.isdir(directory) and not os.listdir(directory):
    os.rmdir(directory)
  os.replace(partial, directory)
  return Corpus(directory, manifest)


def _existing(directory: str, settings: dict) -> Corpus | None:
  """The corpus already in ``directory`` when its settings are ``settings``; None for a folder that
  does not exist or is empty; one line for anything else there."""
  if not os.path.exists(directory) or (os.path.isdir(directory) and not os.listdir(directory)):
    return None
  corpus = load_corpus(directory)
  if corpus.manifest.get("settings") != settings:
    raise CorpusError(
      f"{directory} holds a corpus made with {corpus.manifest.get('settings')}, not {settings}; "
      "choose another folder"
    )
  return corpus


def load_corpus(directory: str | os.PathLike) -> Corpus:
  """The corpus :func:`make_corpus` wrote in ``directory``; one line when it is not one."""
  directory = os.fspath(directory)
  path = os.path.join(directory, MANIFEST)
  if not os.path.isdir(directory):
    raise CorpusError(f"{directory} is not a folder; pass the folder make_corpus wrote")
  missing = [f for f in FILES if not os.path.exists(os.path.join(directory, f))]
  if missing:
    raise CorpusError(
      f"{directory} is not a corpus made by mechjax.data.language.make_corpus (missing "
      f"{', '.join(missing)}); make one in an empty or new folder"
    )
  with open(path) as f:
    return Corpus(directory, json.load(f))
