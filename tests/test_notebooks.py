"""Every notebook executes at smoke size, and its ``.ipynb`` matches its jupytext ``.py`` source."""

import os
import pathlib
import sys
import tomllib

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

from jaxlab.core.errors import ConfigError
from jaxlab.testing.processes import cpu_env
from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))


def _code(nb) -> list[str]:
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"]


@pytest.mark.notebook
@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_is_paired(source: pathlib.Path, tmp_path, monkeypatch):
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"run: jupytext --to ipynb {source.relative_to(REPO)}"
    nb = jupytext.read(source)
    assert _code(nbformat.read(paired, as_version=4)) == _code(nb), (
        f"{paired.name} is out of date: run jupytext --sync {source.relative_to(REPO)}"
    )
    monkeypatch.setenv("JAXLAB_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel is this interpreter (the venv's), whatever `python` is on PATH.
    monkeypatch.setenv(
        "PATH", f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    # The kernel sees one device, as a user's would, but compiles as the tests do (the
    # conftest's other XLA flags: its optimisation level and code emitters).
    monkeypatch.setenv("XLA_FLAGS", cpu_env(1)["XLA_FLAGS"])
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()


# The one URL of the repository (tests/test_repo_url.py: every other mention agrees with it).
REPOSITORY = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
INSTALL_CELL = """# Colab: install jaxlab (elsewhere, from a clone: pip install -e ".[dev]")
import subprocess
import sys

EXTRAS = {extras}
if "google.colab" in sys.modules:
    spec = f"jaxlab{{EXTRAS}} @ git+{repository}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], check=True)
from jaxlab.core.environment import env_flag

SMOKE = env_flag("JAXLAB_SMOKE")  # CI runs every notebook at tiny size (1/true/yes/on)"""


@pytest.mark.parametrize("source", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_share_one_install_cell_and_one_plot_style(source: pathlib.Path):
    cells = _code(jupytext.read(source))
    extras_line = next(line for line in cells[0].splitlines() if line.startswith("EXTRAS = "))
    extras = extras_line.removeprefix("EXTRAS = ")
    assert cells[0] == INSTALL_CELL.format(extras=extras, repository=REPOSITORY), (
        f"{source.name}: first cell differs"
    )
    # Figures come from jaxlab.core.plots (the experiments' style), never from pyplot directly.
    text = source.read_text()
    assert "pyplot" not in text and "Figure(" not in text, f"{source.name} draws its own figures"


@pytest.mark.parametrize(
    "value, smoke",
    [("1", True), ("on", True), ("TRUE", True), ("0", False), ("off", False), ("no", False),
     ("", False)],
)  # fmt: skip
def test_the_install_cell_reads_the_smoke_flag_as_a_boolean(value, smoke, monkeypatch):
    # JAXLAB_SMOKE=0 once ran every notebook at smoke size: the flag was read as "set".
    monkeypatch.setenv("JAXLAB_SMOKE", value)
    scope: dict = {}
    exec(INSTALL_CELL.format(extras='""', repository=REPOSITORY), scope)
    assert scope["SMOKE"] is smoke


def test_the_install_cell_refuses_a_smoke_flag_that_is_not_a_boolean(monkeypatch):
    monkeypatch.setenv("JAXLAB_SMOKE", "2")
    with pytest.raises(
        ConfigError,
        match=r"^JAXLAB_SMOKE='2' is not a boolean; use 1/true/yes/on or 0/false/no/off$",
    ):
        exec(INSTALL_CELL.format(extras='""', repository=REPOSITORY), {})
