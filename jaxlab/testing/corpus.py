"""A small real BPE corpus for tests: a tokenizer trained on a slice of the shipped KJV, and the
whole shipped KJV prepared into shards with it.

Both are built offline in seconds and cached in the directory given: a second call finds the
tokenizer file and re-runs :func:`jaxlab.data.prepare.prepare`, which only verifies the finished
shards, so test modules that share a pytest base directory share the corpus.
"""

from __future__ import annotations

import pathlib

from jaxlab.data.corpus import load_documents
from jaxlab.data.prepare import prepare
from jaxlab.data.tokenizer import train_bpe

__all__ = ["kjv_bpe_corpus"]


def kjv_bpe_corpus(
    directory: str | pathlib.Path, *, vocab_size: int = 512, books: int = 6
) -> tuple[pathlib.Path, pathlib.Path]:
    """``(tokenizer.json, shard directory)``: a BPE trained on the first ``books`` training books,
    the KJV (both splits) prepared with it into shards of 2**18 tokens (documents cross shards)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = directory / f"kjv_bpe{vocab_size}.json"
    if not tokenizer.is_file():
        bpe = train_bpe(load_documents("kjv", "train")[:books], vocab_size)
        bpe.tokenizer.save(str(tokenizer))
    shards = directory / f"kjv_bpe{vocab_size}_shards"
    prepare(str(tokenizer), ["kjv"], shards, shard_tokens=1 << 18, workers=1, progress=False)
    return tokenizer, shards
