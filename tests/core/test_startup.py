"""jaxlab.core.startup: a script's import of Flax skips IPython, which only a notebook uses."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Prints whether IPython is imported after Flax (and its treescope), then after a direct import.
_PROBE = """
import sys
sys.path.insert(0, {root!r})
{setup}
import flax.nnx, treescope
print("IPython" in sys.modules)
import IPython
print("IPython" in sys.modules)
"""


def _imported(setup: str) -> list[str]:
    code = _PROBE.format(root=str(ROOT), setup=setup)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_a_script_imports_flax_without_ipython_and_others_still_find_it():
    pytest.importorskip("IPython")
    # Without the finder Flax imports IPython here (else this test could not fail).
    if _imported("")[0] != "True":
        pytest.skip("this Flax and treescope do not import IPython")
    setup = "from jaxlab.core.startup import skip_notebook_probes; skip_notebook_probes()"
    assert _imported(setup) == ["False", "True"]
