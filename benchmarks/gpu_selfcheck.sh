#!/usr/bin/env bash
# The GPU self-check on a machine with an NVIDIA GPU, from the repository root:
#
#     OUT=/some/folder bash benchmarks/gpu_selfcheck.sh
#
# Loads the plugin from this source tree (PYTHONPATH=$PWD; nothing is installed) and writes to $OUT
# (default ./gpu-selfcheck-out):
#   gpu_check.json / gpu_check.txt   python -m pytest_tfperf.gpu_check: what ran and what it found
#   gpu_check_work/                  the plugin run it makes: generated tests, plugin_results.json (--tfperf-json)
#   machine.txt                      nvidia-smi, Python and library versions
# Works with CuPy, PyTorch, both or neither (then only the inventory runs), with or without TensorFlow;
# without a GPU it says "no GPU" and exits 0. Bounded to about 4 minutes; exits with the self-check's status.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-selfcheck-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
start=$(date +%s)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,utilization.gpu \
      --format=csv 2>&1 || echo "nvidia-smi failed"
  else
    echo "nvidia-smi: not found"
  fi
  timeout 60 "$PYTHON" - <<'EOF' 2>&1
import importlib, sys
print("python", sys.version.split()[0])
for name in ("pytest", "pynvml", "torch", "cupy", "tensorflow", "pandas", "psutil"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "installed"))
    except Exception as exc:
        print(name, "missing:", type(exc).__name__, str(exc)[:120])
EOF
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"

# The self-check itself, bounded so that the whole script stays under 4 minutes (on an emulated GPU
# here it took 26 s; the TensorFlow checks, where TensorFlow is installed, add their own subprocesses).
timeout 210 "$PYTHON" -m pytest_tfperf.gpu_check --json "$OUT/gpu_check.json" --workdir "$OUT/gpu_check_work" \
  2>&1 | tee "$OUT/gpu_check.txt"
status=${PIPESTATUS[0]}
if [ "$status" = 124 ]; then
  echo "gpu_check: timed out after 210 s (what it wrote so far is in $OUT)" | tee -a "$OUT/gpu_check.txt"
fi
echo "exit status $status; $(( $(date +%s) - start )) s; results in $OUT" | tee -a "$OUT/gpu_check.txt"
exit "$status"
