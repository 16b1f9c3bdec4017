"""``python -m jaxlab.data.prepare``: tokenize a corpus into checksummed shards of token ids.

::

    python -m jaxlab.data.prepare --tokenizer=gpt2 --input=hf:Skylion007/openwebtext --output=DIR
    python -m jaxlab.data.prepare --tokenizer=runs/kjv_bpe.json --input=kjv --output=DIR

Inputs (``--input``, repeatable or comma-separated) and the train/validation split are read by
:mod:`jaxlab.data.sources` (shared with the tokenizer trainer): ``kjv``, text files, JSONL files,
directories of them, or ``hf:NAME[:CONFIG]``; outside the KJV a document goes to validation when
the hash of its source and index falls below ``--validation_fraction``.

Work is divided into units (a file, a group of 1,000 one-document files, or a block of
``--hf_chunk_docs`` dataset rows) processed in parallel by ``--workers`` processes. Each unit
writes, per split, shards of exactly ``--shard_tokens`` ids (its last one shorter) with a BOS id
before every document, the document start offsets beside each shard, and a sidecar JSON holding
the counts, sha256 sums and the position where the next shard begins; a unit's marker in
``units/`` is written when it is complete, and ``index.json`` (:mod:`jaxlab.data.shards`) when all
are. Re-running the same command resumes: finished shards are verified against their checksums and
kept, a unit continues after its last good shard, and a damaged or missing shard, sidecar or unit
marker is rebuilt. A different tokenizer or settings on the same ``--output`` is refused once a
shard has been written there; before that (a first attempt that failed on its input) the new
settings replace the old. Bad input (binary or non-UTF-8 files, lines that are not JSON, a missing
or null text field, inputs with no document) is a one-line error naming the file and line; Ctrl-C
and a full disk end in one line too, and the same command resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import multiprocessing as mp
import os
import pathlib
import queue
import shutil
import signal
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxlab.core.errors import ConfigError
from jaxlab.data.shards import FORMAT, INDEX, SPLITS, file_sha256, token_dtype
from jaxlab.data.sources import Unit, document_stream, is_validation, plan_units
from jaxlab.data.tokenizer import DEFAULT_BOS, load_tokenizer

__all__ = ["main", "prepare"]

_ENCODE_BATCH = 256  # documents per tokenizer call


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
            try:
                meta = json.loads(side.read_text())
            except ValueError:  # a damaged sidecar: rebuild from this shard on
                break
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


def _verified(out: pathlib.Path, marker: Any) -> bool:
    if not isinstance(marker, dict) or not isinstance(marker.get("documents"), int):
        return False
    if any(not isinstance(marker.get(s), list) for s in SPLITS):
        return False
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
        try:
            marker = json.loads(marker_path.read_text())
        except ValueError:
            marker = None  # damaged: rebuilt below
        if marker is not None and _verified(out, marker):
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
    for index, doc, split in document_stream(unit, settings["text_field"]):
        split = split or ("validation" if is_validation(unit.key, index, fraction) else "train")
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
    # Ctrl-C reaches the whole process group: the parent reports it once and stops the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output {out} is a file; pass a directory (new or to resume)")
    out.mkdir(parents=True, exist_ok=True)
    _claim(out, settings)
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
    if index["splits"]["train"]["documents"] == 0:
        found = sum(m["documents"] for m in markers)
        raise ConfigError(
            f"the inputs {', '.join(inputs)} hold {found} non-empty document(s) and none for "
            "training; pass text (or lower --validation_fraction)"
        )
    _write_atomic(out / INDEX, lambda p: p.write_text(json.dumps(index, indent=1)))
    return index


def _has_shards(out: pathlib.Path) -> bool:
    return any(next((out / split).glob("*.npy"), None) for split in SPLITS)


def _claim(out: pathlib.Path, settings: dict[str, Any]) -> None:
    """Records ``settings`` in ``out``, or refuses an ``out`` holding shards made otherwise.

    A directory with no shard yet holds nothing to keep (a first attempt that failed on its
    input, or was stopped at once): the new settings replace the old, and its unit markers go.
    """
    settings_path = out / "settings.json"
    if settings_path.is_file():
        try:
            old = json.loads(settings_path.read_text())
        except ValueError:
            old = {"settings.json": "damaged"}
        changed = sorted(k for k in settings.keys() | old.keys() if old.get(k) != settings.get(k))
        if not changed:
            return
        if _has_shards(out):
            raise ConfigError(
                f"{out} holds a corpus prepared with other settings ({', '.join(changed)}); "
                "use another --output, or delete it to start again"
            )
        for marker in (out / "units").glob("*.json"):
            marker.unlink()
    _write_atomic(settings_path, lambda p: p.write_text(json.dumps(settings, indent=1)))


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
    except KeyboardInterrupt:
        print(f"interrupted: re-run the same command to resume {args.output}", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        out = pathlib.Path(args.output).expanduser()
        free = shutil.disk_usage(out if out.exists() else out.parent).free / 2**20
        print(
            f"error: no space left on the device of {out} ({free:.0f} MiB free); free some and "
            "re-run the same command to resume",
            file=sys.stderr,
        )
        return 1
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
