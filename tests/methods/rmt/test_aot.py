"""AOT compile of paper-size train steps on a simulated 64-device mesh (smallest pair), through the
``rmt_aot`` experiment (its child process simulates the 64 devices)."""

import pytest

from jaxlab.core import experiment


@pytest.mark.slow
def test_smallest_paper_pair_compiles_sharded_over_64_devices(tmp_path, repo_root):
    summary = experiment.launch(
        repo_root / "experiments", "rmt_aot", overrides={"pairs": "49m:46m"}, workdir=tmp_path
    )
    for name in ("transformer_49m", "rmt_46m"):
        res = summary["models"][name]
        assert res["num_devices"] == 64
        # Every large array is sharded over fsdp=64; small replicated keys and norms add a little.
        assert 1 / 64 <= res["sharded_fraction"] < 1.1 / 64, name
