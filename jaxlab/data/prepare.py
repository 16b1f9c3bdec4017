"""``python -m jaxlab.data.prepare``: tokenize a corpus into checksummed shards of token ids.

::

    python -m jaxlab.data.prepare --tokenizer=gpt2 --input=hf:Skylion007/openwebtext --output=DIR
    python -m jaxlab.data.prepare --tokenizer=runs/kjv_bpe.json --input=kjv --output=DIR

Inputs (``--input``, repeatable or comma-separated): ``kjv`` (the shipped King James Bible, one
document per book, validation = the books of :data:`jaxlab.data.corpus.KJV_VALIDATION_BOOKS`); a
text file (documents separated by two or more blank lines, as :mod:`jaxlab.data.corpus` reads
it); a JSONL file (``.jsonl`` or ``.jsonl.gz``, one document per line in ``--text_field``); a
directory (its ``*.jsonl[.gz]`` files, and its ``*.txt`` files as one document each); or
``hf:NAME[:CONFIG]``, a Hugging Face ``datasets`` dataset (imported only then). Outside the KJV, a
document goes to validation when the hash of its source and index falls below
``--validation_fraction``, so the split does not depend on the number of workers.

Work is divided into units (a file, a group of 1,000 one-document files, or a block of
``--hf_chunk_docs`` dataset rows) processed in parallel by ``--workers`` processes. Each unit
writes, per split, shards of exactly ``--shard_tokens`` ids (its last one shorter) with a BOS id
before every document, the document start offsets beside each shard, and a sidecar JSON holding
the counts, sha256 sums and the position where the next shard begins; a unit's marker in
``units/`` is written when it is complete, and ``index.json`` (:mod:`jaxlab.data.shards`) when all
are. Re-running the same command resumes: finished shards are verified against their checksums and
kept, a unit continues after its last good shard, and a damaged or missing shard is rebuilt. A
different tokenizer or settings on the same ``--output`` is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import pathlib
import queue
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from jaxlab.core.errors import ConfigError
from jaxlab.data.corpus import KJV_VALIDATION_BOOKS, _clean, _from_file, load_kjv_books
from jaxlab.data.shards import FORMAT, INDEX, SPLITS, file_sha256, token_dtype
from jaxlab.data.tokenizer import DEFAULT_BOS, load_tokenizer

__all__ = ["Unit", "main", "plan_units", "prepare"]

_FILES_PER_UNIT = 1000
_ENCODE_BATCH = 256  # documents per tokenizer call


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


def _documents(unit: Unit, text_field: str) -> Iterator[tuple[int, bytes, str | None]]:
    """``(index, document, split or None)``; None means: split by hash."""
    if unit.kind == "kjv":
        for i, (name, text) in enumerate(load_kjv_books("all")):
            yield i, text, "validation" if name in KJV_VALIDATION_BOOKS else "train"
    elif unit.kind == "text":
        for i, doc in enumerate(_from_file(pathlib.Path(unit.paths[0]))):
            yield i, doc, None
    elif unit.kind == "files":
        for i, path in enumerate(unit.paths):
            yield i, _clean(pathlib.Path(path).read_bytes()), None
    elif unit.kind == "jsonl":
        path = unit.paths[0]
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.strip():
                    record = json.loads(line)
                    if text_field not in record:
                        raise ConfigError(f"{path} line {i + 1} has no {text_field!r} field")
                    yield i, _clean(record[text_field].encode("utf-8")), None
    else:
        name, config, split, start, stop = unit.hf
        ds = _hf_dataset(name, config, split)
        if text_field not in ds.column_names:
            raise ConfigError(f"dataset {name!r} has no {text_field!r} column ({ds.column_names})")
        for lo in range(start, stop, _ENCODE_BATCH):
            texts = ds[lo : min(lo + _ENCODE_BATCH, stop)][text_field]
            for j, text in enumerate(texts):
                yield lo + j, _clean(text.encode("utf-8")), None


def _is_validation(key: str, index: int, fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(f"{key}:{index}".encode()).digest()[:8], "big")
    return h % 1_000_000 < round(fraction * 1_000_000)


def _save(path: pathlib.Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file object: np.save would append .npy to a .tmp name
        np.save(f, array)


def _write_atomic(path: pathlib.Path, write: Callable[[pathlib.Path], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


class _SplitWriter:
    """Cuts one unit's documents of one split into fixed-size shards (see module docstring)."""

    def __init__(self, out: pathlib.Path, split: str, unit_no: int, settings: dict[str, Any]):
        self.dir = out / split
        self.dir.mkdir(parents=True, exist_ok=True)
        self.split, self.stem = split, f"u{unit_no:05d}"
        self.size, self.bos = settings["shard_tokens"], settings["tokenizer"]["bos_id"]
        self.dtype = np.dtype(settings["dtype"])
        self.shards: list[dict[str, Any]] = []
        self.buffer: list[list[Any]] = []  # [doc index, ids (BOS first), offset taken, bytes]
        self.buffered = 0
        self.next_doc, self.next_offset = 0, 0  # where the next shard starts
        self._restore()

    def _paths(self, k: int) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
        base = self.dir / f"{self.stem}-{k:05d}"
        return base.with_suffix(".npy"), base.with_suffix(".docs.npy"), base.with_suffix(".json")

    def _restore(self) -> None:
        """Keeps the verified prefix of already written shards, removes everything after it."""
        for k in range(sys.maxsize):
            tokens, docs, side = self._paths(k)
            if not side.is_file():
                break
            meta = json.loads(side.read_text())
            ok = tokens.is_file() and docs.is_file()
            if not (ok and file_sha256(tokens) == meta["sha256"]):
                break
            if file_sha256(docs) != meta["docs_sha256"]:
                break
            self.shards.append(meta)
            self.next_doc, self.next_offset = meta["next_doc"], meta["next_offset"]
        for path in self.dir.glob(f"{self.stem}-*"):
            k = int(path.name.split("-")[1].split(".")[0])
            if k >= len(self.shards) or path.name.endswith(".tmp"):
                path.unlink()

    def wants(self, index: int) -> bool:
        return index >= self.next_doc

    def add(self, index: int, ids: np.ndarray, nbytes: int) -> None:
        ids = np.concatenate([[self.bos], ids]).astype(self.dtype)  # a shard's worth, compact
        offset = self.next_offset if index == self.next_doc else 0
        self.buffer.append([index, ids, offset, nbytes])
        self.buffered += len(ids) - offset
        while self.buffered >= self.size:
            self._flush(self.size)

    def finish(self) -> list[dict[str, Any]]:
        if self.buffered:
            self._flush(self.buffered)
        return self.shards

    def _flush(self, n: int) -> None:
        pieces, starts, nbytes, last = [], [], 0, None
        filled = 0
        while filled < n:
            entry = self.buffer[0]
            index, ids, offset, doc_bytes = entry
            take = min(len(ids) - offset, n - filled)
            if offset == 0:  # this piece holds the document's BOS
                starts.append(filled)
                nbytes += doc_bytes
            pieces.append(ids[offset : offset + take])
            filled += take
            entry[2] = offset + take
            last = index
            if entry[2] == len(ids):
                self.buffer.pop(0)
        self.buffered -= n
        if self.buffer:
            self.next_doc, self.next_offset = self.buffer[0][0], self.buffer[0][2]
        else:
            self.next_doc, self.next_offset = last + 1, 0
        k = len(self.shards)
        tokens_path, docs_path, side = self._paths(k)
        tokens = np.concatenate(pieces).astype(self.dtype)
        _write_atomic(tokens_path, lambda p: _save(p, tokens))
        _write_atomic(docs_path, lambda p: _save(p, np.asarray(starts, np.int64)))
        meta = {
            "file": f"{self.split}/{tokens_path.name}",
            "docs_file": f"{self.split}/{docs_path.name}",
            "tokens": int(len(tokens)),
            "documents": len(starts),
            "bytes": int(nbytes),
            "sha256": file_sha256(tokens_path),
            "docs_sha256": file_sha256(docs_path),
            "next_doc": int(self.next_doc),
            "next_offset": int(self.next_offset),
        }
        _write_atomic(side, lambda p: p.write_text(json.dumps(meta)))
        self.shards.append(meta)


def _verified(out: pathlib.Path, marker: dict[str, Any]) -> bool:
    for split in SPLITS:
        for shard in marker[split]:
            for key, sha in (("file", "sha256"), ("docs_file", "docs_sha256")):
                path = out / shard[key]
                if not path.is_file() or file_sha256(path) != shard[sha]:
                    return False
    return True


def _prepare_unit(job: tuple[int, Unit, dict[str, Any], str], progress=None) -> dict[str, Any]:
    """Tokenizes one unit into its shards (or verifies them when it is already done)."""
    unit_no, unit, settings, out_dir = job
    out = pathlib.Path(out_dir)
    progress = progress or _report
    marker_path = out / "units" / f"u{unit_no:05d}.json"
    if marker_path.is_file():
        marker = json.loads(marker_path.read_text())
        if _verified(out, marker):
            progress(marker["documents"], sum(s["tokens"] for sp in SPLITS for s in marker[sp]))
            return marker
        marker_path.unlink()  # damaged: the writers keep its good shards and rebuild the rest
    tokenizer = load_tokenizer(settings["tokenizer_spec"], settings["bos"])
    if tokenizer.identity()["sha256"] != settings["tokenizer"]["sha256"]:
        raise ConfigError(
            f"tokenizer {settings['tokenizer_spec']!r} now loads differently than when "
            f"{out} was started; use another --output"
        )
    writers = {s: _SplitWriter(out, s, unit_no, settings) for s in SPLITS}
    fraction, documents = settings["validation_fraction"], 0

    def encode(batch: list[tuple[int, bytes, str]]) -> None:
        ids = tokenizer.encode([doc for _, doc, _ in batch])
        for (index, doc, split), doc_ids in zip(batch, ids, strict=True):
            writers[split].add(index, doc_ids, len(doc))
        progress(len(batch), sum(len(i) + 1 for i in ids))

    batch: list[tuple[int, bytes, str]] = []
    for index, doc, split in _documents(unit, settings["text_field"]):
        split = split or ("validation" if _is_validation(unit.key, index, fraction) else "train")
        documents += 1
        if doc and writers[split].wants(index):
            batch.append((index, doc, split))
            if len(batch) == _ENCODE_BATCH:
                encode(batch)
                batch = []
    if batch:
        encode(batch)
    marker = {"key": unit.key, "documents": documents}
    marker.update({s: w.finish() for s, w in writers.items()})
    marker_path.parent.mkdir(exist_ok=True)
    _write_atomic(marker_path, lambda p: p.write_text(json.dumps(marker)))
    return marker


_QUEUE: Any = None


def _init_worker(q) -> None:
    global _QUEUE
    _QUEUE = q


def _report(docs: int, tokens: int) -> None:
    if _QUEUE is not None:
        _QUEUE.put((docs, tokens))


def prepare(
    tokenizer: str,
    inputs: list[str],
    output: str | pathlib.Path,
    *,
    shard_tokens: int = 1 << 26,
    validation_fraction: float = 0.01,
    workers: int = 2,
    text_field: str = "text",
    hf_split: str = "train",
    hf_chunk_docs: int = 250_000,
    bos: str = DEFAULT_BOS,
    progress: bool = True,
) -> dict[str, Any]:
    """Prepares (or resumes preparing) a shard directory; returns its index.

    Raises:
        ConfigError: bad arguments, unreadable inputs, or ``output`` holding a corpus prepared with
            another tokenizer or other settings.
    """
    from tqdm.auto import tqdm

    if shard_tokens < 1 or workers < 1 or hf_chunk_docs < 1:
        raise ConfigError("--shard_tokens, --workers and --hf_chunk_docs must be positive")
    if not 0 <= validation_fraction < 1:
        raise ConfigError(f"--validation_fraction must be in [0, 1), got {validation_fraction}")
    out = pathlib.Path(output).expanduser()
    tok = load_tokenizer(tokenizer, bos)
    units = plan_units(inputs, hf_split, hf_chunk_docs)
    settings = {
        "format": FORMAT,
        "tokenizer": tok.identity(),
        "tokenizer_spec": tokenizer,
        "bos": bos,
        "dtype": token_dtype(tok.vocab_size).name,
        "inputs": list(inputs),
        "units": [dataclasses.asdict(u) for u in units],
        "shard_tokens": shard_tokens,
        "validation_fraction": validation_fraction,
        "text_field": text_field,
    }
    settings = json.loads(json.dumps(settings))  # as read back (tuples become lists)
    out.mkdir(parents=True, exist_ok=True)
    settings_path = out / "settings.json"
    if settings_path.is_file():
        old = json.loads(settings_path.read_text())
        changed = sorted(k for k in settings.keys() | old.keys() if old.get(k) != settings.get(k))
        if changed:
            raise ConfigError(
                f"{out} holds a corpus prepared with other settings ({', '.join(changed)}); "
                "use another --output, or delete it to start again"
            )
    else:
        _write_atomic(settings_path, lambda p: p.write_text(json.dumps(settings, indent=1)))
    jobs = [(i, u, settings, str(out)) for i, u in enumerate(units)]
    # Documents are counted in advance only where that is free (the KJV, a dataset's length).
    counts = [{"kjv": 66, "hf": u.hf[4] - u.hf[3]}.get(u.kind) for u in units]
    total = None if None in counts else sum(counts)
    bar = tqdm(total=total, unit="doc", disable=None if progress else True)
    tokens_seen = [0]

    def advance(docs: int, tokens: int) -> None:
        tokens_seen[0] += tokens
        bar.update(docs)
        bar.set_postfix(tokens=f"{tokens_seen[0]:,}", refresh=False)

    with bar:
        if workers == 1 or len(jobs) == 1:
            markers = [_prepare_unit(job, advance) for job in jobs]
        else:
            ctx = mp.get_context("spawn")  # never fork a process that may hold JAX threads
            q = ctx.Queue()
            with ctx.Pool(min(workers, len(jobs)), _init_worker, (q,)) as pool:
                pending = pool.map_async(_prepare_unit, jobs, chunksize=1)
                while not pending.ready() or not q.empty():
                    try:
                        advance(*q.get(timeout=0.2))
                    except queue.Empty:
                        pass
                markers = pending.get()
    index = _index(settings, markers)
    _write_atomic(out / INDEX, lambda p: p.write_text(json.dumps(index, indent=1)))
    return index


def _index(settings: dict[str, Any], markers: list[dict[str, Any]]) -> dict[str, Any]:
    splits = {}
    for split in SPLITS:
        shards = [
            {k: v for k, v in s.items() if not k.startswith("next_")}
            for m in markers
            for s in m[split]
        ]
        splits[split] = {
            "tokens": sum(s["tokens"] for s in shards),
            "documents": sum(s["documents"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards),
            "shards": shards,
        }
    keep = ("format", "tokenizer", "tokenizer_spec", "bos", "dtype", "inputs", "shard_tokens")
    return {
        **{k: settings[k] for k in keep},
        "validation": "KJV books" if settings["inputs"] == ["kjv"] else "hash of each document",
        "validation_fraction": settings["validation_fraction"],
        "splits": splits,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="bytes | tokenizer.json | hub name")
    parser.add_argument("--input", action="append", required=True, help="kjv|FILE|DIR|hf:NAME")
    parser.add_argument("--output", required=True, help="the shard directory")
    parser.add_argument("--shard_tokens", type=int, default=1 << 26)
    parser.add_argument("--validation_fraction", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--text_field", default="text")
    parser.add_argument("--hf_split", default="train")
    parser.add_argument("--hf_chunk_docs", type=int, default=250_000)
    parser.add_argument("--bos", default=DEFAULT_BOS)
    args = parser.parse_args(argv)
    inputs = [part for spec in args.input for part in spec.split(",") if part]
    try:
        index = prepare(
            args.tokenizer,
            inputs,
            args.output,
            shard_tokens=args.shard_tokens,
            validation_fraction=args.validation_fraction,
            workers=args.workers,
            text_field=args.text_field,
            hf_split=args.hf_split,
            hf_chunk_docs=args.hf_chunk_docs,
            bos=args.bos,
        )
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tok = index["tokenizer"]
    print(f"wrote {args.output}/{INDEX}: tokenizer {tok['name']} (vocab {tok['vocab_size']})")
    for split, info in index["splits"].items():
        print(
            f"  {split}: {info['tokens']:,} tokens, {info['documents']:,} documents, "
            f"{len(info['shards'])} shards ({index['dtype']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
