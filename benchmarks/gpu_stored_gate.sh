#!/usr/bin/env bash
# The stored-baseline gate on a GPU machine, end to end with the plugin's defaults, from the repository root:
#
#     OUT=/some/folder bash benchmarks/gpu_stored_gate.sh
#
# Needs PyTorch with CUDA (no TensorFlow: the plugin measures any Python callable). The plugin loads from
# this source tree through PYTEST_PLUGINS, so the refresh's extra processes and the confirmation process
# load it too. Steps: a refresh (pytest --tfperf --tfperf-update: the default 7 runs, each in its own
# process; the default was 5 when it ran on the H200 in benchmarks/results/gpu-h200) of a bf16 matmul
# step; 3 A/A runs; 3 runs with 10% more work per item (GPUCHECK_REPS=22 against 20).
# Writes $OUT/gpu_stored_gate.txt (each run's verdict lines) and the --tfperf-json of the last runs.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-stored-gate-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTEST_PLUGINS=pytest_tfperf.plugin
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
WORK=$(mktemp -d)
cat > "$WORK/test_gpu_step.py" <<'PY'
import os


def _matmul_step(a, b, reps):
    import torch
    for _ in range(reps):
        c = a @ b
    torch.cuda.synchronize()
    return c


def test_gpu_matmul_step(tfperf):
    import torch
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    reps = int(os.environ.get("GPUCHECK_REPS", "20"))
    tfperf(_matmul_step, a, b, reps, items=20)  # items fixed: more reps = slower per item
PY
log="$OUT/gpu_stored_gate.txt"
run() {  # label, then pytest arguments
  local label=$1; shift
  echo "=== $label" | tee -a "$log"
  (cd "$WORK" && timeout 150 "$PYTHON" -m pytest -q -p no:cacheprovider --tfperf "$@" test_gpu_step.py 2>&1) \
    | grep -E "throughput:|catches|test_gpu|stored baselines|fresh process|passed|failed|baselines written|ERROR" \
    | cut -c1-600 | tee -a "$log"
}
run "refresh" --tfperf-update
for i in 1 2 3; do run "A/A $i" --tfperf-json="$OUT/aa.json"; done
for i in 1 2 3; do GPUCHECK_REPS=22 run "+10% work $i" --tfperf-json="$OUT/plus10.json"; done
cp "$WORK"/benchmarks/baselines/*.json "$OUT/baseline.json" 2>/dev/null
rm -rf "$WORK"
