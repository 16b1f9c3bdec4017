"""Bad input to the corpus tools (``python -m jaxlab.data.prepare`` and ``.tokenizer``): each case
ends in one line on stderr with exit status 2 (input and config errors), 1 (a full disk) or 130
(Ctrl-C), and the corrected command then works in the same output directory.
"""

import errno
import gzip
import json

import numpy as np
import pytest

from jaxlab.data import prepare as prep
from jaxlab.data import tokenizer as tok
from jaxlab.data.shards import ShardCorpus
from jaxlab.data.sources import split_documents

DOCS = [f"document {i}: " + "some words here " * (i % 7 + 2) for i in range(40)]


def _jsonl(path, records, raw_lines=()):
    lines = [json.dumps(r).encode() for r in records] + list(raw_lines)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _text(path):
    path.write_text("\n\n\n".join(DOCS))
    return path


def _run(main, argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


def _prepare(inp, out, *extra):
    return ["--tokenizer=bytes", f"--input={inp}", f"--output={out}", "--workers=1", *extra]


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _good_jsonl(tmp_path):
    return _jsonl(tmp_path / "good.jsonl", [{"text": d} for d in DOCS])


BAD_INPUTS = {
    "empty_text_file": (lambda p: _write(p / "empty.txt", b""), "none for"),
    "binary_file": (lambda p: _write(p / "blob.txt", bytes(range(256)) * 4), "looks binary"),
    "not_utf8_jsonl": (
        lambda p: _jsonl(p / "latin.jsonl", [{"text": "ok"}], [b'{"text": "caf\xe9"}']),
        "line 2 is not UTF-8",
    ),
    "line_not_json": (
        lambda p: _jsonl(p / "broken.jsonl", [{"text": "ok"}], [b'{"text": "unclosed']),
        "line 2 is not JSON",
    ),
    "null_text_field": (
        lambda p: _jsonl(p / "null.jsonl", [{"text": "ok"}, {"text": None}]),
        "line 2: field 'text' is null, not a string",
    ),
    "gzipped_not_json": (
        lambda p: _write(p / "z.jsonl.gz", gzip.compress(b"not json\n")),
        "line 1 is not JSON",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_the_corrected_run_works_in_place(case, tmp_path, capsys):
    make, message = BAD_INPUTS[case]
    out = tmp_path / "out"
    code, err = _run(prep.main, _prepare(make(tmp_path), out), capsys)
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    code, err = _run(prep.main, _prepare(_good_jsonl(tmp_path), out), capsys)
    assert code == 0, err
    assert ShardCorpus(out).index["splits"]["train"]["documents"] > 0


def test_a_missing_text_field_leaves_nothing_that_blocks_the_corrected_command(tmp_path, capsys):
    body = _jsonl(tmp_path / "body.jsonl", [{"body": d} for d in DOCS])
    out = tmp_path / "out"
    code, err = _run(prep.main, _prepare(body, out), capsys)
    assert code == 2 and "line 1 has no 'text' field (see --text_field)" in err
    assert len(err.splitlines()) == 1
    code, err = _run(prep.main, _prepare(body, out, "--text_field=body"), capsys)
    assert code == 0, err


def test_an_output_path_that_is_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    code, err = _run(prep.main, _prepare(_good_jsonl(tmp_path), tmp_path / "taken"), capsys)
    assert code == 2 and "is a file" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("damaged", ["sidecar", "unit_marker"])
def test_damaged_bookkeeping_is_rebuilt(damaged, tmp_path, capsys):
    inp, out = _good_jsonl(tmp_path), tmp_path / "out"
    extra = ("--shard_tokens=300", "--validation_fraction=0.2")
    assert _run(prep.main, _prepare(inp, out, *extra), capsys)[0] == 0
    before = json.loads((out / "index.json").read_text())
    target = {
        "sidecar": sorted((out / "train").glob("*.json"))[1],
        "unit_marker": out / "units" / "u00000.json",
    }[damaged]
    target.write_text('{"truncated": ')
    code, err = _run(prep.main, _prepare(inp, out, *extra), capsys)
    assert code == 0, err
    assert json.loads((out / "index.json").read_text()) == before


def test_damaged_settings_refuse_in_one_line_once_shards_exist(tmp_path, capsys):
    inp, out = _good_jsonl(tmp_path), tmp_path / "out"
    assert _run(prep.main, _prepare(inp, out), capsys)[0] == 0
    (out / "settings.json").write_text("{")
    code, err = _run(prep.main, _prepare(inp, out), capsys)
    assert code == 2 and "other settings" in err and len(err.splitlines()) == 1


def test_ctrl_c_is_one_line_and_the_same_command_resumes(tmp_path, capsys, monkeypatch):
    inp, out = _good_jsonl(tmp_path), tmp_path / "out"
    flush = prep._SplitWriter._flush

    def interrupted(self, n):
        raise KeyboardInterrupt

    monkeypatch.setattr(prep._SplitWriter, "_flush", interrupted)
    code, err = _run(prep.main, _prepare(inp, out, "--shard_tokens=300"), capsys)
    assert code == 130 and err.startswith("interrupted:") and len(err.splitlines()) == 1
    monkeypatch.setattr(prep._SplitWriter, "_flush", flush)
    assert _run(prep.main, _prepare(inp, out, "--shard_tokens=300"), capsys)[0] == 0


def test_a_full_disk_is_one_line_and_the_same_command_resumes(tmp_path, capsys, monkeypatch):
    inp, out = _good_jsonl(tmp_path), tmp_path / "out"
    save, calls = prep._save, []

    def full(path, array):
        calls.append(path)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        save(path, array)

    monkeypatch.setattr(prep, "_save", full)
    code, err = _run(prep.main, _prepare(inp, out, "--shard_tokens=300"), capsys)
    assert code == 1 and "no space left" in err and "MiB free" in err, err
    assert len(err.splitlines()) == 1
    monkeypatch.setattr(prep, "_save", save)
    assert _run(prep.main, _prepare(inp, out, "--shard_tokens=300"), capsys)[0] == 0


def test_the_tokenizer_trains_on_prepares_training_split_only(tmp_path, capsys, monkeypatch):
    # JSONL is read as records (never as raw JSON text), and the documents the trainer sees are
    # exactly those prepare puts in training: none of the validation split.
    inp = _good_jsonl(tmp_path)
    seen = []
    train_bpe = tok.train_bpe

    def spy(docs, vocab_size, bos=tok.DEFAULT_BOS):
        seen.extend(docs)
        return train_bpe(seen, vocab_size, bos)

    monkeypatch.setattr(tok, "train_bpe", spy)
    args = [f"--input={inp}", f"--output={tmp_path / 'bpe.json'}", "--vocab_size=300"]
    code, err = _run(tok.main, [*args, "--validation_fraction=0.25"], capsys)
    assert code == 0, err
    assert not any(d.startswith(b'{"text"') for d in seen)
    prep.prepare("bytes", [str(inp)], tmp_path / "shards", validation_fraction=0.25, progress=False)
    corpus = ShardCorpus(tmp_path / "shards")
    for split, want_seen in (("train", True), ("validation", False)):
        shards = corpus.index["splits"][split]["shards"]
        ids = np.concatenate([np.load(corpus.directory / s["file"]) for s in shards])
        docs = [bytes(p.astype(np.uint8)) for p in np.split(ids, np.flatnonzero(ids == 0))[1:]]
        docs = [d[1:] for d in docs]  # drop each document's BOS
        assert docs and all((d in seen) == want_seen for d in docs)
    assert sorted(seen) == sorted(
        split_documents([str(inp)], "train", validation_fraction=0.25, text_field="text")
    )


def test_the_tokenizer_refuses_empty_input_in_one_line(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    args = [f"--input={tmp_path / 'empty.txt'}", f"--output={tmp_path / 'bpe.json'}"]
    code, err = _run(tok.main, args, capsys)
    assert code == 2 and "hold no training text" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "bpe.json").exists()
