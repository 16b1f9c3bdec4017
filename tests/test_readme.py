"""The README's library examples run as written, each in a fresh namespace.

Every fenced ``python`` block of the README's section "Use jaxlab from your own code" is executed
here exactly as a user would paste it (its own imports and inputs, no test helpers), so an example
that drifts from the API fails CI. The test also fails when a block warns that a float64 array was
truncated to float32 (a result leaking float64 into a float32 process). An example may switch x64
on, as a user's script would at its top; the setting is restored afterwards.
"""

from __future__ import annotations

import re
import warnings

import jax
import pytest

from tests.conftest import REPO

SECTION = "## Use jaxlab from your own code"


def readme_examples(text: str | None = None) -> list[tuple[str, str]]:
    """``[(title, code)]`` of the python blocks in the README's library section; the title is the
    nearest ``###`` heading above the block."""
    text = (REPO / "README.md").read_text() if text is None else text
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : None if end < 0 else end]
    examples, title = [], ""
    for match in re.finditer(r"^### ([^\n]+)$|^```python\n(.*?)^```$", section, re.M | re.S):
        if match.group(1):
            title = match.group(1).strip()
        else:
            examples.append((title, match.group(2)))
    return examples


EXAMPLES = readme_examples()


def test_every_method_has_an_example():
    code = "\n".join(c for _, c in EXAMPLES)
    for method in ("qn_ot", "warmpot", "sst", "rmt", "structured_attention", "xlstm", "nard"):
        assert f"jaxlab.methods.{method} import" in code or f"methods import {method}" in code
    assert "drrho_clip import" in code


@pytest.mark.parametrize("code", [c for _, c in EXAMPLES], ids=[t for t, _ in EXAMPLES])
def test_readme_example_runs(code: str):
    x64 = jax.config.jax_enable_x64
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*float64.*truncated.*")
            exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    finally:
        jax.config.update("jax_enable_x64", x64)


def test_extraction_reads_titles_and_blocks():
    text = (
        f"{SECTION}\n\n### One\n\n```python\nx = 1\n```\n\n### Two\n\n```python\ny = 2\n```\n\n"
        "## Next\n```python\nz = 3\n```\n"
    )
    assert readme_examples(text) == [("One", "x = 1\n"), ("Two", "y = 2\n")]
