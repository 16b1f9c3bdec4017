"""Points every mention of the repository at a new URL: ``[project.urls]`` is the one source.

``pyproject.toml``'s ``[project.urls] Repository`` is the repository's URL. The places that must
repeat it, because they are read where pyproject is not (a notebook's Colab install cell, the
README's clone line, the docs), are listed by :func:`mentions`: every URL in :data:`SCANNED` whose
repository name (its second path segment) is ``jaxlab`` or the name in ``Repository``. A mention is
stale unless it is ``Repository`` itself or ``Repository`` followed by ``/``, ``#``, ``@`` or
``.git`` (an issues link, an anchor, a pip ``@ref``). ``tests/test_repo_url.py`` fails on a stale
mention; this script rewrites them all, so a fork changes one line by running::

    python scripts/set_repo_url.py https://github.com/OWNER/NAME

It rewrites the ``[project.urls]`` values (each is ``Repository`` with a suffix) and every mention
in place, keeping each mention's suffix; a notebook's ``.py`` and ``.ipynb`` get the same text, so
their jupytext pairing holds.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import tomllib
from typing import NamedTuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Files read where pyproject.toml is not; tests/ is left out (its cases name made-up forks).
SCANNED = (
    "pyproject.toml",
    "README.md",
    "CHANGELOG.md",
    "notebooks/*.py",
    "notebooks/*.ipynb",
    "docs/**/*.md",
    "docs/**/*.rst",
    "docs/**/*.py",
    "jaxlab/**/*.md",
    "pallas_kernels/**/*.md",
    "experiments/**/*.md",
)
# A URL ends at white space, a quote, a bracket or a backslash (a JSON escape in an .ipynb).
_URL = re.compile(r"https?://[^\s\"'<>()\[\]\\`]+")
_REPOSITORY = re.compile(r"^https://[^/\s]+/[^/\s#@]+/[^/\s#@]+$")
_PROJECT = "jaxlab"


class Mention(NamedTuple):
    """A URL of the repository in ``path`` (relative to the root), on line ``line`` (from 1)."""

    path: str
    line: int
    url: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.url}"


def repository_url(root: pathlib.Path = ROOT) -> str:
    """``[project.urls] Repository`` of ``root/pyproject.toml``."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def _base(url: str) -> str:
    """``scheme://host/owner/name`` of a URL, without its suffix or a trailing ``.git``."""
    scheme, rest = url.split("://", 1)
    host, owner, name = (rest.split("/") + ["", ""])[:3]
    name = re.split(r"[#@]", name)[0].removesuffix(".git")
    return f"{scheme}://{host}/{owner}/{name}"


def _names(repository: str) -> set[str]:
    return {_PROJECT, _base(repository).rsplit("/", 1)[1]}


def _is_ours(url: str, names: set[str]) -> bool:
    """Whether ``url`` points into a repository (on any host, of any owner) named in ``names``."""
    base = _base(url)
    return base.count("/") == 4 and base.rsplit("/", 1)[1] in names


def scanned_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The files of :data:`SCANNED` under ``root``."""
    return sorted({p for pattern in SCANNED for p in root.glob(pattern) if p.is_file()})


def mentions(root: pathlib.Path = ROOT, names: set[str] | None = None) -> list[Mention]:
    """Every URL in :data:`SCANNED` whose repository name is in ``names`` (default: ``jaxlab``
    and the name in ``Repository``)."""
    names = _names(repository_url(root)) if names is None else names
    found = []
    for path in scanned_files(root):
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            for url in _URL.findall(text):
                if _is_ours(url, names):
                    found.append(Mention(path.relative_to(root).as_posix(), number, url))
    return found


def is_current(url: str, repository: str) -> bool:
    """Whether ``url`` is ``repository``, or ``repository`` with a ``/``, ``#``, ``@`` or ``.git``
    suffix."""
    return url == repository or re.match(re.escape(repository) + r"([/#@]|\.git)", url) is not None


def stale(root: pathlib.Path = ROOT) -> list[Mention]:
    """The mentions that name another repository than ``[project.urls] Repository``."""
    repository = repository_url(root)
    return [m for m in mentions(root) if not is_current(m.url, repository)]


def set_repo_url(url: str, root: pathlib.Path = ROOT) -> list[str]:
    """Rewrites ``Repository``, the other ``[project.urls]`` and every mention to ``url``.

    Args:
        url: The new repository, ``https://HOST/OWNER/NAME`` (no trailing ``/`` or ``.git``).
        root: The checkout.

    Returns:
        The paths (relative to ``root``) of the files changed.

    Raises:
        ValueError: If ``url`` is not of that form.
    """
    if not _REPOSITORY.match(url) or url.endswith(".git"):
        raise ValueError(f"{url!r} is not a repository URL https://HOST/OWNER/NAME")
    names = _names(repository_url(root)) | _names(url)

    def rewrite(match: re.Match) -> str:
        old = match[0]
        return url + old[len(_base(old)) :] if _is_ours(old, names) else old

    changed = []
    for path in scanned_files(root):
        old = path.read_text()
        new = old
        if path.name == "pyproject.toml":
            # The Repository line first: its old value need not share the others' base.
            new, n = re.subn(r'(?m)^Repository = "[^"]*"$', f'Repository = "{url}"', old)
            if n != 1:
                raise ValueError(f"{path} has no single `Repository = ...` line in [project.urls]")
        new = _URL.sub(rewrite, new)
        if new != old:
            path.write_text(new)
            changed.append(path.relative_to(root).as_posix())
    return changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="the new repository, https://HOST/OWNER/NAME")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="the checkout")
    args = parser.parse_args(argv)
    try:
        changed = set_repo_url(args.url, args.root)
    except ValueError as e:
        parser.error(str(e))
    print("\n".join(changed))


if __name__ == "__main__":
    main()
