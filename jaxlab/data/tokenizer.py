"""Tokenizers for language-model corpora: bytes (vocabulary 256) and BPE through HF ``tokenizers``.

Every tokenizer maps a document (``bytes``) to an int array of ids that never contains its BOS id,
and has an :meth:`~Tokenizer.identity`: kind, name, vocabulary size, BOS id and a sha256 that the
shard index records (:mod:`jaxlab.data.prepare`) and readers compare, so shards are never read with
a tokenizer they were not made with. :func:`load_tokenizer` takes a spec: ``"bytes"`` (today's
byte-level scheme, BOS = byte 0, see :mod:`jaxlab.data.text`), a path to a ``tokenizer.json`` file,
or a pretrained name on the Hugging Face hub such as ``"gpt2"`` (the RMT paper's tokenizer, V =
50257, BOS = ``<|endoftext|>``; needs the network or the local HF cache, where
``HF_HUB_OFFLINE=1`` skips the network retries; not exercised by the offline tests). BPE
encoding treats special-token text inside a document as ordinary text
(``encode_special_tokens``), so a document can never fake a document boundary.

Training a byte-level BPE offline (the shipped KJV's training books by default)::

    python -m jaxlab.data.tokenizer --input=kjv --vocab_size=4096 --output=runs/kjv_bpe.json

The trainer reads its inputs as :mod:`jaxlab.data.prepare` does (:mod:`jaxlab.data.sources`: the
same file kinds, JSONL's ``--text_field``, the same ``--validation_fraction``), and trains on the
training split only, so the validation text that ``prepare`` sets aside is never seen.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from jaxlab.core.errors import ConfigError

__all__ = [
    "BPETokenizer",
    "ByteTokenizer",
    "DEFAULT_BOS",
    "Tokenizer",
    "load_tokenizer",
    "train_bpe",
]

DEFAULT_BOS = "<|endoftext|>"  # GPT-2's end-of-text token, used as BOS before each document
# A fixed text whose encoding enters a BPE tokenizer's hash, so that two tokenizers with the same
# vocabulary but different normalisation or pre-tokenisation hash differently.
_PROBE = "In the beginning, 1611: Ünïcödé — tabs\tand  spaces\n<|endoftext|> done."


class Tokenizer:
    """What corpus preparation and readers need from a tokenizer."""

    kind: str
    name: str
    vocab_size: int
    bos_id: int

    def encode(self, docs: Sequence[bytes]) -> list[np.ndarray]:
        """Token ids of each document (int64, BOS never among them, BOS not prepended)."""
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a sequence of ids (for inspection and sampling)."""
        raise NotImplementedError

    def _hash_payload(self) -> Any:
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """Kind, name, vocabulary size, BOS id and a sha256 of the vocabulary and behaviour."""
        payload = json.dumps(self._hash_payload(), sort_keys=True, ensure_ascii=True)
        return {
            "kind": self.kind,
            "name": self.name,
            "vocab_size": self.vocab_size,
            "bos_id": self.bos_id,
            "sha256": hashlib.sha256(payload.encode()).hexdigest(),
        }


class ByteTokenizer(Tokenizer):
    """Raw bytes as tokens, byte 0 as BOS (dropped from documents): :mod:`jaxlab.data.text`."""

    kind, name, vocab_size, bos_id = "bytes", "bytes", 256, 0

    def encode(self, docs: Sequence[bytes]) -> list[np.ndarray]:
        return [np.frombuffer(d.replace(b"\x00", b""), np.uint8).astype(np.int64) for d in docs]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def _hash_payload(self) -> Any:
        return {"scheme": "raw bytes, BOS = 0 removed from documents"}


class BPETokenizer(Tokenizer):
    """A Hugging Face ``tokenizers.Tokenizer`` with a BOS token from its vocabulary.

    Args:
        tokenizer: the loaded tokenizer.
        name: where it came from (file path or hub name), recorded in the identity.
        bos: the BOS token's text; it must be in the vocabulary.
    """

    kind = "bpe"

    def __init__(self, tokenizer: Any, name: str, bos: str = DEFAULT_BOS):
        self.tokenizer = tokenizer
        # Special-token text inside a document is encoded as plain text, never as BOS.
        self.tokenizer.encode_special_tokens = True
        self.name = name
        self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
        bos_id = tokenizer.token_to_id(bos)
        if bos_id is None:
            raise ConfigError(
                f"tokenizer {name!r} has no token {bos!r} to use as BOS; add it as a special "
                "token when training (python -m jaxlab.data.tokenizer adds it) or pass --bos=TOKEN"
            )
        self.bos_id = int(bos_id)
        self.bos = bos

    def encode(self, docs: Sequence[bytes]) -> list[np.ndarray]:
        texts = [d.decode("utf-8", errors="replace") for d in docs]
        out = []
        for enc in self.tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = np.asarray(enc.ids, np.int64)
            out.append(ids[ids != self.bos_id])  # cannot occur; kept as the guarantee's check
        return out

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def _hash_payload(self) -> Any:
        vocab = sorted(self.tokenizer.get_vocab(with_added_tokens=True).items())
        probe = self.tokenizer.encode(_PROBE, add_special_tokens=False).ids
        return {"vocab": vocab, "probe": probe, "bos": self.bos_id}


def load_tokenizer(spec: str, bos: str = DEFAULT_BOS) -> Tokenizer:
    """Loads a tokenizer from a spec: ``"bytes"``, a ``tokenizer.json`` path, or a hub name.

    Raises:
        ConfigError: a file that is not a tokenizer, a hub name that cannot be loaded (offline and
            not cached), or a BOS token missing from the vocabulary.
    """
    if spec in ("bytes", "byte"):
        return ByteTokenizer()
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError as e:  # a declared dependency; this only helps a broken environment
        raise ConfigError("BPE needs the `tokenizers` package (pip install tokenizers)") from e
    path = pathlib.Path(spec).expanduser()
    if path.is_file():
        try:
            return BPETokenizer(HFTokenizer.from_file(str(path)), str(path), bos)
        except Exception as e:  # noqa: BLE001 - the Rust library raises plain Exceptions
            raise ConfigError(f"{path} is not a tokenizers JSON file ({e})") from None
    if spec.endswith(".json") or spec.startswith((".", "/", "~")):
        raise ConfigError(f"tokenizer file {spec!r} does not exist")
    try:
        loaded = _from_hub(spec)
    except Exception as e:  # noqa: BLE001 - network and hub errors come as plain Exceptions
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise ConfigError(
            f"tokenizer {spec!r} is not a file and could not be loaded from the Hugging Face hub "
            f"({reason}); go online once (it is cached afterwards) or pass a tokenizer.json path"
        ) from None
    return BPETokenizer(loaded, spec, bos)


def _from_hub(name: str) -> Any:
    """A pretrained tokenizer from the Hugging Face hub or its local cache (one place to stub)."""
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_pretrained(name)


def train_bpe(docs: Iterable[bytes], vocab_size: int, bos: str = DEFAULT_BOS) -> BPETokenizer:
    """Trains a byte-level BPE (GPT-2's scheme: ByteLevel pre-tokenizer, no prefix space).

    The 256 byte symbols are the initial alphabet, so every text encodes without unknown tokens;
    ``bos`` is added as special token 0.

    Raises:
        ConfigError: a vocabulary too small to hold the byte alphabet and BOS.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise ConfigError(f"vocab_size must be at least 257 (256 bytes + BOS), got {vocab_size}")
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[bos],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((d.decode("utf-8", errors="replace") for d in docs), trainer)
    return BPETokenizer(tok, f"bpe-{vocab_size}", bos)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxlab.data.tokenizer``: trains a byte-level BPE, saves it as one JSON file."""
    from jaxlab.data.sources import split_documents

    parser = argparse.ArgumentParser(description="Train a byte-level BPE on a corpus, offline.")
    parser.add_argument("--input", action="append", help="kjv|FILE|DIR|hf:NAME (default kjv)")
    parser.add_argument("--vocab_size", type=int, default=4096)
    parser.add_argument("--output", required=True, help="where to write tokenizer.json")
    parser.add_argument("--bos", default=DEFAULT_BOS, help="BOS token text (special token 0)")
    parser.add_argument("--text_field", default="text", help="JSONL field holding the text")
    parser.add_argument("--validation_fraction", type=float, default=0.01, help="as prepare's")
    parser.add_argument("--hf_split", default="train")
    args = parser.parse_args(argv)
    inputs = [part for spec in args.input or ["kjv"] for part in spec.split(",") if part]
    out = pathlib.Path(args.output).expanduser()
    try:
        if out.is_dir():
            raise ConfigError(f"--output {out} is a directory; pass a file path (tokenizer.json)")
        docs = list(
            split_documents(
                inputs,
                "train",  # validation text stays unseen
                validation_fraction=args.validation_fraction,
                text_field=args.text_field,
                hf_split=args.hf_split,
            )
        )
        if not docs:
            raise ConfigError(f"the inputs {', '.join(inputs)} hold no training text")
        bpe = train_bpe(docs, args.vocab_size, args.bos)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        return 130
    out.parent.mkdir(parents=True, exist_ok=True)
    bpe.tokenizer.save(str(out))
    ident = load_tokenizer(str(out), args.bos).identity()
    print(f"wrote {out}: vocab {ident['vocab_size']}, BOS id {ident['bos_id']}, {ident['sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
