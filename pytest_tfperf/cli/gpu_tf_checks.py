"""The GPU self-check's TensorFlow checks, on TensorFlow's CUDA build.

A known tensor on ``GPU:0`` read by TensorFlow's allocator probe within 1%;
``tf.test.experimental.sync_devices`` timing a known amount of GPU work; an
out-of-memory error under a 256 MiB memory cap turned into a test failure;
catalog scenario 11 (GPU memory growth and caps).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from pytest_tfperf.cli.gpu_nvml_checks import FAIL, MIB, NOT_RUN, PASS, Check, guarded
from pytest_tfperf.cli.gpu_plugin_checks import SUBPROCESS_TIMEOUT_S, run_pytest


# -- TensorFlow (CUDA build) ------------------------------------------------------------------------

TF_OOM_CONFTEST = '''\
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

# The cap must be set before TensorFlow touches the GPU: here, at collection.
_gpus = tf.config.list_physical_devices("GPU")
tf.config.set_logical_device_configuration(_gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=256)])
'''

TF_OOM_TEST = '''\
import tensorflow as tf


def test_oom_under_a_256_mib_cap(tfperf):
    def step():
        with tf.device("GPU:0"):
            return tf.reduce_sum(tf.ones([256 * 2**20], tf.float32))  # 1 GiB of float32, four times the cap

    tfperf(step, items=1)
'''


def tensorflow_checks(tf: Any, workdir: Path) -> list[Check]:
    """The TensorFlow GPU paths; each says why it did not run where it could not."""
    needs = "TensorFlow (CUDA)"
    try:
        gpus = tf.config.list_logical_devices("GPU")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        gpus, why = [], f"listing GPUs failed: {type(exc).__name__}: {exc}"
    else:
        why = "TensorFlow sees no GPU (a CPU-only build, or its CUDA libraries are missing)"
    names = ("TF allocator reads a 256 MiB tensor on GPU:0", "sync_devices times known GPU work",
             "GPU out-of-memory under a 256 MiB cap fails the test", "catalog scenario 11 (GPU memory config)")
    if not gpus:
        return [Check(n, needs, NOT_RUN, why) for n in names]
    checks = [guarded(names[0], needs, lambda: _tf_allocator(tf)),
              guarded(names[1], needs, lambda: _tf_sync(tf))]
    oom_dir = workdir / "tf_oom"
    oom_dir.mkdir(exist_ok=True)
    (oom_dir / "conftest.py").write_text(TF_OOM_CONFTEST, encoding="utf-8")
    (oom_dir / "test_tf_oom.py").write_text(TF_OOM_TEST, encoding="utf-8")
    run = run_pytest(oom_dir, ["--tfperf", "test_tf_oom.py"], timeout_s=SUBPROCESS_TIMEOUT_S)
    line = next((x.strip() for x in run.output.splitlines() if "out of memory on GPU:0" in x), "")
    ok = run.returncode == 1 and bool(line)
    checks.append(Check(names[2], needs, PASS if ok else FAIL,
                        line[:300] or f"pytest exited {run.returncode}: " + " | ".join(run.output.splitlines()[-4:])))
    cat_dir = workdir / "catalog"
    cat_dir.mkdir(exist_ok=True)
    run = run_pytest(cat_dir, ["--tfperf", "--pyargs", "pytest_tfperf.catalog.test_catalog", "-k", "gpu_memory_config"],
                     timeout_s=SUBPROCESS_TIMEOUT_S)
    last = (run.output.strip().splitlines() or [""])[-1]
    checks.append(Check(names[3], needs, PASS if run.returncode == 0 and " passed" in last else FAIL,
                        f"pytest exited {run.returncode}: {last[:300]}"))
    return checks


def _tf_allocator(tf: Any) -> Check:
    from pytest_tfperf.probes.memory_probes import TfAllocatorProbe

    name, needs, nbytes = "TF allocator reads a 256 MiB tensor on GPU:0", "TensorFlow (CUDA)", 256 * MIB
    probe = TfAllocatorProbe("GPU:0", tf_module=tf)
    if probe.unavailable is not None:
        return Check(name, needs, FAIL, probe.unavailable)
    start = probe.reset()
    with tf.device("GPU:0"):
        tensor = tf.ones([nbytes // 4], tf.float32)
    peak = probe.peak()
    del tensor
    if start is None or peak is None:
        return Check(name, needs, FAIL, f"no reading: {probe.unavailable}")
    error = abs(peak - start - nbytes) / nbytes
    return Check(name, needs, PASS if error <= 0.01 else FAIL,
                 f"peak rose {(peak - start) / MIB:,.2f} MiB for a {nbytes / MIB:,.0f} MiB tensor ({error:.2%} off)",
                 {"added_bytes": peak - start, "error": round(error, 5)})


def _tf_sync(tf: Any, repeats: int = 7) -> Check:
    name, needs = "sync_devices times known GPU work", "TensorFlow (CUDA)"
    sync = tf.test.experimental.sync_devices
    with tf.device("GPU:0"):
        a = tf.random.normal([4096, 4096])

    def timed(reps: int, synchronise: bool) -> float:
        t = time.perf_counter_ns()
        with tf.device("GPU:0"):
            for _ in range(reps):
                out = tf.linalg.matmul(a, a)
        if synchronise:
            sync()
        elapsed = time.perf_counter_ns() - t
        del out
        sync()  # queued work never spills into the next timing
        return elapsed / 1e6

    timed(5, True)
    one = statistics.median(timed(5, True) for _ in range(repeats))
    four = statistics.median(timed(20, True) for _ in range(repeats))
    queued = statistics.median(timed(20, False) for _ in range(repeats))
    ratio = four / one if one > 0 else float("inf")
    ok = 3.0 <= ratio <= 5.0
    return Check(name, needs, PASS if ok else FAIL,
                 f"20 matmuls {four:.2f} ms vs 5 matmuls {one:.2f} ms (ratio {ratio:.2f}, expected about 4); "
                 f"without sync_devices the 20 took {queued:.2f} ms (queued only)",
                 {"ms_5": round(one, 4), "ms_20": round(four, 4), "ratio": round(ratio, 4), "ms_20_unsynced": round(queued, 4)})
