"""Tests that the shipped assets are the ones PROVENANCE.md describes, and stay small.

The sha256 sums in ``PROVENANCE.md`` are written by ``scripts/build_data_assets.py``; a file edited
or regenerated without updating the note fails here.
"""

import hashlib
import re

from jaxlab.data.shipped import asset_path

ASSETS = ("kjv.json.xz", "mnist.npz", "fashion_mnist.npz")


def test_checksums_match_provenance():
    note = asset_path("PROVENANCE.md").read_text()
    recorded = dict(re.findall(r"\| `([\w.]+)` \| [\d,]+ \| `([0-9a-f]{64})` \|", note))
    assert set(recorded) == set(ASSETS)
    for name in ASSETS:
        assert hashlib.sha256(asset_path(name).read_bytes()).hexdigest() == recorded[name], name


def test_assets_stay_small():
    total = sum(asset_path(name).stat().st_size for name in ASSETS)
    assert total < 12 * 2**20
