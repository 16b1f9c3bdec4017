"""Tests of the byte-level text pipeline: corpus splits, packing, grain batches and checkpoints.

Packing is checked on a hand-made example whose segment ids and positions are written out, and by
round-tripping the shipped corpus; the iterator is checked for determinism, per-epoch reshuffling
and an exact orbax restore; the entropy floor is compared with ``scipy.stats.entropy``.
"""

import sys

import grain
import numpy as np
import orbax.checkpoint as ocp
import pytest
import scipy.stats

from jaxlab.core.errors import ConfigError
from jaxlab.data import text


@pytest.fixture(scope="module")
def kjv_train():
    return text.load_documents("kjv", "train")


@pytest.fixture(scope="module")
def small_rows(kjv_train):
    # The last three training books: about 2,000 rows of 33 tokens.
    return text.pack_documents(kjv_train[-3:], seq_len=32)


def test_hand_made_packing():
    rows = text.pack_documents([b"abcde", b"", b"xy", b"pqrstu"], seq_len=4)
    # Stream: BOS a b c d e BOS BOS x y BOS p q r s t u  (17 tokens) -> 3 rows of 5, 2 dropped.
    np.testing.assert_array_equal(
        rows["tokens"], [[0, 97, 98, 99, 100], [101, 0, 0, 120, 121], [0, 112, 113, 114, 115]]
    )
    np.testing.assert_array_equal(rows["segment_ids"], [[1, 1, 1, 1, 1], [1, 2, 3, 3, 3], [1] * 5])
    # Row 1 starts inside "abcde": its positions restart at 0 at the row start.
    np.testing.assert_array_equal(
        rows["positions"], [[0, 1, 2, 3, 4], [0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    )
    for array in rows.values():
        assert array.dtype == np.int32


def test_packing_refuses_a_document_holding_bos():
    # A stray byte 0 would start a segment inside the document: refused, naming the document.
    with pytest.raises(ConfigError, match="document 1 contains byte 0"):
        text.pack_documents([b"abcde", b"xy\x00z"], seq_len=2)
    with pytest.raises(ConfigError, match="do not fill one row"):
        text.pack_documents([b"ab"], seq_len=8)


def test_packing_round_trips_the_corpus(kjv_train):
    docs = kjv_train[:5]
    rows = text.pack_documents(docs, seq_len=127)
    assert rows["tokens"].shape[1] == 128
    stream = bytes(rows["tokens"].astype(np.uint8).ravel())
    assert stream == b"".join(b"\x00" + d for d in docs)[: len(stream)]
    without_bos = stream.replace(b"\x00", b"")
    assert without_bos == b"".join(docs)[: len(without_bos)]
    # Positions count from each BOS; segment ids step by one at each BOS after the row start.
    tokens, seg, pos = rows["tokens"], rows["segment_ids"], rows["positions"]
    assert np.all(pos[tokens == text.BOS] == 0)
    assert np.all(pos < 128) and np.all(pos[:, 0] == 0) and np.all(seg[:, 0] == 1)
    np.testing.assert_array_equal(np.diff(seg, axis=1), (tokens[:, 1:] == text.BOS).astype(int))
    assert text.unpack_row(tokens[0])[1] == docs[0][:127]


def test_bos_never_in_corpus_and_books_split(kjv_train):
    books = text.load_kjv_books("all")
    assert len(books) == 66 and books[0][0] == "Genesis" and books[-1][0] == "Revelation"
    assert all(b"\x00" not in doc for _, doc in books)
    val_names = [name for name, _ in text.load_kjv_books("validation")]
    train_names = [name for name, _ in text.load_kjv_books("train")]
    assert tuple(val_names) == text.KJV_VALIDATION_BOOKS
    assert val_names == [name for i, (name, _) in enumerate(books) if i % 12 == 3]
    assert not set(val_names) & set(train_names) and len(val_names) + len(train_names) == 66
    val = text.load_documents("kjv", "validation")
    fraction = sum(map(len, val)) / sum(len(d) for _, d in books)
    assert 0.08 < fraction < 0.10
    assert len(text.load_documents("kjv", "all")) == 66 and len(kjv_train) == 60


def test_file_and_directory_sources(tmp_path):
    docs = [f"document {i}\nwith one blank line\n\ninside".encode() for i in range(30)]
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\n\n\n".join(docs).replace(b"document 3\n", b"document\x003\n"))
    everything = text.load_documents(str(path), "all")
    assert len(everything) == 30 and everything[0] == docs[0]
    assert all(b"\x00" not in d for d in everything)
    train = text.load_documents(str(path), "train")
    val = text.load_documents(str(path), "validation")
    assert val and train and len(train) + len(val) == 30 and not set(train) & set(val)
    assert text.load_documents(str(path), "validation") == val  # deterministic

    folder = tmp_path / "docs"
    folder.mkdir()
    for i, doc in enumerate(docs[:4]):
        (folder / f"{i:02d}.txt").write_bytes(doc)
    assert text.load_documents(str(folder), "all") == docs[:4]
    assert len(text.load_documents(str(folder), "validation")) >= 1


@pytest.mark.parametrize(
    ("source", "split"),
    [("no/such/file.txt", "train"), ("gutenberg", "train"), ("kjv", "test")],
)
def test_bad_source_raises_config_error(source, split):
    with pytest.raises(ConfigError):
        text.load_documents(source, split)


def test_hf_source_without_datasets_raises_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(ConfigError, match="datasets"):
        text.load_documents("hf:wikitext:wikitext-2-raw-v1", "train")


def test_single_document_file_has_no_validation(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("just one document\n")
    assert text.load_documents(str(path), "train") == [b"just one document"]
    with pytest.raises(ConfigError, match="blank lines"):
        text.load_documents(str(path), "validation")


def _first(ds, n):
    it = iter(ds)
    return [next(it) for _ in range(n)]


def test_batches_are_shifted_and_deterministic(small_rows):
    ds = text.text_dataset(small_rows, batch_size=4, seed=7)
    a, b = _first(ds, 5), _first(text.text_dataset(small_rows, batch_size=4, seed=7), 5)
    other = _first(text.text_dataset(small_rows, batch_size=4, seed=8), 5)
    for x, y in zip(a, b, strict=True):
        for key in ("inputs", "targets", "segment_ids", "positions"):
            assert x[key].shape == (4, 32) and x[key].dtype == np.int32
            np.testing.assert_array_equal(x[key], y[key])
        np.testing.assert_array_equal(x["targets"][:, :-1], x["inputs"][:, 1:])
    assert any(not np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(a, other, strict=True))


def test_rows_of_tokens_alone_give_the_same_batches(kjv_train):
    # The LM task keeps pack_tokens' bytes; each batch derives segment ids and positions. Verses
    # as documents, so that most rows hold a BOS and carry a document over.
    docs = [line for line in kjv_train[-1].split(b"\n") if line][:300]
    full = text.pack_documents(docs, seq_len=128)
    tokens = text.pack_tokens(docs, seq_len=128)
    assert tokens.dtype == np.uint8
    np.testing.assert_array_equal(tokens, full["tokens"])
    assert np.mean(np.any(tokens == text.BOS, axis=1)) > 0.5
    for a, b in zip(
        _first(text.text_dataset(full, batch_size=4, seed=5), 6),
        _first(text.text_dataset({"tokens": tokens}, batch_size=4, seed=5), 6),
        strict=True,
    ):
        assert a.keys() == b.keys()
        for name in a:
            assert b[name].dtype == np.int32 and a[name].dtype == np.int32
            np.testing.assert_array_equal(a[name], b[name])
    strided = text.eval_batches({"tokens": tokens}, batch_size=3, num_batches=2)
    for a, b in zip(text.eval_batches(full, batch_size=3, num_batches=2), strided, strict=True):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
            assert b[name].dtype == np.int32
    # And the batches are the packed rows' columns: rows (i * N) // 6, shifted by one.
    rows = (np.arange(6) * len(tokens)) // 6
    got = {name: np.concatenate([b[name] for b in strided]) for name in strided[0]}
    np.testing.assert_array_equal(got["inputs"], full["tokens"][rows, :-1])
    np.testing.assert_array_equal(got["targets"], full["tokens"][rows, 1:])
    np.testing.assert_array_equal(got["segment_ids"], full["segment_ids"][rows, :-1])
    np.testing.assert_array_equal(got["positions"], full["positions"][rows, :-1])


def test_epochs_are_permutations_reshuffled(small_rows):
    rows = _with_ids({k: v[:23] for k, v in small_rows.items()})
    batches = list(text.text_dataset(rows, batch_size=5, seed=0, num_epochs=2))
    assert len(batches) == 2 * 4  # 23 rows: 4 full batches per epoch, 3 rows dropped each epoch
    # The row index is planted in the first token, so each batch tells which rows it holds.
    order = np.concatenate([b["inputs"][:, 0] for b in batches]).reshape(2, 20)
    for epoch in order:
        assert len(set(epoch.tolist())) == 20 and epoch.max() < 23
    assert not np.array_equal(order[0], order[1])
    plain = text.text_dataset(rows, batch_size=5, seed=0, shuffle=False, num_epochs=1)
    np.testing.assert_array_equal(next(iter(plain))["inputs"][:, 0], np.arange(5))


def _with_ids(rows):
    tokens = rows["tokens"].copy()
    tokens[:, 0] = np.arange(len(tokens))
    return dict(rows, tokens=tokens)


def test_iterator_checkpoint_restores_next_batch(small_rows, tmp_path):
    it = iter(text.text_dataset(small_rows, batch_size=4, seed=3))
    for _ in range(7):
        next(it)
    state = it.get_state()
    with ocp.CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(7, args=ocp.args.Composite(data=grain.checkpoint.CheckpointSave(it)))
        manager.wait_until_finished()
        expected = [next(it) for _ in range(3)]
        restored = iter(text.text_dataset(small_rows, batch_size=4, seed=3))
        manager.restore(
            7, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(restored))
        )
    for want in expected:
        got = next(restored)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    again = iter(text.text_dataset(small_rows, batch_size=4, seed=3))
    again.set_state(state)
    np.testing.assert_array_equal(next(again)["inputs"], expected[0]["inputs"])


def test_eval_batches_are_strided_and_fixed(small_rows):
    rows = _with_ids(small_rows)
    n = len(rows["tokens"])
    batches = text.eval_batches(rows, batch_size=3, num_batches=2)
    ids = np.concatenate([b["inputs"][:, 0] for b in batches])
    np.testing.assert_array_equal(ids, (np.arange(6) * n) // 6)
    assert ids[-1] > n // 2  # spread over the rows, not just the first six
    again = text.eval_batches(rows, batch_size=3, num_batches=2)
    np.testing.assert_array_equal(again[1]["targets"], batches[1]["targets"])
    with pytest.raises(ConfigError):
        text.eval_batches(rows, batch_size=n, num_batches=2)


def test_unigram_entropy_matches_scipy(kjv_train):
    docs = kjv_train[:10]
    counts = np.bincount(np.frombuffer(b"".join(docs), np.uint8), minlength=256)
    expected = scipy.stats.entropy(counts, base=2)
    assert text.unigram_entropy_bits(docs) == pytest.approx(expected, rel=1e-12)
    assert 4.0 < expected < 5.0  # English text: about 4.4 bits per byte
    assert text.unigram_entropy_bits([b"abab", b"ab"]) == pytest.approx(1.0)
