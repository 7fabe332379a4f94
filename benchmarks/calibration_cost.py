"""What the calibration workload adds to each process of a refresh (``pytest_tfperf/measuring/calibration.py``).

    TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python benchmarks/calibration_cost.py

A refresh process has TensorFlow loaded already (its tests imported it); the calibration is built and
measured with the plugin's default settings, as the session does after the process's tests. Prints
the seconds it took: on the 2-core VM, 2.2 to 2.8 s a process, about 2.5% of the catalog's 94 s
processes (docs/explanation/gates.md).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402,F401  (loaded before timing, as in a refresh process)

from pytest_tfperf.measuring import calibration, runner  # noqa: E402
from pytest_tfperf.measuring.workload import RunSettings  # noqa: E402


def main() -> int:
    start = time.perf_counter()
    runner.measure({"": calibration.workload()}, RunSettings(), watch=True)
    print(f"calibration workload, built and measured with the default settings: {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
