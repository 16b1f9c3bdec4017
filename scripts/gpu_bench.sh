#!/usr/bin/env bash
# The GPU run of the Pallas kernels (issues 4, 12, 14, 46), on a machine whose Python already has
# JAX with CUDA and that may have no network: the checkout is taken by PYTHONPATH (nothing is
# installed into that Python), and packages it lacks come from a folder of wheels prepared where
# the network is (scripts/gpu_wheels.sh), installed with --no-index into a temporary --target.
# Parts, each under its own time limit so that one hanging does not take the others with it:
#   1. env.txt: nvidia-smi, jax and its devices (stops here, status 2, if JAX sees no GPU);
#   2. lower.log: `python -m pallas_kernels.lower --platform=cuda` (every kernel lowers to Triton);
#   3. native_tests.log: the `gpu`-marked native kernel tests;
#   4. bench.log, kernels_bench/: correctness, memory, and the GPU rows (attention Pallas / cuDNN /
#      XLA, float32 attention precision and grid variants, matmul, chunkwise mLSTM, a flash tile
#      sweep, JAX's Mosaic GPU attention for reference), ratios from one process;
#   5. mlr_bench_{float32,bfloat16}.log, mlr_attention_bench_*/: the Pallas MLR kernel against
#      Pallas flash attention at T = 4096;
#   6. contract_tests.log: every attention impl against XLA;
#   7. summary.json and summary.md (scripts/gpu_summary.py): every ratio of issue 46's table.
#
# Usage: bash scripts/gpu_bench.sh [--quick] [--dry-run] [RESULTS_DIR]
#   --quick    the short-lease mode (kernels_bench's "quick" preset without the tile sweeps, fewer
#              MLR rounds). On the H200 of pallas_kernels/README.md, with the sweeps still in
#              it, the parts took 16 + 85 + 209 s, then 2.4 min for the MLR runs and the contract
#              test: about 7.5 minutes, over the 6 aimed at; without the sweeps unmeasured.
#   --dry-run  the same parts on this machine's CPU with tiny shapes (kernels interpreted, the
#              native tests skipped): checks the script before a lease.
#   RESULTS_DIR defaults to $OUT when set (device runners), else runs/gpu_bench_<timestamp>.
# Environment: PYTHON (default python3, else python); WHEELS (default .whl: installed when it
#   holds wheels); TIME_SCALE multiplies every part's time limit (default 1).
# Exit status: 0 if every part passed, 1 if one failed, 2 if JAX sees no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=0
DRY=0
RESULTS=""
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --dry-run) DRY=1 ;;
    -*) echo "unknown option $arg" >&2; exit 64 ;;
    *) RESULTS="$arg" ;;
  esac
done
RESULTS="${RESULTS:-${OUT:-runs/gpu_bench_$(date +%Y%m%d_%H%M%S)}}"
mkdir -p "$RESULTS"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
SCALE="${TIME_SCALE:-1}"
limit() { echo $(( $1 * SCALE )); }

# Missing packages from prepared wheels, into a folder of their own (the system Python untouched).
WHEELS="${WHEELS:-.whl}"
EXTRA=""
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE="$(mktemp -d)/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl || { echo "installing $WHEELS failed" >&2; exit 1; }
  EXTRA=":$SITE"
fi
export PYTHONPATH="$PWD$EXTRA${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # tests and benchmarks share the GPU one at a time
if [ "$DRY" -eq 1 ]; then
  export JAX_PLATFORMS=cpu
  PRESET=dry
  MLR=(--smoke)
else
  export JAX_PLATFORMS=cuda  # tests/conftest.py falls back to the CPU unless this is set
  PRESET=$([ "$QUICK" -eq 1 ] && echo quick || echo default)
  MLR=(--set dense_reference=false --set pallas=true)
  [ "$QUICK" -eq 1 ] && MLR+=(--set repeats=5 --set exp_repeats=5)
fi

{ date -u; nvidia-smi 2>&1 | head -20; "$PY" -c "import jax, jaxlib, sys; print(sys.version);
print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"; } >"$RESULTS/env.txt" 2>&1
if [ "$DRY" -eq 0 ] && ! "$PY" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" \
    2>>"$RESULTS/env.txt"; then
  echo "JAX sees no GPU; nothing run (details in $RESULTS/env.txt)" >&2
  exit 2
fi

status=0
part() {  # part NAME SECONDS LOG COMMAND...: one part under its time limit, its output logged
  local name=$1 seconds=$2 log=$3
  shift 3
  local start=$SECONDS
  timeout "$(limit "$seconds")" "$@" >"$RESULTS/$log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $((SECONDS - start)) s" | tee -a "$RESULTS/parts.txt"
  [ "$rc" -eq 0 ] || status=1
}

part lower 150 lower.log "$PY" -m pallas_kernels.lower --platform=cuda
part native_tests 180 native_tests.log "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/kernels
part kernels_bench 300 bench.log "$PY" experiments/run.py --exp=kernels_bench \
  --set preset="$PRESET" --workdir "$RESULTS/kernels_bench"
for dtype in float32 bfloat16; do
  part "mlr_bench_$dtype" 120 "mlr_bench_$dtype.log" "$PY" experiments/run.py \
    --exp=mlr_attention_bench "${MLR[@]}" --set dtype="$dtype" \
    --workdir "$RESULTS/mlr_attention_bench_$dtype"
done
part contract_tests 90 contract_tests.log "$PY" -m pytest -q -p no:cacheprovider \
  tests/nn/test_attention.py -k every_impl
"$PY" scripts/gpu_summary.py "$RESULTS" || status=1

echo "results in $RESULTS (status $status)"
exit $status
