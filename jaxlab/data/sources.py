"""The inputs of a corpus: units of work, the documents each holds, and the validation split.

One reader serves :mod:`jaxlab.data.prepare` (a corpus into shards) and the tokenizer trainer
(:mod:`jaxlab.data.tokenizer`), so a BPE is trained on exactly the documents that ``prepare`` puts
in the training split and never sees validation text. Inputs: ``kjv`` (the shipped King James Bible,
one document per book, validation = :data:`jaxlab.data.corpus.KJV_VALIDATION_BOOKS`); a text file
(documents separated by two or more blank lines, as :mod:`jaxlab.data.corpus` reads it); a JSONL
file (``.jsonl`` or ``.jsonl.gz``, one document per line in ``text_field``); a directory (its
``*.jsonl[.gz]`` files, and its ``*.txt`` files as one document each); or ``hf:NAME[:CONFIG]``, a
Hugging Face ``datasets`` dataset (imported only then). Outside the KJV, a document goes to
validation when the hash of its source and index falls below the validation fraction
(:func:`is_validation`), so the split depends neither on the number of workers nor on the reader.

Input that is not text fails in one line that names the file and line: a binary file (NUL bytes),
JSONL that is not UTF-8 or not JSON, or a record whose text field is missing, null or not a string.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import pathlib
from collections.abc import Iterator

from jaxlab.core.errors import ConfigError
from jaxlab.data.corpus import KJV_VALIDATION_BOOKS, clean_document, load_kjv_books, read_text_file

__all__ = ["Unit", "document_stream", "is_validation", "plan_units", "split_documents"]

_FILES_PER_UNIT = 1000
_HF_BATCH = 256  # dataset rows read at a time
_SNIFF_BYTES = 8192  # a NUL byte in a file's first 8 KiB marks it as binary (as git does)


@dataclasses.dataclass(frozen=True)
class Unit:
    """One piece of work: ``kind`` is kjv | text | jsonl | files | hf."""

    key: str  # stable name; the validation hash of a document is over (key, document index)
    kind: str
    paths: tuple[str, ...] = ()
    hf: tuple[str, str, str, int, int] = ("", "", "", 0, 0)  # name, config, split, start, stop


def _hf_dataset(name: str, config: str, split: str):
    try:
        import datasets  # optional and slow to import: only for hf: inputs
    except ImportError as e:
        raise ConfigError(
            f"input 'hf:{name}' needs the Hugging Face `datasets` package (pip install datasets) "
            "and the network (or its cache)"
        ) from e
    return datasets.load_dataset(name, config or None, split=split)


def plan_units(inputs: list[str], hf_split: str = "train", hf_chunk_docs: int = 250_000):
    """The units of work for the inputs, in the order their shards enter the index."""
    units: list[Unit] = []
    for spec in inputs:
        if spec == "kjv":
            units.append(Unit("kjv", "kjv"))
        elif spec.startswith("hf:"):
            name, _, config = spec[3:].partition(":")
            total = len(_hf_dataset(name, config, hf_split))
            for start in range(0, total, hf_chunk_docs):
                stop = min(start + hf_chunk_docs, total)
                units.append(Unit(spec, "hf", hf=(name, config, hf_split, start, stop)))
        else:
            path = pathlib.Path(spec).expanduser()
            if path.is_dir():
                before = len(units)
                for f in sorted(path.glob("*.jsonl")) + sorted(path.glob("*.jsonl.gz")):
                    units.append(Unit(str(f), "jsonl", (str(f),)))
                txt = [str(f) for f in sorted(path.glob("*.txt"))]
                for i in range(0, len(txt), _FILES_PER_UNIT):
                    group = tuple(txt[i : i + _FILES_PER_UNIT])
                    units.append(Unit(f"{path}/*.txt@{i}", "files", group))
                if len(units) == before:
                    raise ConfigError(f"input directory {path} has no *.txt or *.jsonl files")
            elif path.is_file():
                kind = "jsonl" if path.name.endswith((".jsonl", ".jsonl.gz")) else "text"
                units.append(Unit(str(path), kind, (str(path),)))
            else:
                raise ConfigError(
                    f"unknown input {spec!r}: expected kjv, hf:NAME[:CONFIG], or an existing "
                    "text/JSONL file or directory"
                )
    if not units:
        raise ConfigError("no input: pass --input=kjv, a file, a directory or hf:NAME")
    return units


def _text_bytes(path: str) -> bytes:
    data = pathlib.Path(path).read_bytes()
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise ConfigError(f"{path} looks binary (NUL bytes), not text; pass text or JSONL files")
    return data


def _jsonl(path: str, text_field: str) -> Iterator[tuple[int, bytes]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for i, raw in enumerate(f):
            where = f"{path} line {i + 1}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError(f"{where} is not UTF-8; re-encode the file") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{where} is not JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(record, dict) or text_field not in record:
                raise ConfigError(f"{where} has no {text_field!r} field (see --text_field)")
            text = record[text_field]
            if not isinstance(text, str):
                kind = "null" if text is None else type(text).__name__
                raise ConfigError(f"{where}: field {text_field!r} is {kind}, not a string")
            yield i, clean_document(text.encode("utf-8"))


def document_stream(unit: Unit, text_field: str) -> Iterator[tuple[int, bytes, str | None]]:
    """``(index, document, split or None)`` of one unit; None means: split by hash."""
    if unit.kind == "kjv":
        for i, (name, text) in enumerate(load_kjv_books("all")):
            yield i, text, "validation" if name in KJV_VALIDATION_BOOKS else "train"
    elif unit.kind == "text":
        _text_bytes(unit.paths[0])
        for i, doc in enumerate(read_text_file(pathlib.Path(unit.paths[0]))):
            yield i, doc, None
    elif unit.kind == "files":
        for i, path in enumerate(unit.paths):
            yield i, clean_document(_text_bytes(path)), None
    elif unit.kind == "jsonl":
        for i, doc in _jsonl(unit.paths[0], text_field):
            yield i, doc, None
    else:
        name, config, split, start, stop = unit.hf
        ds = _hf_dataset(name, config, split)
        if text_field not in ds.column_names:
            raise ConfigError(f"dataset {name!r} has no {text_field!r} column ({ds.column_names})")
        for lo in range(start, stop, _HF_BATCH):
            texts = ds[lo : min(lo + _HF_BATCH, stop)][text_field]
            for j, text in enumerate(texts):
                if not isinstance(text, str):
                    raise ConfigError(f"dataset {name!r} row {lo + j}: {text_field!r} is not text")
                yield lo + j, clean_document(text.encode("utf-8")), None


def is_validation(key: str, index: int, fraction: float) -> bool:
    """Whether document ``index`` of the unit named ``key`` is validation data."""
    h = int.from_bytes(hashlib.sha256(f"{key}:{index}".encode()).digest()[:8], "big")
    return h % 1_000_000 < round(fraction * 1_000_000)


def split_documents(
    inputs: list[str],
    split: str,
    *,
    validation_fraction: float,
    text_field: str = "text",
    hf_split: str = "train",
) -> Iterator[bytes]:
    """The non-empty documents of ``split`` (``train`` or ``validation``), as ``prepare`` splits
    them with the same ``validation_fraction``."""
    for unit in plan_units(inputs, hf_split):
        for index, doc, fixed in document_stream(unit, text_field):
            which = fixed or (
                "validation" if is_validation(unit.key, index, validation_fraction) else "train"
            )
            if doc and which == split:
                yield doc
