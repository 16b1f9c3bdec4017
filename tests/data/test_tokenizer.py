"""Tests of the tokenizers: a byte-level BPE trained on a slice of the shipped text, the byte
tokenizer, identities, the training command and the errors of bad specs.

The BPE is checked by round trips (decoding the ids gives the text back, byte for byte), by
compression against the byte tokenizer, and by its identity (same training, same hash; another
vocabulary or a changed file, another hash).
"""

import json

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data import tokenizer as tk
from jaxlab.data.corpus import load_documents


@pytest.fixture(scope="module")
def docs():
    return load_documents("kjv", "train")[:3]


@pytest.fixture(scope="module")
def bpe(docs, tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "bpe.json"
    tk.train_bpe(docs, 400).tokenizer.save(str(path))
    return tk.load_tokenizer(str(path)), path


def test_bpe_round_trips_and_compresses(bpe, docs):
    tok, _ = bpe
    val = load_documents("kjv", "validation")[0][:20_000]  # text the BPE never saw
    ids = tok.encode([docs[0], val])
    for doc, doc_ids in zip([docs[0], val], ids, strict=True):
        assert tok.decode(doc_ids).encode() == doc
        assert doc_ids.min() >= 0 and doc_ids.max() < tok.vocab_size
        assert len(doc_ids) < 0.5 * len(doc)  # merges learnt: well under one token per byte
    assert tok.vocab_size == 400 and tok.bos_id == 0 and tok.kind == "bpe"


def test_bos_text_in_a_document_is_not_bos(bpe):
    tok, _ = bpe
    doc = b"end <|endoftext|> of text"
    (ids,) = tok.encode([doc])
    assert tok.bos_id not in ids and tok.decode(ids).encode() == doc


def test_byte_tokenizer_is_the_byte_corpus_scheme():
    tok = tk.load_tokenizer("bytes")
    (ids,) = tok.encode([b"ab\x00c"])
    np.testing.assert_array_equal(ids, [97, 98, 99])
    assert tok.vocab_size == 256 and tok.bos_id == 0 and tok.decode(ids) == "abc"


def test_identity_is_stable_and_discriminating(bpe, docs, tmp_path):
    tok, path = bpe
    again = tk.train_bpe(docs, 400)
    assert again.identity()["sha256"] == tok.identity()["sha256"]
    assert tk.train_bpe(docs, 300).identity()["sha256"] != tok.identity()["sha256"]
    assert tk.load_tokenizer("bytes").identity()["sha256"] != tok.identity()["sha256"]
    # Swap the ids of two tokens in the file: same tokens and merges, another tokenizer.
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    a, b = (next(k for k, v in vocab.items() if v == i) for i in (300, 301))
    vocab[a], vocab[b] = 301, 300
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data))
    other = tk.load_tokenizer(str(changed)).identity()
    assert other["vocab_size"] == 400 and other["sha256"] != tok.identity()["sha256"]


def test_train_command_writes_a_loadable_file(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n\n".join(f"document {i} with some words, words." for i in range(40)))
    out = tmp_path / "sub" / "tok.json"
    assert tk.main([f"--input={corpus}", "--vocab_size=300", f"--output={out}"]) == 0
    assert "BOS id 0" in capsys.readouterr().out
    assert tk.load_tokenizer(str(out)).vocab_size <= 300


@pytest.mark.parametrize(
    ("spec", "match"),
    [("missing/tok.json", "does not exist"), ("./nowhere", "does not exist")],
)
def test_bad_specs_are_one_line_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        tk.load_tokenizer(spec)


def test_not_a_tokenizer_file_and_missing_bos(tmp_path, bpe):
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    with pytest.raises(ConfigError, match="not a tokenizers JSON"):
        tk.load_tokenizer(str(junk))
    with pytest.raises(ConfigError, match="no token '<s>'"):
        tk.load_tokenizer(str(bpe[1]), bos="<s>")
    with pytest.raises(ConfigError, match="at least 257"):
        tk.train_bpe([b"abc"], 100)


def test_hub_name_offline_is_a_one_line_error(monkeypatch):
    # The GPT-2 path needs the network; offline, loading it by name must say what to do.
    def offline(name):
        raise OSError("Name or service not known\nmore")

    monkeypatch.setattr(tk, "_from_hub", offline)
    with pytest.raises(ConfigError, match="could not be loaded from the Hugging Face hub"):
        tk.load_tokenizer("gpt2")
