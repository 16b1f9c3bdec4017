"""Sphinx extension: the repository's READMEs as pages, their relative links pointing somewhere.

Each README becomes a page through a two-line stub (``docs/readme.md``, ``docs/methods/*.md``,
``docs/kernels.md``) that includes it. The READMEs link by repository path, as GitHub
renders them: ``jaxlab/methods/rmt/README.md#usage``, ``experiments/run.py``. Inside the docs those
paths name nothing, and MyST reports every such link as a missing target. On MyST's
``include-read`` event this rewrites them: a link to a README that has a page goes to that page
(anchor kept, so a link to a renamed section still fails the build); a link to any other file of
the repository goes to the repository's web view when ``[project.urls]`` in ``pyproject.toml``
names a ``Repository``, and otherwise keeps its text without the link. Fenced code blocks, inline
code, images and reference-style links are left alone.
"""

from __future__ import annotations

import os
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# ```{include} ../README.md   (the stub pages' first line)
_INCLUDE = re.compile(r"^```\{include\}\s+(\S+)", re.MULTILINE)
# [text](target "title"), not ![image](...); the text may hold inline code but no brackets
_LINK = re.compile(r"(?<!!)\[([^\]\[]*)\]\(([^)\s]+)(\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_STATE: dict = {"pages": {}, "url": None}  # set when the build starts (config-inited)


def readme_pages(docs: pathlib.Path = DOCS) -> dict[str, str]:
    """Repository path of each included README -> the docname of the page that includes it."""
    pages = {}
    for stub in sorted(docs.rglob("*.md")):
        if "_build" in stub.relative_to(docs).parts:
            continue
        for target in _INCLUDE.findall(stub.read_text(encoding="utf-8")):
            included = (stub.parent / target).resolve().relative_to(ROOT).as_posix()
            pages[included] = stub.relative_to(docs).with_suffix("").as_posix()
    return pages


def repository_url(root: pathlib.Path = ROOT) -> str | None:
    """``[project.urls]`` ``Repository`` from ``pyproject.toml``, if it names one."""
    with open(root / "pyproject.toml", "rb") as f:
        urls = tomllib.load(f).get("project", {}).get("urls", {})
    url = urls.get("Repository") or urls.get("repository")
    return url.rstrip("/") if url else None


def rewrite_target(target: str, source: str, docname: str, pages: dict, url: str | None):
    """The new target of a link written in ``source`` (a repository path) and shown on page
    ``docname``, or ``None`` to drop the link and keep its text. External links and anchors
    within the page are returned unchanged."""
    if target.startswith("#") or _SCHEME.match(target):
        return target
    path, _, anchor = target.partition("#")
    resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)).replace(os.sep, "/")
    if resolved in pages:
        page = os.path.relpath(pages[resolved] + ".md", os.path.dirname(docname) or ".")
        return page.replace(os.sep, "/") + (f"#{anchor}" if anchor else "")
    if url is None or resolved.startswith("../") or not (ROOT / resolved).exists():
        return None
    kind = "tree" if (ROOT / resolved).is_dir() else "blob"
    return f"{url}/{kind}/HEAD/{resolved}" + (f"#{anchor}" if anchor else "")


def rewrite(text: str, source: str, docname: str, pages: dict, url: str | None) -> str:
    """``text`` (Markdown of the repository file ``source``) with its relative links rewritten."""

    def link(match: re.Match) -> str:
        new = rewrite_target(match.group(2), source, docname, pages, url)
        if new is None:
            return match.group(1)
        return f"[{match.group(1)}]({new}{match.group(3) or ''})"

    def outside_code(line: str) -> str:
        parts, start = [], 0
        for span in _CODE_SPAN.finditer(line):
            parts += [_LINK.sub(link, line[start : span.start()]), span.group()]
            start = span.end()
        return "".join([*parts, _LINK.sub(link, line[start:])])

    out, fence = [], None
    for line in text.splitlines(keepends=True):
        opening = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
        else:
            line = outside_code(line)
        out.append(line)
    return "".join(out)


def _on_include_read(app, relative_path, parent_docname, content):
    source = (pathlib.Path(app.srcdir) / relative_path).resolve()
    if source.suffix != ".md" or ROOT not in source.parents:
        return
    repo_path = source.relative_to(ROOT).as_posix()
    pages = _STATE["pages"]
    if repo_path in pages:
        content[0] = rewrite(content[0], repo_path, pages[repo_path], pages, _STATE["url"])


def _on_config_inited(app, config):
    _STATE["pages"] = readme_pages(pathlib.Path(app.srcdir))
    _STATE["url"] = repository_url()


def setup(app):
    app.connect("config-inited", _on_config_inited)
    app.connect("include-read", _on_include_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
