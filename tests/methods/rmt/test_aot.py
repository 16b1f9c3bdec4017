"""AOT compile of paper-size train steps on a simulated 64-device mesh (smallest pair)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_smallest_paper_pair_compiles_sharded_over_64_devices(tmp_path, repo_root):
    out = tmp_path / "aot.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxlab.methods.rmt.aot",
            "--pairs",
            "49m:46m",
            "--devices",
            "64",
            "--fsdp",
            "64",
            "--batch-size",
            "64",
            "--out",
            str(out),
        ],
        cwd=repo_root,
        check=True,
        capture_output=True,
        timeout=900,
    )
    results = json.loads(out.read_text())
    for name in ("transformer_49m", "rmt_46m"):
        # Every large array is sharded over fsdp=64; small replicated keys and norms add a little.
        assert 1 / 64 <= results[name]["sharded_fraction"] < 1.1 / 64, name
