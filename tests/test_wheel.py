"""The wheel a user installs carries every module and the shipped data, and works outside the repo.

A copy of the checkout (the files git tracks or would track, as a fresh clone has them) is built
with ``python -m build --wheel --no-isolation`` (this environment's setuptools, from the dev extra,
so no download) into a temporary directory; the repository is never written (setuptools leaves
``build/`` and ``*.egg-info`` beside the sources it builds). The wheel must hold every ``.py`` of
``jaxlab`` and ``pallas_kernels`` and every file of ``jaxlab/data/assets``, and nothing else of the
checkout. Installed with ``pip install --no-deps --target`` into another temporary directory, it
serves a child Python whose working directory lies outside the repository and whose only path to
jaxlab is that directory: the child imports every module of both packages (each must come from the
installed wheel, so neither the checkout nor an editable install can stand in for it) and loads
the shipped corpora, which must equal what the checkout loads.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from jaxlab.data.corpus import load_documents
from jaxlab.data.images import load_fashion_mnist, load_mnist
from tests.conftest import REPO

PACKAGES = ("jaxlab", "pallas_kernels")
ASSETS = "jaxlab/data/assets/"

# Run by the installed wheel: where each package came from, and what the shipped loaders return.
CHILD = """
import importlib, json, pkgutil
import jaxlab, pallas_kernels
from jaxlab.data.corpus import load_documents
from jaxlab.data.images import load_fashion_mnist, load_mnist
from jaxlab.data.shipped import asset_path

modules = [m.name for p in (jaxlab, pallas_kernels)
           for m in pkgutil.walk_packages(p.__path__, p.__name__ + ".")]
files = [importlib.import_module(m).__file__ for m in ["jaxlab", "pallas_kernels", *modules]]
out = {"files": [*files, str(asset_path("PROVENANCE.md"))]}
for split in ("train", "validation"):
    docs = load_documents("kjv", split)
    out[f"kjv/{split}"] = [len(docs), sum(map(len, docs))]
for name, load in (("mnist", load_mnist), ("fashion_mnist", load_fashion_mnist)):
    for split in ("train", "test"):
        images, labels = load(split)
        out[f"{name}/{split}"] = [list(images.shape), int(images.sum()), labels.tolist()]
print(json.dumps(out))
"""


def _checkout_files() -> list[str]:
    """The checkout's files as a fresh clone plus uncommitted work would have them."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO, capture_output=True, check=True, text=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout ({e}): the wheel is built from the files git knows")
    return sorted(f for f in listed.split("\0") if f and (REPO / f).is_file())


def _shipped_modules(files: list[str]) -> set[str]:
    return {f for f in files if f.endswith(".py") and f.startswith(PACKAGES)}


def _build_artifacts() -> set[str]:
    return {p.name for pattern in ("build", "dist", "*.egg-info") for p in REPO.glob(pattern)}


@pytest.fixture(scope="module")
def checkout_files() -> list[str]:
    return _checkout_files()


@pytest.fixture(scope="module")
def wheel(checkout_files, tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("wheel")
    source, dist = root / "source", root / "dist"
    for name in checkout_files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    before = _build_artifacts()
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)],
        cwd=source, capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, (
        f"python -m build failed (pip install -e '.[dev]' brings build and setuptools):\n"
        f"{build.stdout[-3000:]}\n{build.stderr[-3000:]}"
    )
    assert _build_artifacts() == before, "building the wheel wrote into the repository"
    (built,) = dist.glob("jaxlab-*.whl")
    return built


def test_the_wheel_holds_every_module_and_shipped_file_and_nothing_else(wheel, checkout_files):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = _shipped_modules(checkout_files) | {f for f in checkout_files if f.startswith(ASSETS)}
    assert {f for f in shipped if f.startswith(ASSETS)} >= {ASSETS + "PROVENANCE.md"}
    assert any(f.startswith("pallas_kernels/") for f in shipped)
    assert sorted(shipped - names) == [], "missing from the wheel"
    metadata = {n for n in names if n.split("/")[0].endswith(".dist-info")}
    # Only what setuptools builds from the sources: no tests, experiments, notebooks or results.
    assert sorted(names - shipped - metadata) == [], "in the wheel but not shipped"


def test_the_installed_wheel_loads_the_shipped_data_outside_the_repository(
    wheel, checkout_files, tmp_path
):
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(site), JAX_PLATFORMS="cpu")
    child = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.splitlines()[-1])
    *modules, provenance = map(pathlib.Path, got.pop("files"))
    for file in (*modules, provenance):
        assert file.is_relative_to(site), f"{file} is not the installed wheel's"
    imported = {file.relative_to(site).as_posix() for file in modules}
    assert imported == _shipped_modules(checkout_files)
    # The same corpora as the checkout's loaders give.
    for split in ("train", "validation"):
        docs = load_documents("kjv", split)
        assert got.pop(f"kjv/{split}") == [len(docs), sum(map(len, docs))]
    for name, load in (("mnist", load_mnist), ("fashion_mnist", load_fashion_mnist)):
        for split in ("train", "test"):
            images, labels = load(split)
            shape, total, got_labels = got.pop(f"{name}/{split}")
            assert shape == list(images.shape) and total == int(images.sum())
            np.testing.assert_array_equal(got_labels, labels)
    assert got == {}
