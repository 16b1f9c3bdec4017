"""Byte-level language-model data: document packing, grain training batches, fixed eval batches.

Tokens are raw bytes (vocabulary 256) and byte 0 is BOS, which the loaders in
:mod:`jaxlab.data.corpus` guarantee never occurs in a document. :func:`pack_documents` writes
``[BOS] + doc`` for every document into one stream and cuts it into rows of ``seq_len + 1`` tokens,
so each row gives ``seq_len`` next-token predictions. Beside the tokens it keeps ``segment_ids``
(documents within a row numbered from 1, for attention masking) and ``positions`` (offset from the
document's BOS, for position embeddings). A document carried over from the previous row gets
segment id 1 and positions restarting at 0 at the row start, so positions stay below
``seq_len + 1`` and a row never refers to context it cannot see. Since both follow from the row's
tokens alone, :func:`pack_tokens` keeps only the tokens and the batches derive the rest row by row.
:func:`unigram_entropy_bits` is the floor a model must beat: a model that ignores context scores
exactly that many bits per byte.
"""

from __future__ import annotations

import grain
import numpy as np
from jaxtyping import Int, UInt8

from jaxlab.core.errors import ConfigError
from jaxlab.data.batching import index_batch_dataset
from jaxlab.data.corpus import KJV_VALIDATION_BOOKS, load_documents, load_kjv_books
from jaxlab.data.shards import pack_rows

__all__ = [
    "BOS",
    "KJV_VALIDATION_BOOKS",
    "VOCAB_SIZE",
    "eval_batches",
    "load_documents",
    "load_kjv_books",
    "pack_documents",
    "pack_tokens",
    "text_dataset",
    "unigram_entropy_bits",
    "unpack_row",
]

VOCAB_SIZE = 256
BOS = 0

Rows = dict[str, Int[np.ndarray, "N T1"]]
Batch = dict[str, Int[np.ndarray, "B T"]]


def pack_documents(docs: list[bytes], seq_len: int) -> Rows:
    """Packs documents into rows of ``seq_len + 1`` byte tokens, each document preceded by BOS.

    Args:
        docs: Documents as bytes, none containing byte 0.
        seq_len: Model context length; rows hold one extra token for the shifted targets.

    Returns:
        ``tokens``, ``segment_ids`` and ``positions``, each int32 of shape ``(N, seq_len + 1)``;
        the tail of the stream that does not fill a row is dropped.

    Raises:
        ConfigError: If ``seq_len`` is not positive, a document contains byte 0, or the documents
            do not fill one row.
    """
    # The same segment ids and positions as token shards' rows (one rule for both sources).
    return pack_rows(pack_tokens(docs, seq_len), BOS)


def pack_tokens(docs: list[bytes], seq_len: int) -> UInt8[np.ndarray, "N T1"]:
    """The ``tokens`` of :func:`pack_documents` alone, as bytes: ``(N, seq_len + 1)`` uint8.

    A row's segment ids and positions follow from its tokens (:func:`jaxlab.data.shards.pack_rows`),
    so :func:`text_dataset` and :func:`eval_batches` also take ``{"tokens": pack_tokens(...)}`` and
    derive them batch by batch, holding one byte per token instead of twelve.

    Raises:
        ConfigError: as :func:`pack_documents`.
    """
    if seq_len < 1:
        raise ConfigError(f"seq_len must be positive, got {seq_len}")
    width = seq_len + 1
    for i, doc in enumerate(docs):
        if bytes([BOS]) in doc:
            raise ConfigError(f"document {i} contains byte {BOS} (BOS); remove it from the text")
    stream = np.frombuffer(b"".join(b"\x00" + d for d in docs), np.uint8)
    num_rows = len(stream) // width
    if num_rows == 0:
        raise ConfigError(
            f"{len(stream)} tokens ({len(docs)} documents) do not fill one row of {width}"
        )
    return stream[: num_rows * width].reshape(num_rows, width)


def unpack_row(tokens: Int[np.ndarray, " T1"]) -> list[bytes]:
    """Splits one row of tokens back into byte strings at its BOS tokens (for inspection).

    Args:
        tokens: One row of byte tokens.

    Returns:
        The pieces between BOS tokens; the first is the carried-over document's tail (maybe empty).
    """
    return bytes(np.asarray(tokens, np.uint8)).split(bytes([BOS]))


def _shift(rows: Rows, index: np.ndarray) -> Batch:
    if "segment_ids" in rows:
        picked = {name: rows[name][index] for name in ("tokens", "segment_ids", "positions")}
    else:  # only the tokens (pack_tokens): the rest follows from each row
        picked = pack_rows(rows["tokens"][index], BOS)
    tokens = picked["tokens"]
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "segment_ids": picked["segment_ids"][:, :-1],
        "positions": picked["positions"][:, :-1],
    }


def text_dataset(
    rows: Rows,
    *,
    batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_epochs: int | None = None,
) -> grain.IterDataset:
    """A grain dataset of shifted next-token batches over packed rows.

    Args:
        rows: Output of :func:`pack_documents`, or ``{"tokens": pack_tokens(...)}``.
        batch_size: Rows per batch; each epoch drops its last partial batch.
        seed: Shuffle seed; every epoch is reshuffled deterministically from it.
        shuffle: Whether to shuffle rows.
        num_epochs: Number of passes over the rows; ``None`` repeats forever.

    Returns:
        A ``grain.IterDataset`` of dicts ``inputs``, ``targets``, ``segment_ids``, ``positions``,
        each int32 ``(batch_size, seq_len)``. ``iter()`` of it supports ``get_state``/``set_state``
        and ``grain.checkpoint.CheckpointSave``/``CheckpointRestore``.
    """
    return index_batch_dataset(
        len(rows["tokens"]),
        lambda index: _shift(rows, index),
        batch_size=batch_size,
        seed=seed,
        shuffle=shuffle,
        num_epochs=num_epochs,
    )


def eval_batches(rows: Rows, *, batch_size: int, num_batches: int) -> list[Batch]:
    """Fixed validation batches: ``num_batches * batch_size`` rows evenly strided over ``rows``.

    Striding rather than taking the first rows means a small evaluation still covers every
    validation document instead of only the first one.

    Args:
        rows: Output of :func:`pack_documents` on the validation documents, or
            ``{"tokens": pack_tokens(...)}``.
        batch_size: Rows per batch.
        num_batches: Number of batches.

    Returns:
        A list of ``num_batches`` batches shaped like :func:`text_dataset`'s, in row order.

    Raises:
        ConfigError: If there are fewer rows than requested.
    """
    total = len(rows["tokens"])
    want = batch_size * num_batches
    if want < 1 or want > total:
        raise ConfigError(
            f"eval needs {num_batches} batches of {batch_size} rows but there are {total} rows"
        )
    index = (np.arange(want, dtype=np.int64) * total) // want
    return [_shift(rows, chunk) for chunk in index.reshape(num_batches, batch_size)]


def unigram_entropy_bits(docs: list[bytes]) -> float:
    """Empirical byte-unigram entropy of the documents, in bits per byte (BOS not counted).

    Args:
        docs: Documents as bytes.

    Returns:
        ``-sum(p log2 p)`` over the byte frequencies of all documents together.
    """
    counts = np.zeros(VOCAB_SIZE, np.int64)
    for doc in docs:
        counts += np.bincount(np.frombuffer(doc, np.uint8), minlength=VOCAB_SIZE)
    if counts.sum() == 0:
        raise ConfigError("cannot compute the entropy of an empty corpus")
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())
