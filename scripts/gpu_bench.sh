#!/usr/bin/env bash
# The GPU run of the Pallas kernels (issue 4): first the cross-platform lowering check
# (`python -m pallas_kernels.lower --platform=cuda`, issue 12: every kernel, fwd and bwd, lowers to
# Triton), then kernels_bench's TFLOP/s grid (Pallas vs cuDNN vs XLA, fwd and fwd+bwd, as ratios
# from one process), mlr_attention_bench with the Pallas MLR kernel against Pallas flash attention
# (issue 14), and the native-lowering (`gpu`-marked) kernel tests plus the attention contract
# test, on the GPU. Installs nothing: the `python` on PATH must already
# have jax[cuda12] and this checkout (`pip install -e '.[gpu,dev]'`). Budget: ~5 min on an H100/H200
# for the other parts; the MLR bench, never yet run on a GPU, is capped at 4 min.
#
# Usage: bash scripts/gpu_bench.sh [RESULTS_DIR]
#        RESULTS_DIR defaults to $OUT when set (device runners), else runs/gpu_bench_<timestamp>.
# Writes: env.txt (nvidia-smi, jax devices), lower.log, bench.log, kernels_bench/{summary.json,
#         metrics.jsonl,*.png}, mlr_bench.log, mlr_attention_bench/{summary.json,metrics.jsonl},
#         native_tests.log, contract_tests.log. Exit status: non-zero if any part failed.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS="${1:-${OUT:-runs/gpu_bench_$(date +%Y%m%d_%H%M%S)}}"
mkdir -p "$RESULTS"
export JAX_PLATFORMS=cuda  # tests/conftest.py falls back to the CPU unless this is set

{ nvidia-smi; python -c "import jax; print(jax.__version__, jax.devices())"; } >"$RESULTS/env.txt" 2>&1
if ! python -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>>"$RESULTS/env.txt"; then
  echo "JAX sees no GPU; nothing run (details in $RESULTS/env.txt)" >&2
  exit 2
fi

status=0
# Lowering only (no kernel runs): if this fails, the GPU numbers below cannot be trusted either.
timeout 120 python -m pallas_kernels.lower --platform=cuda 2>&1 | tee "$RESULTS/lower.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

timeout 360 python experiments/run.py --exp=kernels_bench --workdir "$RESULTS/kernels_bench" \
  2>&1 | tee "$RESULTS/bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# Issue 14's speed target on the GPU: the Pallas MLR kernel against Pallas flash attention at
# T = 4096 (forward and forward+backward ratios from one process), beside the XLA paths.
timeout 240 python experiments/run.py --exp=mlr_attention_bench --set pallas=true \
  --set dense_reference=false --workdir "$RESULTS/mlr_attention_bench" 2>&1 | tee "$RESULTS/mlr_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

timeout 180 python -m pytest -q -p no:cacheprovider -m gpu tests/kernels \
  2>&1 | tee "$RESULTS/native_tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

timeout 60 python -m pytest -q -p no:cacheprovider tests/nn/test_attention.py -k every_impl \
  2>&1 | tee "$RESULTS/contract_tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "results in $RESULTS (status $status)"
exit $status
