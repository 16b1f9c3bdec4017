"""Locating the datasets that ship inside the package, in ``jaxlab/data/assets/``.

The assets (KJV text, MNIST and Fashion-MNIST subsets) are built by
``scripts/build_data_assets.py``; ``assets/PROVENANCE.md`` gives their sources, licences, the exact
transformations and sha256 sums. Loaders go through :func:`asset_path` so that a missing asset (for
example a source checkout without the data files) fails with one clear message.
"""

from __future__ import annotations

import importlib.resources
import pathlib

from jaxlab.core.errors import ConfigError

__all__ = ["asset_path"]


def asset_path(name: str) -> pathlib.Path:
    """Returns the path of a shipped asset.

    Args:
        name: File name inside ``jaxlab/data/assets/``, e.g. ``"mnist.npz"``.

    Returns:
        The path of the file.

    Raises:
        ConfigError: If the asset is not installed.
    """
    path = pathlib.Path(str(importlib.resources.files("jaxlab.data") / "assets" / name))
    if not path.is_file():
        raise ConfigError(
            f"shipped asset {name!r} is missing from {path.parent}; "
            "rebuild it with `python scripts/build_data_assets.py`"
        )
    return path
