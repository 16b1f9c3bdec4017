"""The API reference covers every public name, and the docstring examples run.

Like optax's ``coverage_check``, without building the docs: every name in the ``__all__`` of every
public module (no part of its dotted path starts with ``_``) must be in the reference, listed in
the table of its module's page in ``docs/api/`` and documented by one autodoc entry at the module
that owns it; the pages must be what ``docs/gen_api.py`` writes from the source today; every
README has a page. The docstring examples of :data:`DOCTEST_MODULES` run as doctests here (the
README's examples run in ``test_readme.py``). Building the docs themselves (warnings as errors) is
``.ci/run``'s last step; nothing here needs Sphinx.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import re
import sys

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
API = DOCS / "api"
# Modules whose docstrings carry examples (``>>>``) that must keep running.
DOCTEST_MODULES = (
    "jaxlab.ot.sinkhorn",
    "jaxlab.methods.qn_ot.api",
    "jaxlab.nn.linear",
    "jaxlab.lm.generate",
)
_AUTODOC = re.compile(r"^\.\. auto(module|class|function|data|exception)::\s+(\S+)", re.M)


def _load(name: str):
    """A module of ``docs/`` (not a package) by file name."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen_api = _load("gen_api")
readme_links = _load("readme_links")


def _read_reference(pages: dict[str, str]) -> tuple[dict[str, set[str]], set[str], set[str]]:
    """From the reST of the API pages: each module page's table entries (as full dotted names),
    the objects with an autodoc entry, and the modules with a page."""
    tables, documented, modules = {}, set(), set()
    for text in pages.values():
        module = None
        for kind, target in _AUTODOC.findall(text):
            if kind == "module":
                module = target
                modules.add(target)
            else:
                documented.add(target)
        assert module is not None, "an API page without its automodule"
        entries, in_table = set(), False
        for line in text.splitlines():
            if line.startswith(".. autosummary::"):
                in_table = True
            elif in_table and line.startswith("   ") and not line.strip().startswith(":"):
                name = line.strip().lstrip("~")
                absolute = name.split(".")[0] in gen_api.PACKAGES
                entries.add(name if absolute else f"{module}.{name}")
            elif in_table and line.strip() and not line.startswith(" "):
                in_table = False
        tables[module] = entries
    return tables, documented, modules


def _committed() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(API.glob("*.rst")) if p.name != "index.rst"}


def _exported():
    """``{(module, name): full dotted name of where it is documented}`` over public ``__all__``."""
    modules = gen_api.read_modules()
    return {
        key: where if kind == "module" else f"{where}.{original}"
        for key, (where, original, kind) in gen_api.homes(modules).items()
    }


def missing_from_reference(pages: dict[str, str]) -> list[str]:
    """``module.name`` of each public ``__all__`` entry the reference ``pages`` leave out."""
    tables, documented, modules = _read_reference(pages)
    missing = []
    for (module, name), target in sorted(_exported().items()):
        listed = target in tables.get(module, ())
        if not listed or (target not in documented and target not in modules):
            missing.append(f"{module}.{name}")
    return missing


def test_every_public_name_is_in_the_reference():
    missing = missing_from_reference(_committed())
    assert not missing, (
        f"{len(missing)} public names are not in docs/api/: {', '.join(missing)}; "
        "run `python docs/gen_api.py`"
    )


def test_every_public_module_has_a_page():
    public = {m.name for m in gen_api.public_modules(gen_api.read_modules())}
    _, _, pages = _read_reference(_committed())
    assert public == pages, f"missing: {sorted(public - pages)}; stale: {sorted(pages - public)}"


def test_api_pages_are_those_gen_api_writes():
    stale = sorted(
        set(_committed().items()) ^ set(gen_api.pages().items()), key=lambda item: item[0]
    )
    assert not stale, (
        f"docs/api/ differs from the source's __all__ in {sorted({n for n, _ in stale})}: "
        "run `python docs/gen_api.py` and commit the pages"
    )


def test_each_name_is_documented_once():
    targets = [t for text in _committed().values() for _, t in _AUTODOC.findall(text)]
    twice = sorted({t for t in targets if targets.count(t) > 1})
    assert not twice, f"documented twice (a duplicate object description): {twice}"


def test_the_check_fails_when_a_name_is_removed():
    pages = _committed()
    page = pages["jaxlab.ot.rst"]
    assert "~sinkhorn.sinkhorn" in page
    broken = {**pages, "jaxlab.ot.rst": page.replace("   ~sinkhorn.sinkhorn\n", "")}
    assert missing_from_reference(broken) == ["jaxlab.ot.sinkhorn"]
    owner = pages["jaxlab.ot.sinkhorn.rst"]
    broken = {**pages, "jaxlab.ot.sinkhorn.rst": owner.replace(".. autofunction::", ".. ")}
    assert missing_from_reference(broken) == ["jaxlab.ot.sinkhorn", "jaxlab.ot.sinkhorn.sinkhorn"]


def test_each_table_entry_is_the_exported_object():
    """What the tables link to is the object the module exports (re-exports followed right)."""

    def resolve(dotted: str):
        try:
            return importlib.import_module(dotted)
        except ImportError:
            module, _, name = dotted.rpartition(".")
            return getattr(importlib.import_module(module), name)

    wrong = [
        f"{module}.{name} -> {target}"
        for (module, name), target in _exported().items()
        if getattr(importlib.import_module(module), name) is not resolve(target)
    ]
    assert not wrong, wrong


def test_every_readme_has_a_page():
    readmes = {"README.md", "pallas_kernels/README.md"} | {
        p.relative_to(REPO).as_posix() for p in (REPO / "jaxlab" / "methods").glob("*/README.md")
    }
    pages = readme_links.readme_pages(DOCS)
    assert readmes <= set(pages), f"READMEs without a page in docs/: {sorted(readmes - set(pages))}"
    index = (DOCS / "index.md").read_text()
    for page in pages.values():  # a toctree line: `page` or `Title <page>`
        assert re.search(rf"^(.* <)?{page}>?$", index, re.M), f"docs/index.md misses {page}"


@pytest.mark.parametrize(
    ("target", "source", "page", "url", "expected"),
    [
        ("jaxlab/methods/rmt/README.md#usage", "README.md", "readme", None, "methods/rmt.md#usage"),
        ("../../../README.md#tests", "jaxlab/methods/rmt/README.md", "methods/rmt", None,
         "../readme.md#tests"),
        ("../../../pallas_kernels/README.md", "jaxlab/methods/rmt/README.md", "methods/rmt", None,
         "../kernels.md"),
        ("experiments/run.py", "README.md", "readme", "https://github.com/o/r",
         "https://github.com/o/r/blob/HEAD/experiments/run.py"),
        ("experiments", "README.md", "readme", "https://github.com/o/r",
         "https://github.com/o/r/tree/HEAD/experiments"),
        ("experiments/run.py", "README.md", "readme", None, None),
        ("#quickstart", "README.md", "readme", None, "#quickstart"),
        ("https://example.org/a.md", "README.md", "readme", None, "https://example.org/a.md"),
    ],
)  # fmt: skip
def test_readme_links_point_at_pages_or_the_repository(target, source, page, url, expected):
    pages = readme_links.readme_pages(DOCS)
    assert readme_links.rewrite_target(target, source, page, pages, url) == expected


def test_readme_links_leave_code_and_images_alone():
    text = (
        "[rmt](jaxlab/methods/rmt/README.md) [run](experiments/run.py) `[a](b.py)` ![p](p.png)\n"
        "```\n[c](d.py)\n```\n"
    )
    out = readme_links.rewrite(text, "README.md", "readme", readme_links.readme_pages(DOCS), None)
    assert out == "[rmt](methods/rmt.md) run `[a](b.py)` ![p](p.png)\n```\n[c](d.py)\n```\n"


@pytest.mark.parametrize("name", DOCTEST_MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{name} has no docstring example left; update DOCTEST_MODULES"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()
