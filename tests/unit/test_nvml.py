"""NVML probe and GPU inventory, through a fake ``pynvml`` module (no GPU on the machines that run this)."""

from __future__ import annotations

import os
import sys
import threading
import types

import pytest

from pytest_tfperf.probes import memory_probes
from pytest_tfperf.probes import nvml
from pytest_tfperf.model import MemorySource
from tests.fakes import FakeGpu, make_fake_pynvml
from tests.helpers import clean_nvml_state  # noqa: F401 - an autouse fixture

GIB = 1 << 30
OTHER_PID = 999_999_999


def install(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType | None) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", module)


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(name="NVIDIA A100-SXM4-40GB", uuid="GPU-aaaa1111-0000-0000-0000-000000000000", total_bytes=40 * GIB),
        FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-bbbb2222-0000-0000-0000-000000000000", total_bytes=80 * GIB),
    ]


def close_all(probes: list[memory_probes.MemoryProbe]) -> None:
    for probe in probes:
        probe.close()


# -- unavailable paths: never raise -----------------------------------------------------


def test_missing_bindings_make_one_unavailable_probe_that_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None)  # "import pynvml" raises ImportError
    [probe] = nvml.nvml_probes()
    assert (probe.source, probe.device) == (MemorySource.NVML, "GPU")
    assert probe.unavailable is not None and "pip install nvidia-ml-py" in probe.unavailable
    assert probe.reset() is None and probe.peak() is None
    assert nvml.gpu_inventory() == []
    assert "nvidia-ml-py" in (nvml.gpu_inventory_problem() or "")


def test_missing_driver_library_makes_the_probe_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, make_fake_pynvml(two_gpus(), init_error="LibraryNotFound"))
    [probe] = nvml.nvml_probes()
    assert probe.unavailable is not None and "NVMLError_LibraryNotFound" in probe.unavailable
    assert nvml.gpu_inventory() == []


def test_the_real_bindings_without_a_driver_are_unavailable_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pynvml")
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    if os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl"):
        pytest.skip("an NVIDIA driver is installed here")
    [probe] = nvml.nvml_probes()
    assert probe.unavailable is not None and "NVML could not start" in probe.unavailable


def test_no_gpu_makes_the_probe_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, make_fake_pynvml([]))
    [probe] = nvml.nvml_probes()
    assert probe.unavailable == "NVML sees no GPU visible to this process"


def test_without_a_visible_driver_pynvml_is_not_even_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: False)
    install(monkeypatch, None)  # an import attempt would record a problem
    assert nvml.gpu_inventory() == []
    assert nvml.gpu_inventory_problem() is None


def test_default_probes_add_nvml_only_where_a_driver_is_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, make_fake_pynvml(two_gpus()))
    with_driver = memory_probes.default_probes(tensorflow_loaded=False)
    assert [(p.source, p.device) for p in with_driver if p.source is MemorySource.NVML] == [
        (MemorySource.NVML, "GPU:0"),
        (MemorySource.NVML, "GPU:1"),
    ]
    close_all(with_driver)
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: False)
    without = memory_probes.default_probes(tensorflow_loaded=False)
    assert [p for p in without if p.source is MemorySource.NVML] == []
    close_all(without)


# -- which devices ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("1", [("GPU:0", 1)]),
        ("1,0", [("GPU:0", 1), ("GPU:1", 0)]),
        ("GPU-bbbb", [("GPU:0", 1)]),  # UUID prefix
        ("0,7,1", [("GPU:0", 0)]),  # CUDA stops at the first entry that names no device
        ("", []),
        ("-1", []),
    ],
)
def test_cuda_visible_devices_selects_and_renumbers_the_gpus(
    monkeypatch: pytest.MonkeyPatch, setting: str, expected: list[tuple[str, int]]
) -> None:
    module = make_fake_pynvml(two_gpus())
    module.nvmlInit()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
    assert nvml._visible_devices(module) == expected


def test_a_mig_instance_in_cuda_visible_devices_is_reported_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, make_fake_pynvml(two_gpus()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-12345678-aaaa-bbbb-cccc-1234567890ab")
    [probe] = nvml.nvml_probes()
    assert probe.unavailable is not None and "MIG" in probe.unavailable


def test_hidden_gpus_are_named_in_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, make_fake_pynvml(two_gpus()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    [probe] = nvml.nvml_probes()
    assert probe.unavailable == "NVML sees no GPU visible to this process (CUDA_VISIBLE_DEVICES='')"


# -- readings ------------------------------------------------------------------------------


def test_per_process_memory_is_used_when_this_pid_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(used_bytes=9 * GIB, processes={os.getpid(): 2 * GIB, OTHER_PID: 5 * GIB})
    install(monkeypatch, make_fake_pynvml([gpu]))
    [probe] = nvml.nvml_probes(interval_s=3600)
    assert probe.reset() == 2 * GIB
    gpu.processes[os.getpid()] = 3 * GIB
    gpu.used_bytes = 10 * GIB
    assert probe.peak() == 3 * GIB
    assert isinstance(probe, nvml.NvmlMemoryProbe)
    assert f"this process (pid {os.getpid()})" in probe.detail
    probe.close()


def test_unlisted_pid_falls_back_to_device_memory_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Inside a container without --pid=host, NVML lists host PIDs: ours is not among them.
    gpu = FakeGpu(used_bytes=9 * GIB, processes={OTHER_PID: 5 * GIB})
    install(monkeypatch, make_fake_pynvml([gpu]))
    [probe] = nvml.nvml_probes(interval_s=3600)
    assert probe.reset() == 9 * GIB
    assert probe.peak() == 9 * GIB
    assert isinstance(probe, nvml.NvmlMemoryProbe)
    assert "ALL processes" in probe.detail and "--pid=host" in probe.detail
    probe.close()


def test_process_query_not_supported_falls_back_to_device_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(used_bytes=7 * GIB, processes_error="NotSupported")
    install(monkeypatch, make_fake_pynvml([gpu]))
    [probe] = nvml.nvml_probes(interval_s=3600)
    probe.reset()
    assert probe.peak() == 7 * GIB
    assert isinstance(probe, nvml.NvmlMemoryProbe)
    assert "NVMLError_NotSupported" in probe.detail
    probe.close()


def test_process_memory_not_available_falls_back_to_device_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(used_bytes=7 * GIB, processes={os.getpid(): None})  # Windows WDDM reports no per-process figure
    install(monkeypatch, make_fake_pynvml([gpu]))
    [probe] = nvml.nvml_probes(interval_s=3600)
    probe.reset()
    assert probe.peak() == 7 * GIB
    probe.close()


def test_the_sampler_catches_a_spike_that_ended_before_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = threading.Event()

    def on_read(gpu: FakeGpu) -> None:
        if gpu.used_bytes == 20 * GIB and threading.current_thread() is not threading.main_thread():
            seen.set()

    gpu = FakeGpu(used_bytes=1 * GIB, on_memory_read=on_read)
    install(monkeypatch, make_fake_pynvml([gpu]))
    [probe] = nvml.nvml_probes(interval_s=0.001)
    probe.reset()
    gpu.used_bytes = 20 * GIB
    assert seen.wait(timeout=30), "the sampler thread never read the device"
    gpu.used_bytes = 1 * GIB
    assert probe.peak() == 20 * GIB
    probe.close()


def test_the_sampler_runs_only_between_reset_and_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, make_fake_pynvml([FakeGpu()]))
    [probe] = nvml.nvml_probes(interval_s=0.001)
    assert isinstance(probe, nvml.NvmlMemoryProbe)
    assert not probe.sampler.running
    probe.reset()
    assert probe.sampler.running
    probe.peak()
    assert not probe.sampler.running
    probe.close()


def test_a_gpu_lost_mid_run_makes_the_probe_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    install(monkeypatch, make_fake_pynvml([gpu]))
    [probe] = nvml.nvml_probes(interval_s=3600)
    first = probe.reset()
    gpu.memory_error = "GpuIsLost"
    assert probe.peak() is None
    assert probe.unavailable is not None and "NVMLError_GpuIsLost" in probe.unavailable
    assert probe.reset() is None
    assert memory_probes.collect_peak(probe, [first, None], first).unavailable == probe.unavailable
    probe.close()


def test_closing_every_probe_balances_nvml_init(monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_fake_pynvml(two_gpus())
    install(monkeypatch, module)
    probes = nvml.nvml_probes()
    assert module.init_count == 2  # one per open probe
    close_all(probes)
    close_all(probes)  # closing twice is harmless
    assert module.init_count == 0


def test_probe_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        nvml.NvmlMemoryProbe("GPU:0", 0, pynvml_module=make_fake_pynvml([FakeGpu()]), interval_s=0)


# -- inventory -----------------------------------------------------------------------------------


def test_inventory_lists_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    module = make_fake_pynvml(two_gpus(), driver_version="550.54.15", names_as_bytes=True)
    install(monkeypatch, module)
    assert nvml.gpu_inventory() == [
        nvml.GpuInfo("GPU:0", 0, "NVIDIA A100-SXM4-40GB", "GPU-aaaa1111-0000-0000-0000-000000000000", 40 * GIB,
                     "550.54.15"),
        nvml.GpuInfo("GPU:1", 1, "NVIDIA H100 80GB HBM3", "GPU-bbbb2222-0000-0000-0000-000000000000", 80 * GIB,
                     "550.54.15"),
    ]
    assert nvml.gpu_inventory_problem() is None
    assert module.init_count == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [g.name for g in nvml.gpu_inventory()] == ["NVIDIA H100 80GB HBM3"]
