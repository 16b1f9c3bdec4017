#!/usr/bin/env bash
# Installs what the tests need into the active Python environment, as CI does (.ci/run calls this,
# and the README's test command is `bash scripts/install_dev.sh && pytest -n auto --dist loadfile`):
# jaxlab editable with its dev extra, then the authors' mLSTM kernels, the oracle of
# tests/methods/xlstm/test_authors_kernels.py (skipped without them). mlstm-kernels declares torch,
# which its pure-JAX forms never import, so it goes in without its dependencies (einops, the one
# they need, is in the dev extra). Arguments are passed to pip (e.g. -q). Last, the checkout's own
# modules are compiled to bytecode: pip does that for what it installs but not for an editable
# checkout, and where PYTHONDONTWRITEBYTECODE is set (CI containers often set it) every process the
# tests start (workers, run.py, notebook kernels) would otherwise compile jaxlab's sources again.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install "$@" -e ".[dev]"
python -m pip install "$@" --no-deps "mlstm-kernels>=2.0.6,<2.1"
python -m compileall -q jaxlab pallas_kernels experiments tests docs scripts
