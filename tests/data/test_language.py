"""The offline English corpus: wiki markup reduced to prose, and make_corpus's folder."""

import json
import os

import pytest

from mechjax.data import language
from mechjax.data import tokens
from mechjax.data import wikitext
from tests.helpers import write_wiki_dump

MARKUP = """{{Infobox person|name=X|note={{nested|template}}}}
'''Ada''' was a [[mathematician|mathematical]] writer<ref name="a">{{cite book|title=T}}</ref> born
in [[London]].<ref name="a"/> She wrote [http://example.org notes] on the engine.<!-- hidden -->
[[File:Ada.jpg|thumb|Ada, after [[Alfred Chalon|Chalon]] and [[Babbage]] [c. 1840]]]
{| class="wikitable"
|-
| a cell || {{another}}
|}
== Early life ==
* She studied [[mathematics]] &amp; music.
<math>x^2</math>
== References ==
Anything after the back matter is dropped.
[[Category:Mathematicians]]
"""


def test_prose_keeps_the_words_and_drops_the_markup():
  text = wikitext.prose(MARKUP)
  assert text == (
    "Ada was a mathematical writer born\nin London. She wrote notes on the engine.\n\n"
    "Early life\n\nShe studied mathematics & music."
  )


def test_strip_nested_removes_nested_and_unclosed_spans():
  assert wikitext.strip_nested("a{{b{{c}}d}}e{{f", "{{", "}}") == "ae"
  assert wikitext.strip_nested("no spans}}", "{{", "}}") == "no spans}}"


def test_articles_skip_redirects_and_other_namespaces(tmp_path):
  found = list(wikitext.articles(write_wiki_dump(tmp_path / "dump.xml")))
  assert [t for t, _ in found] == [f"Article {i}" for i in range(6)]
  assert found[2][1].startswith("Article 2 is about subject 2. Words and more")


def test_make_corpus_splits_by_article_and_round_trips_the_text(tmp_path):
  dump = write_wiki_dump(tmp_path / "dump.xml")
  corpus = language.make_corpus(tmp_path / "c", vocab_size=300, heldout_every=3, dump=dump)
  splits = corpus.manifest["splits"]
  assert splits["heldout"]["articles"] == ["Article 2", "Article 5"]
  assert splits["train"]["articles"] == ["Article 0", "Article 1", "Article 3", "Article 4"]
  tok = tokens.tokenizer(corpus.tokenizer)
  assert tok.get_vocab_size() == 300 and tok.token_to_id(language.EOS) == 0
  held = tokens.read_tokens(corpus.heldout)
  assert held.fingerprint == tokens.fingerprint(tok) == corpus.manifest["tokenizer_fingerprint"]
  assert len(held) == splits["heldout"]["tokens"]
  first = list(held[: list(held).index(0)])
  assert tok.decode(first) == dict(wikitext.articles(dump))["Article 2"]
  with open(os.path.join(corpus.directory, "corpus.json")) as f:
    assert json.load(f)["settings"] == {"vocab_size": 300, "heldout_every": 3}


def test_make_corpus_returns_a_made_corpus_and_refuses_other_settings_or_files(tmp_path):
  dump = write_wiki_dump(tmp_path / "dump.xml")
  made = language.make_corpus(tmp_path / "c", vocab_size=300, heldout_every=3, dump=dump)
  mtime = os.path.getmtime(made.train)
  again = language.make_corpus(tmp_path / "c", vocab_size=300, heldout_every=3, dump=dump)
  assert again.manifest == made.manifest and os.path.getmtime(again.train) == mtime
  with pytest.raises(tokens.CorpusError, match="made with .*'vocab_size': 300.*choose another"):
    language.make_corpus(tmp_path / "c", vocab_size=400, heldout_every=3, dump=dump)
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "notes.txt").write_text("mine")
  with pytest.raises(tokens.CorpusError, match="not a corpus made by .*missing tokenizer.json"):
    language.make_corpus(tmp_path / "other", vocab_size=300, heldout_every=3, dump=dump)
  assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_the_shipped_wikipedia_articles_are_prose():
  found = list(wikitext.articles(language.wikipedia_dump()))
  assert len(found) == 106 and found[0][0] == "Anarchism"
  text = "\n".join(t for _, t in found)
  assert 2_500_000 < len(text) < 3_100_000
  for mark in ("{{", "}}", "[[", "]]", "<ref", "&lt;", "thumb|"):
    assert mark not in text, mark
