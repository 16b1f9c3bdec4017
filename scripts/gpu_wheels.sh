#!/usr/bin/env bash
# Downloads, where the package registry is reachable, the wheels that an offline GPU machine needs
# to run scripts/gpu_bench.sh: the packages jaxlab imports that a Python with JAX + CUDA, flax,
# optax, orbax, chex, numpy, scipy, scikit-learn, matplotlib, tokenizers, safetensors and pytest
# (an image like the H200 one in pallas_kernels/README.md) usually lacks. Wheels only, no
# dependencies resolved (each one missing is named here), for the GPU machine's Python, not this
# one's. gpu_bench.sh installs them with `pip install --no-index --no-deps --target`.
#
# Usage: bash scripts/gpu_wheels.sh [DEST] [PYTHON_VERSION]
#        DEST defaults to .whl (git-ignored by the caller: add `/.whl/` to .git/info/exclude);
#        PYTHON_VERSION (of the GPU machine) defaults to 3.12.
# Extra names (NAME==VERSION) in $GPU_WHEELS_EXTRA are downloaded too.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-.whl}"
PYV="${2:-3.12}"
mkdir -p "$DEST"
# The versions are pyproject.toml's lower bounds (the ones the suite runs with), and their
# dependencies that such an image lacks.
PACKAGES=(
  "ott-jax==0.6.0" "jaxopt==0.8.5"
  "grain==0.2.18" "array-record==0.8.6" "portpicker==1.6.0"
  "tensorboardX==2.6.5"
  ${GPU_WHEELS_EXTRA:-}
)
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64 manylinux_2_24_x86_64 manylinux_2_31_x86_64 manylinux_2_34_x86_64; do
  PLATFORMS+=(--platform "$p")
done
for pkg in "${PACKAGES[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" \
    --implementation cp "${PLATFORMS[@]}" -d "$DEST" "$pkg"
done
ls -1 "$DEST"
du -sh "$DEST"
