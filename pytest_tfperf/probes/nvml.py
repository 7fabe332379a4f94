"""GPU memory from NVIDIA's management library (NVML), and the GPU inventory of the machine.

What has run on a real GPU (an NVIDIA H200, driver 580.159.04, at commit
377958f; docs/how-to/gpu.md): the inventory, and the memory probe's per-process path
(a 1 GiB ``cudaMalloc`` read as exactly 1024.0 MiB above the start), at a
sampler cost of 0.996 on/off on a 4.27 ms GPU step. The utilisation readings
(``last_busy``: ``nvmlDeviceGetUtilizationRates`` on the sampler thread,
``nvmlDeviceGetProcessUtilization`` at each window's start and end) were added
after that run: they follow nvidia-ml-py's documented API and are tested
through a fake ``pynvml`` module (``tests/fakes``) until
``python -m pytest_tfperf.gpu_check`` runs them on a GPU.

What NVML measures, and why it is a secondary figure next to TensorFlow's own
``GPU:i`` allocator counters:

* By default TensorFlow reserves nearly the whole card at start-up; with
  memory growth (``TF_FORCE_GPU_ALLOW_GROWTH=true``) its pool grows and is never
  given back. NVML therefore shows the pool's high-water mark plus the CUDA
  context and cuDNN/cuBLAS workspaces, not the live tensors.
* Per-process figures (``usedGpuMemory`` from
  ``nvmlDeviceGetComputeRunningProcesses``) are matched on ``os.getpid()``.
  Inside a container without ``--pid=host`` NVML reports host PIDs, so no entry
  matches; the probe then falls back to the device-level ``used`` figure (all
  processes on the card) and says so in its ``detail``.
* Readings are sampled (default every 20 ms) by a thread that runs only between
  ``reset()`` and ``peak()``; spikes shorter than an interval can be missed.
* NVML numbers devices in PCI bus order, CUDA (and so TensorFlow) by default
  fastest first. ``CUDA_VISIBLE_DEVICES`` is honoured (indices and ``GPU-``
  UUID prefixes); on machines with mixed GPU models set
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that ``GPU:i`` here is TensorFlow's ``GPU:i``.

``import pynvml`` alone costs 20-35 ms, so nothing here imports it until
:func:`nvidia_driver_visible` says an NVIDIA driver is present.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.probes.gpu_busy import BusyReading
from pytest_tfperf.model import MemorySource
from pytest_tfperf.probes.probe_base import MemoryProbe, UnavailableProbe, WindowSampler

DEFAULT_NVML_INTERVAL_S = 0.020

# NVML return codes (nvml.h) that the utilisation queries answer with.
_SUCCESS, _NOT_SUPPORTED, _NOT_FOUND = 0, 3, 6


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU visible to this process."""

    label: str  # "GPU:0": position among the visible devices, as TensorFlow names them
    nvml_index: int
    name: str
    uuid: str
    memory_total_bytes: int
    driver_version: str


def nvidia_driver_visible() -> bool:
    """Whether an NVIDIA driver could be present; cheap (no import of pynvml).

    False means "certainly no NVML": no kernel driver on Linux (also checks
    WSL's ``/dev/dxg``), or macOS. True only means NVML is worth asking.
    """
    if sys.platform.startswith("linux"):
        return any(os.path.exists(p) for p in ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg"))
    return sys.platform == "win32"


_inventory_cache: dict[tuple[int, str | None], tuple[tuple[GpuInfo, ...], str | None]] = {}


def gpu_inventory() -> list[GpuInfo]:
    """The GPUs this process can use (empty without driver, NVML, or GPU). Cached per process."""
    return list(_inventory()[0])


def gpu_inventory_problem() -> str | None:
    """Why NVML could not be asked although a driver seems present (None when it answered or no driver)."""
    return _inventory()[1]


def _inventory() -> tuple[tuple[GpuInfo, ...], str | None]:
    key = (os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if key not in _inventory_cache:
        _inventory_cache[key] = _query_inventory()
    return _inventory_cache[key]


def _query_inventory() -> tuple[tuple[GpuInfo, ...], str | None]:
    if not nvidia_driver_visible():
        return (), None
    pynvml, problem = _init_nvml()
    if pynvml is None:
        return (), problem
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for label, index in _visible_devices(pynvml):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                GpuInfo(
                    label=label,
                    nvml_index=index,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    driver_version=driver,
                )
            )
        return tuple(gpus), None
    except Exception as exc:
        return (), f"NVML failed while listing GPUs: {type(exc).__name__}: {exc}"
    finally:
        _shutdown(pynvml)


def nvml_probes(*, interval_s: float = DEFAULT_NVML_INTERVAL_S, pid: int | None = None) -> list[MemoryProbe]:
    """One NVML memory probe per GPU visible to this process.

    Without the module, the driver, or a visible GPU, a single unavailable
    probe for device ``"GPU"`` says why; nothing here raises.
    """
    pynvml, problem = _init_nvml()
    if pynvml is None:
        return [UnavailableProbe(MemorySource.NVML, "GPU", problem or "NVML is unavailable")]
    try:
        visible = _visible_devices(pynvml)
        if not visible:
            setting = os.environ.get("CUDA_VISIBLE_DEVICES")
            where = f" (CUDA_VISIBLE_DEVICES={setting!r})" if setting is not None else ""
            return [UnavailableProbe(MemorySource.NVML, "GPU", f"NVML sees no GPU visible to this process{where}")]
        return [
            NvmlMemoryProbe(label, index, pynvml_module=pynvml, interval_s=interval_s, pid=pid)
            for label, index in visible
        ]
    except Exception as exc:
        reason = f"NVML failed while listing GPUs: {type(exc).__name__}: {exc}"
        return [UnavailableProbe(MemorySource.NVML, "GPU", reason)]
    finally:
        _shutdown(pynvml)


class NvmlMemoryProbe:
    """Peak GPU memory of one device from NVML, sampled between ``reset()`` and ``peak()``.

    Holds its own ``nvmlInit()`` (NVML counts them) until ``close()``.
    """

    source = MemorySource.NVML

    def __init__(
        self,
        device: str,
        nvml_index: int,
        *,
        pynvml_module: Any,
        interval_s: float = DEFAULT_NVML_INTERVAL_S,
        pid: int | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"NvmlMemoryProbe interval_s must be positive, got {interval_s}")
        self.device = device
        self.interval_s = interval_s
        self.unavailable: str | None = None
        self.detail = f"NVML memory used on {device}"
        self._nvml = pynvml_module
        self._pid = os.getpid() if pid is None else pid
        self._lock = threading.Lock()
        self._device_peak = 0
        self._own_peak: int | None = None
        self._process_query_problem: str | None = None
        self._initialised = False
        self._handle: Any = None
        self._name = "unknown model"
        self._sampler = WindowSampler(self._tick, interval_s, name=f"tfperf-nvml-{device}")
        # Utilisation, read on the same sampler thread (one wake-up a tick for both figures).
        self.scope = ""  # "process" or "device": which memory figure the last peak() returned
        self.last_busy: BusyReading | None = None  # the last window's, set by peak()
        self._busy_samples: list[int] = []
        self._busy_problem: str | None = None
        self._own_listed = False  # this pid appeared in the process list during the window
        self._list_empty = True  # the process list was empty at every reading of the window
        self._process_busy_problem: str | None = None
        self._process_busy_since = 0  # NVML's timestamp of the newest per-process sample seen at reset()
        try:
            self._nvml.nvmlInit()
            self._initialised = True
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(nvml_index)
            self._name = _text(self._nvml.nvmlDeviceGetName(self._handle))
        except Exception as exc:
            self.unavailable = f"NVML cannot open {device} (NVML index {nvml_index}): {type(exc).__name__}: {exc}"

    @property
    def sampler(self) -> WindowSampler:
        return self._sampler

    def _sample(self) -> tuple[int, int | None]:
        used = int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        own: int | None = None
        if self._process_query_problem is None:
            try:
                processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
            except Exception as exc:  # NotSupported on some boards and vGPUs: device level still works
                self._process_query_problem = f"per-process query failed: {type(exc).__name__}: {exc}"
            else:
                if processes:
                    self._list_empty = False
                if any(p.pid == self._pid for p in processes):
                    self._own_listed = True
                mine = [p.usedGpuMemory for p in processes if p.pid == self._pid and p.usedGpuMemory is not None]
                if mine:
                    own = int(sum(mine))
        return used, own

    def _tick(self) -> None:
        used, own = self._sample()
        busy = self._read_busy()
        with self._lock:
            self._device_peak = max(self._device_peak, used)
            if own is not None:
                self._own_peak = own if self._own_peak is None else max(self._own_peak, own)
            if busy is not None:
                self._busy_samples.append(busy)

    def _read_busy(self) -> int | None:
        """NVML's device-wide busy percentage now, or None once it has failed (memory sampling goes on)."""
        if self._busy_problem is not None:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
        except Exception as exc:  # noqa: BLE001 - any NVML error only removes the busy figure
            if _error_code(exc) == _NOT_SUPPORTED:
                self._busy_problem = f"NVML gives no utilisation for {self.device} ({self._name}): {type(exc).__name__}"
            else:
                self._busy_problem = f"NVML stopped answering the utilisation query: {type(exc).__name__}: {exc}"
            return None

    def _process_busy_samples(self, since: int) -> list[Any]:
        """NVML's per-process utilisation samples newer than ``since`` (empty when it holds none)."""
        try:
            return list(self._nvml.nvmlDeviceGetProcessUtilization(self._handle, since))
        except Exception as exc:  # noqa: BLE001 - any NVML error only removes this process's share
            code = _error_code(exc)
            if code in (_SUCCESS, _NOT_FOUND):  # no sample newer than `since`: the driver says so with an error
                return []
            if code == _NOT_SUPPORTED:
                self._process_busy_problem = f"NVML gives no per-process utilisation on this board ({type(exc).__name__})"
            else:
                self._process_busy_problem = f"the per-process utilisation query failed: {type(exc).__name__}: {exc}"
            return []

    def _start_busy_window(self) -> None:
        self.last_busy = None
        with self._lock:
            self._busy_samples = []
            self._own_listed = False
            self._list_empty = True
        if self._process_busy_problem is None:
            # NVML's per-process samples carry the driver's own timestamps: take the newest one now as the
            # window's start, rather than assume which clock they use.
            samples = self._process_busy_samples(0)
            self._process_busy_since = max((int(x.timeStamp) for x in samples), default=0)

    def _end_busy_window(self) -> BusyReading:
        with self._lock:
            samples = list(self._busy_samples)
            own_listed, list_empty = self._own_listed, self._list_empty
        process: float | None = None
        if self._process_busy_problem is None:
            mine = [x for x in self._process_busy_samples(self._process_busy_since) if x.pid == self._pid]
            if mine:
                process = min(1.0, max(0.0, sum(int(x.smUtil) for x in mine) / len(mine) / 100))
        listed: bool | None = True if own_listed else (False if list_empty and self._process_query_problem is None
                                                       else None)
        if self._busy_problem is not None or not samples:
            why = self._busy_problem or "NVML gave no utilisation reading during the round"
            return BusyReading(self.device, None, process, 0, listed, why, self._process_busy_problem)
        fraction = min(1.0, max(0.0, sum(samples) / len(samples) / 100))
        return BusyReading(self.device, fraction, process, len(samples), listed, None, self._process_busy_problem)

    def reset(self) -> int | None:
        if self.unavailable is not None:
            return None
        self._sampler.stop()
        try:
            used, own = self._sample()
        except Exception as exc:
            self.unavailable = f"NVML stopped answering for {self.device}: {type(exc).__name__}: {exc}"
            return None
        with self._lock:
            self._device_peak = used
            self._own_peak = own
        self._start_busy_window()
        self._sampler.start()
        return own if own is not None else used

    def peak(self) -> int | None:
        if self.unavailable is not None:
            return None
        self._sampler.stop()
        error = self._sampler.error
        if error is None:
            try:
                self._tick()
            except Exception as exc:
                error = exc
        if error is not None:
            self.unavailable = f"NVML stopped answering for {self.device}: {type(error).__name__}: {error}"
            self.last_busy = BusyReading(self.device, None, None, 0, None, self.unavailable, self.unavailable)
            return None
        self.last_busy = self._end_busy_window()
        every = f"sampled every {self.interval_s * 1e3:g} ms"
        with self._lock:
            if self._own_peak is not None:
                self.scope = "process"
                self.detail = (
                    f"NVML memory of this process (pid {self._pid}) on {self.device} ({self._name}), {every}: "
                    "the allocator's whole pool (TensorFlow's, PyTorch's or CuPy's) plus the CUDA context, "
                    "not its live tensors"
                )
                return self._own_peak
            self.scope = "device"
            why = self._process_query_problem or (
                "inside a container without --pid=host NVML reports host PIDs, "
                "or this process had no CUDA context during the round"
            )
            self.detail = (
                f"NVML memory used on {self.device} ({self._name}) by ALL processes, {every}: "
                f"pid {self._pid} is not in NVML's process list ({why})"
            )
            return self._device_peak

    def close(self) -> None:
        self._sampler.stop()
        if self._initialised:
            self._initialised = False
            _shutdown(self._nvml)


def _init_nvml() -> tuple[Any, str | None]:
    """(the pynvml module after nvmlInit, None) or (None, why not)."""
    try:
        with warnings.catch_warnings():
            # The deprecated "pynvml" PyPI package warns on import; the module is nvidia-ml-py's all the same.
            warnings.simplefilter("ignore", FutureWarning)
            pynvml = importlib.import_module("pynvml")
    except ImportError as exc:
        return None, f"the NVML bindings are not installed ({exc}): pip install nvidia-ml-py"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, f"NVML could not start: {type(exc).__name__}: {exc} (no NVIDIA driver, or it is not accessible)"
    return pynvml, None


def _shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except Exception:  # nothing to do about a failing shutdown; the measurement is already taken
        pass


def _visible_devices(pynvml: Any) -> list[tuple[str, int]]:
    """(TensorFlow-style label, NVML index) of every GPU ``CUDA_VISIBLE_DEVICES`` leaves visible.

    Follows CUDA's rule that the list ends at the first entry that names no
    device. MIG instances are not resolved: raises ``ValueError`` saying so.
    """
    count = int(pynvml.nvmlDeviceGetCount())
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is None:
        return [(f"GPU:{i}", i) for i in range(count)]
    uuids: list[str] | None = None
    indices: list[int] = []
    for raw in setting.split(","):
        entry = raw.strip()
        if entry.startswith("MIG-"):
            raise ValueError(f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}): the NVML probe cannot resolve MIG")
        if entry.startswith("GPU-"):
            if uuids is None:
                uuids = [_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            try:
                index = int(entry)
            except ValueError:
                break
            if not 0 <= index < count:
                break
        if index in indices:
            break
        indices.append(index)
    return [(f"GPU:{position}", index) for position, index in enumerate(indices)]


def _error_code(exc: BaseException) -> int | None:
    # pynvml's NVMLError_* classes carry the NVML return code in .value.
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    # Older bindings return bytes for names and versions.
    return value.decode() if isinstance(value, bytes) else str(value)
