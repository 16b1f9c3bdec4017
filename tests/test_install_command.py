"""The README's test command is what CI runs: one install script, then the same pytest.

A newcomer who follows the README must run the tests CI runs. Once only ``.ci/run`` installed the
authors' mLSTM kernels, so the README's command skipped their oracle tests; now the README's line
``bash scripts/install_dev.sh && pytest ...`` is checked to be ``.ci/run``'s install and test lines,
and the script (run here with a stand-in ``python`` that records its arguments) to install the dev
extra and ``mlstm-kernels`` without its dependencies, then to compile the checkout's modules to
bytecode, from any working directory.
"""

import os
import pathlib
import shlex
import subprocess

from tests.conftest import REPO

INSTALL = "bash scripts/install_dev.sh"


def _readme_test_command() -> tuple[str, str]:
    """The README's ``install && pytest`` line (the one commented ``# the tests``), split."""
    lines = [s for s in (REPO / "README.md").read_text().splitlines() if s.endswith("# the tests")]
    assert len(lines) == 1, "README.md has no single line commented `# the tests`"
    install, test = lines[0].split("#")[0].strip().split(" && ")
    return install, test


def test_ci_installs_and_tests_as_the_readme_says():
    install, test = _readme_test_command()
    assert install == INSTALL
    ci = [s.strip() for s in (REPO / ".ci" / "run").read_text().splitlines()]
    assert any(s == install or s.startswith(install + " ") for s in ci), ".ci/run: no " + install
    assert any(s == test or s.startswith(test + " ") for s in ci), ".ci/run: no " + test


def test_the_install_script_installs_the_dev_extra_and_the_authors_kernels(tmp_path):
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$PWD $*" >> {log}\n')
    fake.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        [*shlex.split(INSTALL.replace("scripts/", f"{REPO}/scripts/")), "-q"],
        cwd=elsewhere, env=env, check=True,
    )  # fmt: skip
    calls = [shlex.split(line) for line in log.read_text().splitlines()]
    assert all(pathlib.Path(c[0]) == REPO for c in calls), "not run from the checkout"
    pip = [c[1:] for c in calls if c[1:3] == ["-m", "pip"]]
    assert all(c[:4] == ["-m", "pip", "install", "-q"] for c in pip), pip
    # the checkout's sources are compiled once, for every process the tests start
    assert ["-m", "compileall", "-q", "jaxlab", "pallas_kernels"] == calls[-1][1:6], calls[-1]
    assert any(c[4:] == ["-e", ".[dev]"] for c in pip), pip
    (kernels,) = [c[4:] for c in pip if any(a.startswith("mlstm-kernels") for a in c)]
    assert "--no-deps" in kernels, kernels
