"""Reading a prepared corpus: shards of token ids, their index, and packed grain batches.

A corpus directory written by :mod:`jaxlab.data.prepare` holds ``index.json`` and, per split
(``train``, ``validation``), shards ``<split>/uNNNNN-KKKKK.npy`` of token ids (uint16 when the
vocabulary fits, int32 otherwise; every document preceded by the tokenizer's BOS) with their
document start offsets in ``....docs.npy``. The index records the tokenizer identity
(:meth:`jaxlab.data.tokenizer.Tokenizer.identity`), the token, document and byte counts and a sha256
per file. :class:`ShardCorpus` opens it, checks that every file of a split is there with its size,
hashes its share of them (all of them in a single process; once per file and process), and
memory-maps the shards as one token stream per split in index order.

Rows are packed exactly like the byte corpus (:func:`jaxlab.data.text.pack_documents`): row ``r``
is the stream's tokens ``[r*(T+1), (r+1)*(T+1))``, so documents run on across rows and shards;
segment ids number the documents within a row from 1 (attention masks by them) and positions count
from each BOS, restarting at 0 at the row start for a document carried over from the previous row.
With the byte tokenizer and the shipped KJV, the rows are identical to the byte corpus's. Batches
come from the same grain pipeline (:func:`jaxlab.data.batching.index_batch_dataset`: seeded
shuffle of row indices, checkpointable position), and each process gathers only its own rows of
each global batch from disk (:class:`jaxlab.core.mesh.LocalBatch`), so the global batch is the
single-process batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from jaxtyping import Int

from jaxlab.core.errors import ConfigError

__all__ = [
    "FORMAT",
    "INDEX",
    "ShardCorpus",
    "TokenStream",
    "file_sha256",
    "pack_rows",
    "shards_dir",
    "token_dtype",
]

FORMAT = "jaxlab-shards/1"
INDEX = "index.json"
SPLITS = ("train", "validation")
_PREFIX = "shards:"
_VERIFIED: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) already hashed here


def _process() -> tuple[int, int]:
    """``(process index, process count)`` of a JAX run; (0, 1) when JAX is not imported."""
    jax = sys.modules.get("jax")
    return (jax.process_index(), jax.process_count()) if jax is not None else (0, 1)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 where every id fits (V <= 65536), int32 otherwise."""
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.int32)


def file_sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def shards_dir(source: str) -> pathlib.Path | None:
    """The directory of a ``"shards:DIR"`` data source, or None for any other source."""
    if not source.startswith(_PREFIX):
        return None
    return pathlib.Path(source[len(_PREFIX) :]).expanduser()


def pack_rows(tokens_NT: Int[np.ndarray, "N T1"], bos_id: int) -> dict[str, np.ndarray]:
    """Segment ids and positions of rows cut from a BOS-separated stream (see module docstring).

    Computed in int32 and in place: beside the three int32 outputs only a boolean mask is
    allocated (a corpus of millions of tokens packs in milliseconds; fresh memory is slow to
    touch on some virtual machines).
    """
    tokens_NT = np.asarray(tokens_NT, np.int32)
    is_bos = tokens_NT == bos_id
    # Segment 1 is the row's first document; each BOS after the row start begins the next one.
    seg = np.cumsum(is_bos, axis=1, dtype=np.int32)
    seg += ~is_bos[:, :1]
    # Position = column minus the column of the last BOS at or before it (0 when none in the row).
    col = np.arange(tokens_NT.shape[1], dtype=np.int32)
    pos = np.where(is_bos, col, np.int32(0))
    np.maximum.accumulate(pos, axis=1, out=pos)
    np.subtract(col, pos, out=pos)
    return {"tokens": tokens_NT, "segment_ids": seg, "positions": pos}


@dataclasses.dataclass
class TokenStream:
    """One split's shards as a single stream of token ids (memory-mapped, read on demand)."""

    arrays: list[np.ndarray]

    def __post_init__(self) -> None:
        self.offsets = np.cumsum([0] + [len(a) for a in self.arrays], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the stream as int32, across shard boundaries."""
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        parts, pos = [], start
        for i in range(first, len(self.arrays)):
            if pos >= stop:
                break
            lo, hi = pos - self.offsets[i], min(stop, self.offsets[i + 1]) - self.offsets[i]
            parts.append(self.arrays[i][lo:hi])
            pos = int(self.offsets[i] + hi)
        return np.concatenate(parts).astype(np.int32)

    def rows(self, index: np.ndarray, width: int) -> np.ndarray:
        """Rows ``index`` of width ``width`` (row r is tokens ``[r*width, (r+1)*width)``)."""
        return np.stack([self.read(int(r) * width, (int(r) + 1) * width) for r in index])


class ShardCorpus:
    """A prepared corpus directory: its index, tokenizer identity and per-split token streams.

    Args:
        directory: the ``--output`` of :mod:`jaxlab.data.prepare`.

    Raises:
        ConfigError: no index (never prepared, or preparation unfinished), an index of another
            format, or (when a split is opened) a missing or damaged shard.
    """

    def __init__(self, directory: str | pathlib.Path):
        self.directory = pathlib.Path(directory).expanduser()
        path = self.directory / INDEX
        if not path.is_file():
            raise ConfigError(
                f"{self.directory} holds no prepared corpus ({INDEX} missing): run python -m "
                f"jaxlab.data.prepare --output={self.directory} ... (re-run it if interrupted)"
            )
        try:
            self.index: dict[str, Any] = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path} is damaged ({e}); re-run jaxlab.data.prepare") from None
        if self.index.get("format") != FORMAT:
            raise ConfigError(f"{path} is not a {FORMAT} index (format {self.index.get('format')})")
        self.tokenizer: dict[str, Any] = self.index["tokenizer"]
        self.vocab_size = int(self.tokenizer["vocab_size"])
        self.bos_id = int(self.tokenizer["bos_id"])
        self.dtype = np.dtype(self.index["dtype"])
        self._streams: dict[str, TokenStream] = {}

    def __repr__(self) -> str:
        return f"ShardCorpus({str(self.directory)!r}, tokenizer={self.tokenizer['name']!r})"

    def split_info(self, split: str) -> dict[str, Any]:
        if split not in self.index["splits"]:
            raise ConfigError(f"unknown split {split!r}; {self.directory} has {SPLITS}")
        return self.index["splits"][split]

    def bytes_per_token(self) -> float:
        """Document bytes per token over both splits (BOS tokens counted, as the loss counts them);
        1 for the byte tokenizer, whose tokens are the bytes by definition."""
        if self.tokenizer["kind"] == "bytes":
            return 1.0
        splits = self.index["splits"].values()
        return sum(s["bytes"] for s in splits) / max(sum(s["tokens"] for s in splits), 1)

    def check_tokenizer(self, identity: dict[str, Any]) -> None:
        """Raises a one-line ConfigError when ``identity`` is not the shards' tokenizer."""
        mine = self.tokenizer
        if identity["sha256"] != mine["sha256"]:
            raise ConfigError(
                f"tokenizer {identity['name']!r} ({identity['sha256'][:12]}, vocab "
                f"{identity['vocab_size']}) is not the one {self.directory} was prepared with "
                f"({mine['name']!r}, {mine['sha256'][:12]}, vocab {mine['vocab_size']}); "
                "use that tokenizer or prepare the corpus again"
            )

    def check_tokenizer_spec(self, spec: str) -> None:
        """Checks the tokenizer ``spec`` names (see :func:`~jaxlab.data.tokenizer.load_tokenizer`).

        The hub name the shards were prepared with (``gpt2``) is accepted by its name, without
        loading it (training hosts may be offline); a file or any other name must load and hash
        the same as the shards' tokenizer.
        """
        from jaxlab.data.tokenizer import DEFAULT_BOS, load_tokenizer

        recorded = self.tokenizer["name"]
        if spec == recorded and not pathlib.Path(spec).expanduser().exists():
            return
        self.check_tokenizer(load_tokenizer(spec, self.index.get("bos", DEFAULT_BOS)).identity())

    def stream(self, split: str) -> TokenStream:
        """The split's token stream, its shards checked first: every file's presence and size,
        and the sha256 of this process's share of them (shard i on process i mod P), so that a
        pod's hosts together hash each file once instead of each host hashing the whole corpus."""
        if split not in self._streams:
            shards = self.split_info(split)["shards"]
            if not shards:
                raise ConfigError(
                    f"{self.directory} has no {split} documents; prepare it with a larger "
                    "--validation_fraction (or more documents)"
                )
            rank, count = _process()
            mine = [dict(s, hash=i % count == rank) for i, s in enumerate(shards)]
            with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
                list(pool.map(self._check_shard, mine))
            self._streams[split] = TokenStream(
                [np.load(self.directory / s["file"], mmap_mode="r") for s in shards]
            )
        return self._streams[split]

    def _check_shard(self, shard: dict[str, Any]) -> None:
        for key, sha_key in (("file", "sha256"), ("docs_file", "docs_sha256")):
            path = self.directory / shard[key]
            again = "re-run python -m jaxlab.data.prepare with the same arguments to rebuild it"
            if not path.is_file():
                raise ConfigError(f"shard {path} listed in {INDEX} is missing; {again}")
            stat = path.stat()
            if key == "file" and stat.st_size < shard["tokens"] * self.dtype.itemsize:
                raise ConfigError(f"shard {path} is truncated; {again}")
            stamp = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
            if stamp in _VERIFIED or not shard["hash"]:
                continue
            if file_sha256(path) != shard[sha_key]:
                raise ConfigError(f"shard {path} is damaged (sha256 differs from {INDEX}); {again}")
            _VERIFIED.add(stamp)

    def num_rows(self, split: str, seq_len: int) -> int:
        return len(self.stream(split)) // (seq_len + 1)

    def gather(self, split: str, seq_len: int, index: np.ndarray) -> dict[str, np.ndarray]:
        """Shifted next-token fields of rows ``index`` (``inputs``/``targets``/... ``(n, T)``)."""
        rows = pack_rows(self.stream(split).rows(index, seq_len + 1), self.bos_id)
        return {
            "inputs": rows["tokens"][:, :-1],
            "targets": rows["tokens"][:, 1:],
            "segment_ids": rows["segment_ids"][:, :-1],
            "positions": rows["positions"][:, :-1],
        }

    def dataset(self, seq_len: int, *, batch_size: int, seed: int, shuffle: bool = True):
        """A grain dataset of the training split's batches; each process reads only its rows."""
        # Deferred: grain and JAX are heavy, and preparation's worker processes import this file.
        from jaxlab.core.mesh import LocalBatch, process_slice
        from jaxlab.data.batching import index_batch_dataset

        def gather(index: np.ndarray) -> LocalBatch:
            return LocalBatch(self.gather("train", seq_len, index[process_slice(len(index))]))

        rows = self.num_rows("train", seq_len)
        return index_batch_dataset(rows, gather, batch_size=batch_size, seed=seed, shuffle=shuffle)

    def eval_batches(self, seq_len: int, *, batch_size: int, num_batches: int) -> list:
        """Fixed validation batches strided over the rows, as :func:`jaxlab.data.text.eval_batches`
        (this process's rows of each)."""
        from jaxlab.core.mesh import LocalBatch, process_slice

        total = self.num_rows("validation", seq_len)
        want = batch_size * num_batches
        if want < 1 or want > total:
            raise ConfigError(
                f"eval needs {num_batches} batches of {batch_size} rows but the validation split "
                f"of {self.directory} has {total} rows of {seq_len + 1} tokens"
            )
        index = (np.arange(want, dtype=np.int64) * total) // want
        return [
            LocalBatch(self.gather("validation", seq_len, chunk[process_slice(batch_size)]))
            for chunk in index.reshape(num_batches, batch_size)
        ]

    def unigram_entropy_bits(self, split: str = "validation") -> float:
        """Token-unigram entropy of a split in bits per token (BOS not counted), the floor a model
        that ignores context reaches; equals :func:`jaxlab.data.text.unigram_entropy_bits` for
        byte shards."""
        counts = np.zeros(self.vocab_size, np.int64)
        for shard in self.stream(split).arrays:
            for lo in range(0, len(shard), 1 << 24):
                counts += np.bincount(shard[lo : lo + (1 << 24)], minlength=self.vocab_size)
        counts[self.bos_id] = 0
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log2(p)).sum())
