"""The repository's URL is written once, in ``[project.urls]``; every other mention agrees with it.

The notebooks' Colab install cells and the README's clone line cannot read ``pyproject.toml``
where they run, so they repeat the URL; :mod:`scripts.set_repo_url` lists those mentions and this
test fails, naming each file and line, where one differs from ``[project.urls] Repository``. A fork
runs ``python scripts/set_repo_url.py https://github.com/OWNER/NAME``, which rewrites them all; the
test below moves a copy of the checkout to two other URLs and back, and checks the notebooks stay
paired and the files come back byte for byte.
"""

import collections
import importlib.util
import shutil
import subprocess
import sys

import jupytext
import nbformat
import pytest

from tests.conftest import REPO
from tests.test_notebooks import INSTALL_CELL, NOTEBOOKS

SCRIPT = REPO / "scripts" / "set_repo_url.py"
_spec = importlib.util.spec_from_file_location("set_repo_url", SCRIPT)
set_repo_url = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(set_repo_url)


def test_every_mention_of_the_repository_is_the_one_in_pyproject():
    stale = set_repo_url.stale(REPO)
    assert not stale, (
        f"these differ from [project.urls] Repository = {set_repo_url.repository_url(REPO)}; "
        "run `python scripts/set_repo_url.py URL` to point them all at one URL:\n"
        + "\n".join(map(str, stale))
    )


def test_the_install_cells_and_the_readme_are_among_the_mentions():
    counts = collections.Counter(m.path for m in set_repo_url.mentions(REPO))
    for source in NOTEBOOKS:
        for path in (source, source.with_suffix(".ipynb")):
            assert counts[path.relative_to(REPO).as_posix()] == 1, f"{path.name}: its install cell"
    assert counts["README.md"] >= 1, "README.md no longer says where to clone from"


def _code(notebook) -> list[str]:
    return [c.source.strip() for c in notebook.cells if c.cell_type == "code"]


def test_a_fork_changes_every_mention_with_one_command(tmp_path):
    files = {p.relative_to(REPO): p.read_bytes() for p in set_repo_url.scanned_files(REPO)}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    original = set_repo_url.repository_url(tmp_path)
    mentioned = sorted({m.path for m in set_repo_url.mentions(tmp_path)})

    for url in ("https://gitlab.com/alice/jl", "https://github.com/bob/jaxlab-fork"):
        run = subprocess.run(
            [sys.executable, str(SCRIPT), url, "--root", str(tmp_path)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert run.stdout.split() == mentioned
        assert set_repo_url.repository_url(tmp_path) == url
        assert set_repo_url.stale(tmp_path) == []
        assert len(set_repo_url.mentions(tmp_path)) == len(set_repo_url.mentions(REPO))
        text = "".join((tmp_path / name).read_text() for name in files)
        assert original not in text and f"{url}/issues" in text
        for source in NOTEBOOKS:
            py = jupytext.read(tmp_path / "notebooks" / source.name)
            ipynb = nbformat.read(tmp_path / "notebooks" / f"{source.stem}.ipynb", as_version=4)
            assert _code(py) == _code(ipynb), f"{source.name} and its .ipynb drifted apart"
            extras = next(s for s in _code(py)[0].splitlines() if s.startswith("EXTRAS = "))[9:]
            assert _code(py)[0] == INSTALL_CELL.format(extras=extras, repository=url)

    set_repo_url.main([original, "--root", str(tmp_path)])
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data, f"{name} did not come back"


@pytest.mark.parametrize(
    "url",
    ["github.com/a/b", "https://github.com/a/b/", "https://github.com/a/b.git", "https://x/a"],
)
def test_a_url_that_is_not_a_repository_is_refused(url, tmp_path, capsys):
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with pytest.raises(SystemExit) as exit_info:
        set_repo_url.main([url, "--root", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"{url!r} is not a repository URL https://HOST/OWNER/NAME" in capsys.readouterr().err
    assert (tmp_path / "pyproject.toml").read_bytes() == (REPO / "pyproject.toml").read_bytes()
