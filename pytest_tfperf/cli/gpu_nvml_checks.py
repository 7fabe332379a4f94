"""The GPU self-check's record of one check, the GPU work it drives (CuPy or PyTorch), and the NVML checks.

The NVML checks here run in this process: a known allocation read by the NVML
probe, and the cost of the NVML sampler on a GPU step. CuPy and PyTorch are
imported only when a check asks for them.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_tfperf.probes import nvml

GIB = 2**30
MIB = 2**20
OPS_ENV = "TFPERF_GPU_CHECK_OPS"  # which GPU library the generated tests use: "torch", "cupy" or "module:attr"

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


def guarded(name: str, needs: str, body: Callable[[], Check]) -> Check:
    try:
        return body()
    except Exception as exc:  # noqa: BLE001 - one check's crash is its result, the others still run
        return Check(name, needs, FAIL, f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")


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
