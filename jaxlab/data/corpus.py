"""Text corpora as lists of byte documents: the shipped King James Bible, user files, Hugging Face.

Every source yields documents as ``bytes`` with the NUL byte removed (byte 0 is the language
model's BOS token, see :mod:`jaxlab.data.text`), split into train and validation *by document* so
that validation text is never seen in training. The shipped KJV is split by book: validation is
every 12th book of the canon starting at Numbers (:data:`KJV_VALIDATION_BOOKS`, 9.6% of the bytes,
spread over law, history, prophets, gospels and epistles). For user files and directories, document
``i`` is in validation when ``sha256(str(i))`` is 0 modulo 10 (about 10%, deterministic, and
appending documents does not move earlier ones). If that picks every document, the one with the
largest hash goes to training; if it picks none, the one with the smallest hash goes to
validation: a lone document is training data, and any source with two or more documents has both
splits.
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import pathlib
import re

from jaxlab.core.errors import ConfigError
from jaxlab.data.shipped import asset_path

__all__ = [
    "KJV_VALIDATION_BOOKS",
    "SPLITS",
    "clean_document",
    "load_documents",
    "load_kjv_books",
    "read_text_file",
]

SPLITS = ("train", "validation", "all")

# The books at canon index i with i % 12 == 3 (0-based), spelled out so the split is readable.
KJV_VALIDATION_BOOKS = (
    "Numbers",
    "Nehemiah",
    "Hosea",
    "Matthew",
    "1 Thessalonians",
    "3 John",
)

# Documents in a plain text file are separated by two or more empty (or whitespace-only) lines.
_DOC_SEPARATOR = re.compile(rb"\r?\n(?:[ \t]*\r?\n){2,}")


@functools.lru_cache(maxsize=1)
def _kjv_books() -> tuple[tuple[str, bytes], ...]:
    payload = lzma.decompress(asset_path("kjv.json.xz").read_bytes())
    return tuple((b["name"], b["text"].encode("ascii")) for b in json.loads(payload)["books"])


def load_kjv_books(split: str = "all") -> list[tuple[str, bytes]]:
    """Returns the shipped King James Bible as ``(book name, text)`` pairs in canon order.

    Args:
        split: ``"train"``, ``"validation"`` (the books in :data:`KJV_VALIDATION_BOOKS`) or
            ``"all"`` (66 books).

    Returns:
        The books of that split.
    """
    _check_split(split)
    books = _kjv_books()
    if split == "all":
        return list(books)
    want_val = split == "validation"
    return [book for book in books if (book[0] in KJV_VALIDATION_BOOKS) == want_val]


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")


def _hash_bucket(index: int) -> int:
    return int.from_bytes(hashlib.sha256(str(index).encode()).digest()[:8], "big")


def _split_by_hash(docs: list[bytes], split: str, origin: str) -> list[bytes]:
    """Selects a split of ``docs`` by the hash of each document's index (see module doc)."""
    _check_split(split)
    if split == "all":
        return docs
    buckets = [_hash_bucket(i) for i in range(len(docs))]
    is_val = [b % 10 == 0 for b in buckets]
    # Keep both splits non-empty whenever possible; a lone document is training data.
    if all(is_val):
        is_val[buckets.index(max(buckets))] = False
    if not any(is_val) and len(docs) >= 2:
        is_val[buckets.index(min(buckets))] = True
    chosen = [d for d, v in zip(docs, is_val, strict=True) if v == (split == "validation")]
    if not chosen:
        raise ConfigError(
            f"{origin} holds {len(docs)} document(s), none for split {split!r}; separate documents "
            "by two blank lines (or use one file per document), or use split='all'"
        )
    return chosen


def clean_document(doc: bytes) -> bytes:
    """``doc`` without byte 0, which is reserved for BOS (so document boundaries stay
    unambiguous); every source of documents passes its text through it."""
    return doc.replace(b"\x00", b"")


def read_text_file(path: pathlib.Path) -> list[bytes]:
    """The cleaned, non-empty documents of one text file, where two or more empty lines
    separate documents."""
    docs = [clean_document(d).strip(b"\r\n") for d in _DOC_SEPARATOR.split(path.read_bytes())]
    return [d for d in docs if d]


def _from_directory(path: pathlib.Path) -> list[bytes]:
    files = sorted(path.glob("*.txt"))
    if not files:
        raise ConfigError(f"text directory {path} has no *.txt files")
    docs = [clean_document(f.read_bytes()) for f in files]
    return [d for d in docs if d]


def _from_hugging_face(spec: str, split: str) -> list[bytes]:
    name, _, config = spec.partition(":")
    try:
        import datasets  # optional and slow to import: only for hf: sources
    except ImportError as e:
        raise ConfigError(
            f"text source 'hf:{spec}' needs the Hugging Face `datasets` package "
            "(pip install datasets) and a network connection"
        ) from e
    ds = datasets.load_dataset(name, config or None, split=split)
    if "text" not in ds.column_names:
        raise ConfigError(f"dataset {name!r} has no 'text' column (columns: {ds.column_names})")
    docs = [clean_document(t.encode("utf-8")) for t in ds["text"]]
    return [d for d in docs if d]


def load_documents(source: str = "kjv", split: str = "train") -> list[bytes]:
    """Loads a text corpus as a list of byte documents.

    Args:
        source: ``"kjv"`` (the shipped King James Bible, one document per book); a path to a text
            file (documents separated by two or more blank lines); a path to a directory (each
            ``*.txt`` file, in sorted order, is one document); or ``"hf:NAME[:CONFIG]"`` for a
            Hugging Face dataset's ``text`` column (needs ``datasets`` and a network; ``split`` is
            passed through as the dataset's split name).
        split: ``"train"``, ``"validation"`` or ``"all"`` (see the module docstring for how
            documents are assigned).

    Returns:
        The documents, in source order, none containing byte 0.

    Raises:
        ConfigError: For an unknown source, a missing path, an unknown split, or an empty split.
    """
    if source == "kjv":
        return [text for _, text in load_kjv_books(split)]
    if source.startswith("hf:"):
        return _from_hugging_face(source[3:], split)
    path = pathlib.Path(source).expanduser()
    if path.is_dir():
        return _split_by_hash(_from_directory(path), split, f"text directory {path}")
    if path.is_file():
        return _split_by_hash(read_text_file(path), split, f"text file {path}")
    raise ConfigError(
        f"unknown text source {source!r}: expected 'kjv', 'hf:NAME[:CONFIG]', or an existing "
        "text file or directory"
    )
