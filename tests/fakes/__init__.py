"""Stand-ins for TensorFlow's memory API and for nvidia-ml-py's ``pynvml``, for unit tests.

Both are injected through ``sys.modules`` (``monkeypatch.setitem``) or passed
explicitly, so the code under test runs its real import path. They model only
what the probes use, with the behaviours measured or documented for the real
thing: TF's allocator counters that raise ``ValueError`` (oneDNN off) or stay
at zero (system allocator), NVML's ``NVMLError_*`` classes, per-process memory
lists and device-level ``used``.
"""

from __future__ import annotations

import contextlib
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# -- TensorFlow ----------------------------------------------------------------


class FakeTensor:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


class FakeTensorFlow(types.ModuleType):
    """``tf.config.experimental`` memory stats, ``tf.device``, ``tf.ones`` and ``tf.config.threading``.

    ``stats`` is ``"counting"`` (the default oneDNN allocator), ``"value_error"``
    (``TF_ENABLE_ONEDNN_OPTS=0``: stats calls raise ``ValueError``) or
    ``"zeros"`` (``TF_ONEDNN_USE_SYSTEM_ALLOCATOR=true``: counters stay 0).
    """

    float32 = "float32"

    def __init__(self, *, stats: str = "counting", gpus: int = 0, intra_op_threads: int = 0,
                 inter_op_threads: int = 0) -> None:
        super().__init__("tensorflow")
        self.stats = stats
        self.devices = ["CPU:0"] + [f"GPU:{i}" for i in range(gpus)]
        self.current = {d: 0 for d in self.devices}
        self.peak_bytes = {d: 0 for d in self.devices}
        self.fail_next_stats_call: Exception | None = None
        self._device_stack = ["CPU:0"]
        self.intra_op_threads = intra_op_threads
        self.inter_op_threads = inter_op_threads
        self.config = types.SimpleNamespace(
            experimental=types.SimpleNamespace(
                reset_memory_stats=self._reset_memory_stats,
                get_memory_info=self._get_memory_info,
            ),
            list_logical_devices=self._list_logical_devices,
            threading=types.SimpleNamespace(
                get_intra_op_parallelism_threads=lambda: self.intra_op_threads,
                get_inter_op_parallelism_threads=lambda: self.inter_op_threads,
            ),
        )

    # the API the probes call

    @contextlib.contextmanager
    def device(self, name: str) -> Iterator[None]:
        self._device_stack.append(name)
        try:
            yield
        finally:
            self._device_stack.pop()

    def ones(self, shape: list[int], dtype: str = "float32") -> FakeTensor:
        assert dtype == "float32"
        count = 1
        for dim in shape:
            count *= dim
        return self.allocate(self._device_stack[-1], 4 * count)

    def _list_logical_devices(self, kind: str) -> list[Any]:
        return [types.SimpleNamespace(name=f"/job:localhost/replica:0/task:0/device:{d}")
                for d in self.devices if d.startswith(kind)]

    def _check(self, device: str, verb: str) -> None:
        if self.fail_next_stats_call is not None:
            exc, self.fail_next_stats_call = self.fail_next_stats_call, None
            raise exc
        if self.stats == "value_error":
            raise ValueError(f"{verb} for device '{device}'")
        if device not in self.devices:
            raise ValueError(f"Invalid device name '{device}'")

    def _reset_memory_stats(self, device: str) -> None:
        self._check(device, "Cannot reset memory stats")
        self.peak_bytes[device] = self.current[device]

    def _get_memory_info(self, device: str) -> dict[str, int]:
        self._check(device, "Allocator stats not available")
        return {"current": self.current[device], "peak": self.peak_bytes[device]}

    # test controls

    def allocate(self, device: str, nbytes: int) -> FakeTensor:
        """A live tensor of ``nbytes`` on ``device``; freed when the returned object is collected."""
        tensor = FakeTensor(nbytes)
        if self.stats == "counting":
            self.current[device] += nbytes
            self.peak_bytes[device] = max(self.peak_bytes[device], self.current[device])
            weakref.finalize(tensor, self._free, device, nbytes)
        return tensor

    def _free(self, device: str, nbytes: int) -> None:
        self.current[device] -= nbytes


# -- pynvml ------------------------------------------------------------------------


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    total_bytes: int = 80 * 2**30
    used_bytes: int = 500 * 2**20
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> usedGpuMemory (None: N/A)
    processes_error: str | None = None  # name of the NVMLError_* class the process query raises
    memory_error: str | None = None  # same, for nvmlDeviceGetMemoryInfo
    on_memory_read: Callable[[FakeGpu], None] | None = None
    busy_percent: int = 0  # nvmlDeviceGetUtilizationRates().gpu
    utilization_error: str | None = None  # NVMLError_* class name nvmlDeviceGetUtilizationRates raises
    # nvmlDeviceGetProcessUtilization's buffer: (pid, timeStamp in us, smUtil %); the driver answers
    # NVMLError_NotFound when no sample is newer than the timestamp asked for.
    process_samples: list[tuple[int, int, int]] = field(default_factory=list)
    process_utilization_error: str | None = None


_ERROR_NAMES = {
    "Uninitialized": 1, "InvalidArgument": 2, "NotSupported": 3, "NoPermission": 4, "NotFound": 6,
    "DriverNotLoaded": 9, "LibraryNotFound": 12, "GpuIsLost": 15, "Unknown": 999,
}


def make_fake_pynvml(gpus: list[FakeGpu] | None = None, *, init_error: str | None = None,
                     driver_version: str = "550.54.15", names_as_bytes: bool = False) -> types.ModuleType:
    """A ``pynvml`` module over ``gpus``.

    ``init_error`` names the ``NVMLError_*`` class ``nvmlInit`` raises (e.g.
    ``"LibraryNotFound"``, what the real module raises without a driver).
    ``module.init_count`` tracks ``nvmlInit``/``nvmlShutdown`` pairing and
    ``module.memory_reads_by_thread`` who read the memory (sampler thread or caller).
    """
    gpus = list(gpus or [])
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        value = 999

        def __str__(self) -> str:
            return f"NVML error {self.value} ({type(self).__name__})"

    module.NVMLError = NVMLError
    for suffix, code in _ERROR_NAMES.items():
        setattr(module, f"NVMLError_{suffix}", type(f"NVMLError_{suffix}", (NVMLError,), {"value": code}))

    def error(name: str) -> Exception:
        return getattr(module, f"NVMLError_{name}")()

    module.init_count = 0
    module.memory_reads_by_thread = {}
    lock = threading.Lock()

    def text(value: str) -> Any:
        return value.encode() if names_as_bytes else value

    def require_init() -> None:
        if module.init_count <= 0:
            raise error("Uninitialized")

    def nvmlInit() -> None:
        if init_error is not None:
            raise error(init_error)
        module.init_count += 1

    def nvmlShutdown() -> None:
        require_init()
        module.init_count -= 1

    def nvmlDeviceGetCount() -> int:
        require_init()
        return len(gpus)

    def nvmlDeviceGetHandleByIndex(index: int) -> FakeGpu:
        require_init()
        if not 0 <= index < len(gpus):
            raise error("InvalidArgument")
        return gpus[index]

    def nvmlDeviceGetName(handle: FakeGpu) -> Any:
        require_init()
        return text(handle.name)

    def nvmlDeviceGetUUID(handle: FakeGpu) -> Any:
        require_init()
        return text(handle.uuid)

    def nvmlSystemGetDriverVersion() -> Any:
        require_init()
        return text(driver_version)

    def nvmlDeviceGetMemoryInfo(handle: FakeGpu, version: Any = None) -> Any:
        require_init()
        if handle.memory_error is not None:
            raise error(handle.memory_error)
        with lock:
            who = threading.current_thread().name
            module.memory_reads_by_thread[who] = module.memory_reads_by_thread.get(who, 0) + 1
        reading = types.SimpleNamespace(total=handle.total_bytes, used=handle.used_bytes,
                                        free=handle.total_bytes - handle.used_bytes)
        if handle.on_memory_read is not None:
            handle.on_memory_read(handle)
        return reading

    def nvmlDeviceGetComputeRunningProcesses(handle: FakeGpu) -> list[Any]:
        require_init()
        if handle.processes_error is not None:
            raise error(handle.processes_error)
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                                      computeInstanceId=0xFFFFFFFF)
                for pid, used in handle.processes.items()]

    def nvmlDeviceGetUtilizationRates(handle: FakeGpu) -> Any:
        require_init()
        if handle.utilization_error is not None:
            raise error(handle.utilization_error)
        return types.SimpleNamespace(gpu=handle.busy_percent, memory=handle.busy_percent // 2)

    def nvmlDeviceGetProcessUtilization(handle: FakeGpu, time_stamp: int) -> list[Any]:
        require_init()
        if handle.process_utilization_error is not None:
            raise error(handle.process_utilization_error)
        newer = [types.SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
                 for pid, ts, sm in handle.process_samples if ts > time_stamp]
        if not newer:
            raise error("NotFound")
        return newer

    for fn in (nvmlInit, nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetName,
               nvmlDeviceGetUUID, nvmlSystemGetDriverVersion, nvmlDeviceGetMemoryInfo,
               nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetUtilizationRates,
               nvmlDeviceGetProcessUtilization):
        setattr(module, fn.__name__, fn)
    return module
