"""Tests of corpus preparation and shard reading: index, checksums, resume, packing, batches.

The reader is checked against the byte corpus, an independent implementation of the same packing:
the shipped KJV prepared with the byte tokenizer must give exactly the rows, grain batches, eval
batches and unigram entropy of :mod:`jaxlab.data.text`. The BPE corpus is checked by decoding each
document back from its shard boundaries. Resume is checked by interrupting a preparation midway
(an exception raised from inside the shard writer), damaging a shard, and comparing with an
uninterrupted preparation file by file.
"""

import json
import shutil
import sys

import jax
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.data import prepare as prep
from jaxlab.data import shards, text
from jaxlab.data.tokenizer import load_tokenizer
from jaxlab.lm.task import LMTask, fit_vocab
from jaxlab.lm.transformer import TransformerConfig
from jaxlab.testing.corpus import kjv_bpe_corpus


@pytest.fixture(scope="module")
def bpe_corpus(tmp_path_factory):
    return kjv_bpe_corpus(tmp_path_factory.getbasetemp() / "kjv_bpe")


@pytest.fixture(scope="module")
def byte_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("bytes")
    prep.prepare("bytes", ["kjv"], out, shard_tokens=300_000, workers=1, progress=False)
    return shards.ShardCorpus(out)


def test_pack_rows_by_hand():
    # Stream: BOS a b | c BOS BOS x | y BOS p q  (rows of 4, the first document runs on).
    tokens = np.array([[0, 1, 2, 3], [0, 0, 5, 6], [0, 7, 8, 9]])
    rows = shards.pack_rows(tokens[[0, 1, 2]], bos_id=0)
    np.testing.assert_array_equal(rows["segment_ids"], [[1, 1, 1, 1], [1, 2, 2, 2], [1, 1, 1, 1]])
    np.testing.assert_array_equal(rows["positions"], [[0, 1, 2, 3], [0, 0, 1, 2], [0, 1, 2, 3]])
    carried = shards.pack_rows(np.array([[4, 5, 0, 6, 7]]), bos_id=0)
    np.testing.assert_array_equal(carried["segment_ids"], [[1, 1, 2, 2, 2]])
    np.testing.assert_array_equal(carried["positions"], [[0, 1, 0, 1, 2]])


def test_token_stream_reads_across_shards():
    stream = shards.TokenStream([np.arange(0, 5), np.arange(5, 7), np.arange(7, 12)])
    np.testing.assert_array_equal(stream.read(3, 9), np.arange(3, 9))
    np.testing.assert_array_equal(stream.rows(np.array([2, 0]), 4), [[8, 9, 10, 11], [0, 1, 2, 3]])
    assert len(stream) == 12


def test_byte_shards_equal_the_byte_corpus(byte_corpus):
    docs = text.load_documents("kjv", "train")
    rows = text.pack_documents(docs, 32)
    info = byte_corpus.index["splits"]["train"]
    assert len(info["shards"]) > 5 and info["documents"] == 60 and byte_corpus.dtype == np.uint16
    assert byte_corpus.num_rows("train", 32) == len(rows["tokens"])
    ours = iter(byte_corpus.dataset(32, batch_size=8, seed=5))
    theirs = iter(text.text_dataset(rows, batch_size=8, seed=5))
    for _ in range(4):
        a, b = next(ours), next(theirs)
        assert a.keys() == b.keys()
        for key in b:
            np.testing.assert_array_equal(a[key], b[key])
            assert a[key].dtype == np.int32
    val_rows = text.pack_documents(text.load_documents("kjv", "validation"), 32)
    for a, b in zip(
        byte_corpus.eval_batches(32, batch_size=4, num_batches=3),
        text.eval_batches(val_rows, batch_size=4, num_batches=3),
        strict=True,
    ):
        np.testing.assert_array_equal(a["inputs"], b["inputs"])
    expected = text.unigram_entropy_bits(text.load_documents("kjv", "validation"))
    assert byte_corpus.unigram_entropy_bits() == pytest.approx(expected, rel=1e-12)


def test_bpe_index_checksums_and_documents(bpe_corpus):
    tok_path, out = bpe_corpus
    corpus = shards.ShardCorpus(out)
    tok = load_tokenizer(str(tok_path))
    assert corpus.tokenizer == tok.identity() and corpus.vocab_size == 512
    index = json.loads((out / "index.json").read_text())
    books = text.load_kjv_books("all")
    for split, names in (("train", 60), ("validation", 6)):
        info = index["splits"][split]
        assert info["documents"] == names
        assert info["tokens"] == sum(s["tokens"] for s in info["shards"])
        assert info["bytes"] == sum(
            len(t) for n, t in books if (n in text.KJV_VALIDATION_BOOKS) == (split == "validation")
        )
        for shard in info["shards"][:-1]:
            assert shard["tokens"] == 1 << 18  # fixed size but the last
        for shard in info["shards"]:
            assert shards.file_sha256(out / shard["file"]) == shard["sha256"]
    # Decode every validation book back from the document starts.
    stream = corpus.stream("validation")
    ids = np.concatenate(stream.arrays)
    starts = np.concatenate(
        [
            np.load(out / s["docs_file"]) + off
            for s, off in zip(index["splits"]["validation"]["shards"], stream.offsets, strict=False)
        ]
    )
    assert np.all(ids[starts] == corpus.bos_id) and (ids == corpus.bos_id).sum() == len(starts)
    pieces = np.split(ids, starts[1:])
    val_books = text.load_kjv_books("validation")
    assert [tok.decode(p[1:]).encode() for p in pieces] == [t for _, t in val_books]


def test_prepare_resumes_after_an_interruption(tmp_path, monkeypatch):
    lines = [json.dumps({"text": f"document {i}: " + "word " * (i % 17 + 3)}) for i in range(300)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:200]))
    (tmp_path / "b.jsonl").write_text("\n".join(lines[200:]))
    inputs = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    kw = dict(shard_tokens=500, validation_fraction=0.2, workers=1, progress=False)
    fresh = prep.prepare("bytes", inputs, tmp_path / "fresh", **kw)
    assert len(fresh["splits"]["train"]["shards"]) >= 6 and fresh["splits"]["validation"]["tokens"]

    flush, calls = prep._SplitWriter._flush, []

    def interrupted(self, n):
        calls.append(n)
        if len(calls) == 5:
            raise KeyboardInterrupt
        flush(self, n)

    monkeypatch.setattr(prep._SplitWriter, "_flush", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prep.prepare("bytes", inputs, tmp_path / "resumed", **kw)
    monkeypatch.setattr(prep._SplitWriter, "_flush", flush)
    assert not (tmp_path / "resumed" / "index.json").exists()
    done = sorted((tmp_path / "resumed" / "train").glob("*.npy"))
    stamps = {p.name: p.stat().st_mtime_ns for p in done}
    resumed = prep.prepare("bytes", inputs, tmp_path / "resumed", **kw)
    assert resumed["splits"] == fresh["splits"]
    for p in done:  # finished shards were verified and kept, not rewritten
        assert p.stat().st_mtime_ns == stamps[p.name]

    # A damaged shard is rebuilt by a re-run; the reader refuses it until then.
    shard = tmp_path / "resumed" / fresh["splits"]["train"]["shards"][2]["file"]
    shard.write_bytes(shard.read_bytes()[:-2] + b"\x07\x07")
    shards._VERIFIED.clear()
    with pytest.raises(ConfigError, match="damaged"):
        shards.ShardCorpus(tmp_path / "resumed").stream("train")
    assert prep.prepare("bytes", inputs, tmp_path / "resumed", **kw)["splits"] == fresh["splits"]
    shards.ShardCorpus(tmp_path / "resumed").stream("train")
    with pytest.raises(ConfigError, match="other settings"):
        prep.prepare("bytes", inputs, tmp_path / "resumed", **{**kw, "shard_tokens": 400})


def test_parallel_workers_give_the_same_shards(tmp_path):
    for name in "ab":
        docs = [f"{name} document {i}\n" + "text " * (i % 11 + 1) for i in range(60)]
        (tmp_path / f"{name}.txt").write_text("\n\n\n".join(docs))
    inputs = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    kw = dict(shard_tokens=700, validation_fraction=0.2, progress=False)
    one = prep.prepare("bytes", inputs, tmp_path / "one", workers=1, **kw)
    two = prep.prepare("bytes", inputs, tmp_path / "two", workers=2, **kw)
    assert one["splits"] == two["splits"] and len(one["splits"]["train"]["shards"]) > 2


def test_errors_are_one_line(tmp_path, bpe_corpus, monkeypatch):
    tok_path, out = bpe_corpus
    with pytest.raises(ConfigError, match="no prepared corpus"):
        shards.ShardCorpus(tmp_path)
    with pytest.raises(ConfigError, match="unknown input"):
        prep.prepare("bytes", ["no/such.txt"], tmp_path / "x", progress=False)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ConfigError, match="datasets"):
        prep.prepare("bytes", ["hf:openwebtext"], tmp_path / "y", progress=False)
    corpus = shards.ShardCorpus(out)
    with pytest.raises(ConfigError, match="is not the one"):
        corpus.check_tokenizer_spec("bytes")
    corpus.check_tokenizer_spec(str(tok_path))
    with pytest.raises(ConfigError, match="is not the one"):
        LMTask(build=None, seq_len=16, source=f"shards:{out}", tokenizer="bytes")
    small = TransformerConfig(seq_len=16, num_layers=1, d_model=16, num_heads=1, vocab_size=300)
    with pytest.raises(ConfigError, match="smaller than the vocabulary"):
        fit_vocab(small, f"shards:{out}")
    assert fit_vocab(TransformerConfig(seq_len=16), f"shards:{out}").vocab_size == 512
    assert fit_vocab(TransformerConfig(seq_len=16), "kjv").vocab_size == 256
    # A missing shard file.
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (
        copy / json.loads((copy / "index.json").read_text())["splits"]["train"]["shards"][1]["file"]
    ).unlink()
    with pytest.raises(ConfigError, match="missing"):
        LMTask(build=None, seq_len=16, source=f"shards:{copy}")


def test_each_process_reads_its_rows(bpe_corpus, monkeypatch):
    corpus = shards.ShardCorpus(bpe_corpus[1])
    whole = next(iter(corpus.dataset(16, batch_size=8, seed=1)))
    parts = []
    for rank in range(2):
        monkeypatch.setattr(jax, "process_count", lambda: 2)
        monkeypatch.setattr(jax, "process_index", lambda r=rank: r)
        parts.append(next(iter(corpus.dataset(16, batch_size=8, seed=1))))
    for key in whole:
        assert parts[0][key].shape == (4, 16)
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])
