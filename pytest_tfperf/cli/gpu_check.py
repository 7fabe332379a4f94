"""GPU self-check: ``python -m pytest_tfperf.gpu_check [--json PATH]``.

On a machine with an NVIDIA GPU it runs every GPU path of the plugin that the
installed libraries allow and prints a table of what ran and what it found:

* with TensorFlow's CUDA build: a known tensor on ``GPU:0`` read by TensorFlow's
  allocator probe within 1%; ``tf.test.experimental.sync_devices`` timing a
  known amount of GPU work (4x the matmuls must take about 4x the time); an
  out-of-memory error under a 256 MiB memory cap turned into a test failure;
  catalog scenario 11 (GPU memory growth and caps);
* with CuPy or PyTorch (TensorFlow or not): the NVML checks. A known 1 GiB
  allocation read by the NVML probe; then the plugin itself, run by pytest on a
  small generated test file: the same allocation in the results JSON, a device
  budget that must fail, a saturated step against an input-starved one (NVML
  busy fraction and the "GPU waits" diagnosis), a ``min_gpu_busy_fraction``
  budget that must fail; and the cost of the NVML sampler on a GPU step (time
  ratio with the sampler on and off).

Without a GPU it says "no GPU" and why, and exits 0: it runs, as part of the
test suite, on machines that have none. Exit status 1 means a check failed.
Nothing is imported at module level beyond the standard library and the
plugin's own light modules: TensorFlow, CuPy and PyTorch only when a GPU is
there.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_tfperf.probes import nvml

GIB = 2**30
MIB = 2**20
SCHEMA = "pytest-tfperf/gpu-check"
OPS_ENV = "TFPERF_GPU_CHECK_OPS"  # which GPU library the generated tests use: "torch", "cupy" or "module:attr"
PLUGIN_TIMEOUT_S = 150.0
SUBPROCESS_TIMEOUT_S = 120.0
# The plugin run's test ids (file name and test names are fixed: the evaluation reads them back).
PLUGIN_FILE = "test_gpu_check_plugin.py"

PASS, FAIL, NOT_RUN, INFO = "pass", "FAIL", "not run", "info"


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the table: what ran (or why not) and what it found."""

    name: str
    needs: str  # what it needs: "NVML", "CuPy or PyTorch", "TensorFlow (CUDA)"
    status: str  # pass, FAIL, not run, info
    found: str
    figures: dict[str, float | str | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "needs": self.needs, "status": self.status, "found": self.found,
                "figures": dict(self.figures)}


# -- the GPU work, with CuPy or PyTorch ------------------------------------------------------------


class GpuOps:
    """What the NVML checks do on the GPU: hold a known allocation, and run a fixed amount of matmul work.

    Allocations go through CuPy with its memory pool off where CuPy is
    installed (plain ``cudaMalloc``/``cudaFree``: NVML sees each allocation come
    and go, as measured on the H200), else PyTorch with its cache emptied after
    each hold. The work is PyTorch bf16 4096x4096 matmuls where PyTorch is
    installed (the H200 run's step), else CuPy float16 ones.
    """

    def __init__(self, torch: Any = None, cupy: Any = None) -> None:
        if torch is None and cupy is None:
            raise ValueError("GpuOps needs PyTorch or CuPy")
        self._torch, self._cupy = torch, cupy
        self.name = "+".join(n for n, m in (("CuPy", cupy), ("PyTorch", torch)) if m is not None)
        self.work_with = "PyTorch bf16" if torch is not None else "CuPy float16"
        self._a: Any = None
        self._b: Any = None

    def context(self) -> None:
        """Create the CUDA context and the matmul operands (untimed: tests call it before measuring)."""
        if self._a is not None:
            return
        n = 4096
        if self._cupy is not None:
            self._cupy.cuda.set_allocator(None)  # plain cudaMalloc/cudaFree
            (self._cupy.zeros(1) + 1).sum().item()
        if self._torch is not None:
            torch = self._torch
            self._a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            self._b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        else:
            cp = self._cupy
            self._a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            self._b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
        self.sync()

    def sync(self) -> None:
        if self._torch is not None:
            self._torch.cuda.synchronize()
        if self._cupy is not None:
            self._cupy.cuda.runtime.deviceSynchronize()

    def hold(self, nbytes: int, seconds: float) -> None:
        """Allocate ``nbytes`` on the GPU, write them, hold them ``seconds`` (a few NVML samples), free them."""
        if self._cupy is not None:
            block = self._cupy.empty(nbytes, dtype=self._cupy.uint8)
            block.fill(1)
            self._cupy.cuda.runtime.deviceSynchronize()
            time.sleep(seconds)
            del block
            return
        torch = self._torch
        block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        block.fill_(1)
        torch.cuda.synchronize()
        time.sleep(seconds)
        del block
        torch.cuda.empty_cache()  # give it back to the driver, so that NVML sees it go

    def work(self, reps: int) -> object:
        """``reps`` 4096x4096 matmuls, waited for."""
        self.context()
        out = None
        for _ in range(reps):
            out = self._a @ self._b
        self.sync()
        return out


def load_ops(spec: str = "") -> Any:
    """The GPU ops: ``"torch"``, ``"cupy"``, ``"module:attr"`` (a factory, for tests) or ``""`` (whatever is installed)."""
    if ":" in spec:
        module, attr = spec.split(":", 1)
        return getattr(importlib.import_module(module), attr)()
    torch = _import("torch") if spec in ("", "torch") else None
    cupy = _import("cupy") if spec in ("", "cupy") else None
    if torch is not None and not torch.cuda.is_available():
        torch = None
    return GpuOps(torch=torch, cupy=cupy)


def _import(name: str) -> Any:
    if not _installed(name):
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install is the same as none, for this check
        return None


def available_libraries() -> dict[str, bool]:
    """Which GPU libraries are installed (found, not imported: TensorFlow alone takes seconds to import)."""
    return {name: _installed(name) for name in ("tensorflow", "torch", "cupy", "pynvml")}


def _installed(name: str) -> bool:
    if sys.modules.get(name) is not None:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken package, or a module put into sys.modules without a spec
        return False


# -- NVML checks, in this process ------------------------------------------------------------------


def check_known_allocation(ops: Any, *, nbytes: int = GIB, hold_s: float = 0.1) -> Check:
    """A known allocation, read by the NVML probe as what the round added: within 1%."""
    name, needs = "NVML probe reads a known 1 GiB allocation", "CuPy or PyTorch"
    probe = nvml.nvml_probes()[0]
    try:
        if probe.unavailable is not None:
            return Check(name, needs, FAIL, f"the NVML probe is unavailable: {probe.unavailable}")
        ops.context()
        start = probe.reset()
        ops.hold(nbytes, hold_s)
        peak = probe.peak()
        if start is None or peak is None:
            return Check(name, needs, FAIL, f"no reading: {probe.unavailable}")
        added = peak - start
        error = abs(added - nbytes) / nbytes
        scope = getattr(probe, "scope", "")
        found = (f"added {added / MIB:,.1f} MiB of {nbytes / MIB:,.0f} ({error:.2%} off; start {start / MIB:,.0f} MiB, "
                 f"{'this process' if scope == 'process' else 'whole device'})")
        return Check(name, needs, PASS if error <= 0.01 else FAIL, found,
                     {"added_bytes": added, "start_bytes": start, "peak_bytes": peak, "scope": scope,
                      "detail": getattr(probe, "detail", "")})
    finally:
        probe.close()


def check_sampler_cost(ops: Any, *, pairs: int = 12, calls: int = 60, reps: int = 20,
                       clock: Callable[[], int] = time.perf_counter_ns) -> Check:
    """The NVML sampler (memory and utilisation) on and off around a GPU step: median per-call time ratio."""
    name, needs = "NVML sampler cost on a GPU step (on/off)", "CuPy or PyTorch"
    probe = nvml.nvml_probes()[0]
    try:
        if probe.unavailable is not None:
            return Check(name, needs, FAIL, f"the NVML probe is unavailable: {probe.unavailable}")
        ops.context()

        def run(n: int) -> float:
            t = clock()
            for _ in range(n):
                ops.work(reps)
            return (clock() - t) / n

        step_ns = run(max(1, calls // 2))  # warm up (cuBLAS heuristics, clocks)
        # About 0.25 s a half-pair (60 calls of the H200's 4.3 ms step), fewer calls on a slower GPU.
        calls = max(5, min(calls, int(0.25e9 / step_ns))) if step_ns > 0 else calls
        ratios, bare = [], 0.0
        for _ in range(pairs):
            bare = run(calls)
            probe.reset()
            sampled = run(calls)
            probe.peak()
            ratios.append(sampled / bare if bare > 0 else 1.0)
        median = statistics.median(ratios)
        last = getattr(probe, "last_busy", None)  # the NVML probe's busy reading of the last "on" window
        busy = last.fraction if last is not None else None
        found = (f"median on/off ratio {median:.3f} over {pairs} interleaved pairs of {calls} calls; step {bare / 1e6:.2f} ms "
                 f"({reps} {getattr(ops, 'work_with', '')} 4096x4096 matmuls)")
        # The memory sampler alone read 0.996 on the H200; 2% either way is well outside what was measured.
        return Check(name, needs, PASS if abs(median - 1.0) <= 0.02 else FAIL, found,
                     {"median_ratio": round(median, 4), "step_ms": round(bare / 1e6, 4), "calls_per_half_pair": calls,
                      "busy_fraction_last_window": busy, "ratios": json.dumps([round(r, 4) for r in ratios])})
    finally:
        probe.close()


# -- the plugin itself, in a pytest subprocess -------------------------------------------------------

PLUGIN_TESTS = '''\
"""Generated by python -m pytest_tfperf.gpu_check: the plugin's NVML paths on a real GPU."""
import os
import time

import pytest

from pytest_tfperf.cli.gpu_check import load_ops

ops = load_ops(os.environ.get("{ops_env}", ""))
GIB = 2**30


def test_known_allocation(tfperf):
    ops.context()
    tfperf(ops.hold, GIB, 0.06, items=1)  # 0.06 s: three NVML sampling intervals


@pytest.mark.tfperf(max_peak_device_bytes=256 * 2**20)
def test_device_budget_must_fail(tfperf):
    ops.context()
    tfperf(ops.hold, GIB, 0.06, items=1)


def test_saturated(tfperf):
    ops.context()
    tfperf(ops.work, 20, items=20)


def starved():
    time.sleep(0.008)  # the host prepares the next batch for 8 ms; the GPU then works well under 1 ms
    ops.work(2)


def test_starved(tfperf):
    ops.context()
    tfperf(starved, items=2)


@pytest.mark.tfperf(min_gpu_busy_fraction=0.5)
def test_min_gpu_busy_budget_must_fail(tfperf):
    ops.context()
    tfperf(starved, items=2)
'''


@dataclass(frozen=True, slots=True)
class PytestRun:
    """A pytest subprocess's exit status, output and (when it wrote one) results document."""

    returncode: int
    output: str
    results: dict[str, Any] | None
    seconds: float


def run_pytest(directory: Path, args: Sequence[str], *, env: dict[str, str] | None = None,
               timeout_s: float = PLUGIN_TIMEOUT_S, json_path: Path | None = None) -> PytestRun:
    """``python -m pytest`` in ``directory`` with only this plugin loaded (from this source tree or the install)."""
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    environment = dict(os.environ if env is None else env)
    # Only the plugin named with -p: an installed copy (entry point) would register it twice.
    environment["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    root = str(Path(__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (root, environment.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "pytest", "-p", "pytest_tfperf.plugin", "-p", "no:cacheprovider",
               "-c", str(directory / "pytest.ini"), "--rootdir", str(directory), "-rfs", *args]
    start = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=directory, env=environment, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        code, output = -1, out + f"\n(timed out after {timeout_s:.0f} s)"
    results = None
    if json_path is not None and json_path.exists():
        try:
            results = json.loads(json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            results = None
    return PytestRun(code, output, results, time.monotonic() - start)


def run_plugin_checks(workdir: Path, ops_spec: str, *, budget_s: float = 1.0,
                      env: dict[str, str] | None = None) -> tuple[list[Check], PytestRun]:
    """The generated test file under ``pytest --tfperf``, and what its results say."""
    (workdir / PLUGIN_FILE).write_text(PLUGIN_TESTS.format(ops_env=OPS_ENV), encoding="utf-8")
    environment = dict(os.environ if env is None else env)
    environment[OPS_ENV] = ops_spec
    json_path = workdir / "plugin_results.json"
    run = run_pytest(workdir, ["--tfperf", f"--tfperf-json={json_path}", f"--tfperf-budget={budget_s:g}",
                               PLUGIN_FILE], env=environment, json_path=json_path)
    return evaluate_plugin_run(run), run


def _test(results: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    if not results:
        return None
    entry = results.get("tests", {}).get(f"{PLUGIN_FILE}::{name}")
    return None if entry is None else entry.get("measurement")


def _failed(output: str, name: str) -> bool:
    return any(line.startswith("FAILED") and f"::{name}" in line for line in output.splitlines())


def evaluate_plugin_run(run: PytestRun) -> list[Check]:
    """Checks from a plugin run's results JSON and output (pure: the unit tests feed it documents)."""
    needs = "CuPy or PyTorch"
    if run.results is None:
        tail = " | ".join(run.output.strip().splitlines()[-6:])
        return [Check("plugin run under pytest --tfperf", needs, FAIL,
                      f"pytest exited {run.returncode} without a results file: {tail[:600]}")]
    checks: list[Check] = []

    # 1. the known allocation, through the plugin's JSON
    m = _test(run.results, "test_known_allocation")
    nvml_peak = next((p for p in (m or {}).get("memory", []) if p.get("source") == "nvml"), None)
    name = "plugin: 1 GiB allocation in the results JSON"
    if nvml_peak is None or nvml_peak.get("peak_bytes") is None:
        why = "no measurement" if m is None else (nvml_peak or {}).get("unavailable", "no NVML figure")
        checks.append(Check(name, needs, FAIL, f"not measured: {why}"))
    else:
        peaks, starts = nvml_peak.get("per_round_peak_bytes", []), nvml_peak.get("per_round_start_bytes", [])
        added = [p - s for p, s in zip(peaks, starts)] or [nvml_peak["peak_bytes"] - (nvml_peak.get("baseline_bytes") or 0)]
        worst = max(abs(a - GIB) / GIB for a in added)
        scope = nvml_peak.get("scope", "")
        found = (f"added {min(added) / MIB:,.1f}-{max(added) / MIB:,.1f} MiB per round, peak "
                 f"{nvml_peak['peak_bytes'] / MIB:,.1f} MiB, scope {scope or 'not recorded'}")
        checks.append(Check(name, needs, PASS if worst <= 0.01 and scope in ("process", "device") else FAIL, found,
                            {"added_min_bytes": min(added), "added_max_bytes": max(added),
                             "peak_bytes": nvml_peak["peak_bytes"], "scope": scope,
                             "detail": nvml_peak.get("detail", "")}))

    # 2. a device budget that must fail, with its message
    name = "plugin: max_peak_device_bytes=256 MiB fails"
    line = next((x.strip() for x in run.output.splitlines() if "peak_nvml[GPU:" in x and "limit" in x), "")
    ok = _failed(run.output, "test_device_budget_must_fail") and "the limit applies to the absolute peak" in line
    checks.append(Check(name, needs, PASS if ok else FAIL, line[:300] or "no budget message in the output"))

    # 3. saturated vs starved: NVML busy fraction, and the diagnosis
    name = "plugin: GPU busy, saturated vs input-starved step"
    sat, starved = _test(run.results, "test_saturated"), _test(run.results, "test_starved")
    sat_busy, starved_busy = _busy(sat), _busy(starved)
    if sat_busy is None or starved_busy is None:
        why = "; ".join(f"{label}: {_busy_problem(x)}" for label, x in (("saturated", sat), ("starved", starved)))
        checks.append(Check(name, needs, FAIL, f"no busy fraction: {why}"))
    else:
        sat_d, starved_d = _busy_diagnosis(sat), _busy_diagnosis(starved)
        ok = (sat_busy >= 0.5 > starved_busy and sat_d is not None and sat_d.get("severity") == "info"
              and starved_d is not None and str(starved_d.get("summary", "")).startswith("the GPU waits"))
        found = (f"saturated {sat_busy:.0%}{_own(sat)}, starved {starved_busy:.0%}{_own(starved)}; starved diagnosis: "
                 f"{(starved_d or {}).get('summary', 'none')[:160]}")
        checks.append(Check(name, needs, PASS if ok else FAIL, found,
                            {"saturated_busy": sat_busy, "starved_busy": starved_busy,
                             "saturated_process_busy": _process_busy(sat),
                             "starved_process_busy": _process_busy(starved),
                             "saturated_step_ms": _step_ms(sat), "starved_step_ms": _step_ms(starved)}))

    # 4. the min_gpu_busy_fraction budget on the starved step
    name = "plugin: min_gpu_busy_fraction=0.5 fails a starved step"
    line = next((x.strip() for x in run.output.splitlines() if "gpu_busy_fraction (minimum)" in x), "")
    ok = _failed(run.output, "test_min_gpu_busy_budget_must_fail") and bool(line)
    checks.append(Check(name, needs, PASS if ok else FAIL, line[:300] or "no budget message in the output"))
    return checks


def _busy_entry(m: dict[str, Any] | None) -> dict[str, Any] | None:
    entries = (m or {}).get("gpu_busy", [])
    return next((g for g in entries if g.get("device") == "GPU:0"), entries[0] if entries else None)


def _busy(m: dict[str, Any] | None) -> float | None:
    value = (m or {}).get("extra_metrics", {}).get("gpu_busy_fraction")
    return float(value) if isinstance(value, (int, float)) else None


def _process_busy(m: dict[str, Any] | None) -> float | None:
    value = (_busy_entry(m) or {}).get("process_fraction")
    return float(value) if isinstance(value, (int, float)) else None


def _own(m: dict[str, Any] | None) -> str:
    own = _process_busy(m)
    return f" (this process {own:.0%})" if own is not None else ""


def _busy_problem(m: dict[str, Any] | None) -> str:
    if m is None:
        return "not measured"
    entry = _busy_entry(m)
    return "NVML sampled no GPU" if entry is None else str(entry.get("unavailable") or "no figure")


def _busy_diagnosis(m: dict[str, Any] | None) -> dict[str, Any] | None:
    return next((d for d in (m or {}).get("diagnoses", []) if d.get("kind") == "gpu_busy"), None)


def _step_ms(m: dict[str, Any] | None) -> float | None:
    value = (m or {}).get("summary", {}).get("median_ns")
    return round(float(value) / 1e6, 4) if isinstance(value, (int, float)) else None


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
    checks = [_guarded(names[0], needs, lambda: _tf_allocator(tf)),
              _guarded(names[1], needs, lambda: _tf_sync(tf))]
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


def _guarded(name: str, needs: str, body: Callable[[], Check]) -> Check:
    try:
        return body()
    except Exception as exc:  # noqa: BLE001 - one check's crash is its result, the others still run
        return Check(name, needs, FAIL, f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")


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


# -- the whole check ------------------------------------------------------------------------------

ALL_CHECKS = (
    ("GPU inventory (NVML)", "NVML"),
    ("NVML probe reads a known 1 GiB allocation", "CuPy or PyTorch"),
    ("plugin: 1 GiB allocation in the results JSON", "CuPy or PyTorch"),
    ("plugin: max_peak_device_bytes=256 MiB fails", "CuPy or PyTorch"),
    ("plugin: GPU busy, saturated vs input-starved step", "CuPy or PyTorch"),
    ("plugin: min_gpu_busy_fraction=0.5 fails a starved step", "CuPy or PyTorch"),
    ("NVML sampler cost on a GPU step (on/off)", "CuPy or PyTorch"),
    ("TF allocator reads a 256 MiB tensor on GPU:0", "TensorFlow (CUDA)"),
    ("sync_devices times known GPU work", "TensorFlow (CUDA)"),
    ("GPU out-of-memory under a 256 MiB cap fails the test", "TensorFlow (CUDA)"),
    ("catalog scenario 11 (GPU memory config)", "TensorFlow (CUDA)"),
)


def no_gpu_reason() -> str | None:
    """Why this machine has no GPU to check (None when NVML lists one)."""
    if not nvml.nvidia_driver_visible():
        return "no NVIDIA driver on this machine (no /proc/driver/nvidia/version, /dev/nvidiactl or /dev/dxg)"
    if nvml.gpu_inventory():
        return None
    problem = nvml.gpu_inventory_problem()
    if problem:
        return problem
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "NVML sees no GPU visible to this process" + (
        f" (CUDA_VISIBLE_DEVICES={setting!r})" if setting is not None else "")


def run_checks(*, ops_spec: str = "", workdir: Path | None = None, plugin_budget_s: float = 1.0,
               cost_pairs: int = 12, cost_calls: int = 60) -> tuple[list[Check], dict[str, Any]]:
    """Every check this machine allows, and facts about the machine."""
    facts: dict[str, Any] = {"python": sys.version.split()[0], "libraries": available_libraries()}
    reason = no_gpu_reason()
    if reason is not None:
        facts["gpu"] = None
        facts["no_gpu"] = reason
        return [Check("GPU inventory (NVML)", "NVML", NOT_RUN, f"no GPU: {reason}")] + [
            Check(n, needs, NOT_RUN, "no GPU") for n, needs in ALL_CHECKS[1:]], facts
    gpus = nvml.gpu_inventory()
    facts["gpu"] = [{"label": g.label, "name": g.name, "memory_total_bytes": g.memory_total_bytes,
                     "driver": g.driver_version, "uuid": g.uuid} for g in gpus]
    first = gpus[0]
    checks = [Check("GPU inventory (NVML)", "NVML", INFO,
                    f"{len(gpus)} GPU(s); GPU:0 {first.name}, {first.memory_total_bytes / GIB:,.0f} GiB, "
                    f"driver {first.driver_version}")]
    own_dir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="tfperf-gpu-check-")) if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    libraries = facts["libraries"]
    ops: Any = None
    why_no_ops = ""
    if ops_spec or libraries["torch"] or libraries["cupy"]:
        try:
            ops = load_ops(ops_spec)
            facts["gpu_ops"] = getattr(ops, "name", ops_spec)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            why_no_ops = f"CuPy/PyTorch could not be used: {type(exc).__name__}: {exc}"
    else:
        why_no_ops = "needs CuPy or PyTorch (neither is installed)"
    nvml_names = [n for n, needs in ALL_CHECKS if needs == "CuPy or PyTorch"]
    if ops is None:
        checks += [Check(n, "CuPy or PyTorch", NOT_RUN, why_no_ops) for n in nvml_names]
    else:
        checks.append(_guarded(nvml_names[0], "CuPy or PyTorch", lambda: check_known_allocation(ops)))
        plugin_checks, run = run_plugin_checks(work, ops_spec, budget_s=plugin_budget_s)
        facts["plugin_run"] = {"returncode": run.returncode, "seconds": round(run.seconds, 1),
                               "output_tail": run.output.strip().splitlines()[-60:]}
        checks += plugin_checks
        checks.append(_guarded(nvml_names[-1], "CuPy or PyTorch",
                               lambda: check_sampler_cost(ops, pairs=cost_pairs, calls=cost_calls)))
    tf_names = [n for n, needs in ALL_CHECKS if needs == "TensorFlow (CUDA)"]
    if not libraries["tensorflow"]:
        checks += [Check(n, "TensorFlow (CUDA)", NOT_RUN, "TensorFlow is not installed") for n in tf_names]
    else:
        os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # leave the GPU to the subprocess checks
        try:
            tf = importlib.import_module("tensorflow")
        except Exception as exc:  # noqa: BLE001
            checks += [Check(n, "TensorFlow (CUDA)", NOT_RUN, f"import tensorflow failed: {type(exc).__name__}: {exc}")
                       for n in tf_names]
        else:
            facts["tensorflow"] = getattr(tf, "__version__", "?")
            checks += tensorflow_checks(tf, work)
    if own_dir:
        facts["workdir"] = str(work)
    return checks, facts


def format_table(checks: Sequence[Check]) -> list[str]:
    header = ("check", "needs", "result", "found")
    rows = [(c.name, c.needs, c.status, c.found) for c in checks]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells[:3], widths)) + "  " + cells[3]

    return [line(header), line(["-" * w for w in widths] + ["-----"])] + [line(r) for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_tfperf.gpu_check",
                                     description="Run the plugin's GPU paths on this machine's GPU and say what they found.")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--workdir", metavar="DIR", help="where the generated test files and their results go "
                                                         "(default: a new temporary directory)")
    parser.add_argument("--ops", default=os.environ.get(OPS_ENV, ""),
                        help="GPU library for the NVML checks: torch, cupy (default: whichever is installed)")
    parser.add_argument("--plugin-budget", type=float, default=1.0, metavar="SECONDS",
                        help="steady-state seconds per test in the plugin run (default 1)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    checks, facts = run_checks(ops_spec=args.ops, workdir=Path(args.workdir) if args.workdir else None,
                               plugin_budget_s=args.plugin_budget)
    print("pytest-tfperf GPU self-check")
    if facts.get("gpu") is None:
        print(f"no GPU: {facts.get('no_gpu')}")
    for text in format_table(checks):
        print(text)
    failed = [c for c in checks if c.status == FAIL]
    ran = [c for c in checks if c.status in (PASS, FAIL)]
    print(f"{len(ran)} check(s) ran, {len(failed)} failed, {len(checks) - len(ran) - 1} not run "
          f"({time.monotonic() - started:.0f} s)" if facts.get("gpu") else "nothing to check without a GPU")
    if args.json:
        from pytest_tfperf.storage.atomic_files import atomic_write_text
        from pytest_tfperf.storage.documents import utc_timestamp

        document = {"schema": SCHEMA, "schema_version": 1, "created_at": utc_timestamp(), "machine": facts,
                    "checks": [c.to_dict() for c in checks], "failed": len(failed)}
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
        print(f"results written to {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
