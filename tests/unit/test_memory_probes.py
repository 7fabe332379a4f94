"""Memory probes: TF allocator counters (stubbed, and once for real), the VmHWM probe, the RSS sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pytest_tfperf.probes import memory_probes as mp
from pytest_tfperf.probes import nvml
from pytest_tfperf.model import MemorySource
from tests.fakes import FakeTensorFlow

MIB = 1 << 20


class StubProbe:
    source = MemorySource.RSS_HWM
    device = "host"

    def __init__(self, unavailable: str | None = None) -> None:
        self.unavailable = unavailable

    def reset(self) -> int | None:
        return None

    def peak(self) -> int | None:
        return None

    def close(self) -> None:
        pass


@pytest.fixture
def no_nvidia_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: False)


# -- collect_peak ----------------------------------------------------------------


def test_collect_peak_takes_the_maximum_over_rounds_and_keeps_them() -> None:
    peak = mp.collect_peak(StubProbe(), [10, 30, 20], baseline=5)
    assert peak.peak_bytes == 30
    assert peak.per_round_peak_bytes == (10, 30, 20)
    assert peak.baseline_bytes == 5
    assert (peak.source, peak.device, peak.unavailable) == (MemorySource.RSS_HWM, "host", None)


def test_collect_peak_of_an_unavailable_probe_carries_its_reason() -> None:
    peak = mp.collect_peak(StubProbe("stats are off"), [None, None], baseline=None)
    assert peak.peak_bytes is None
    assert peak.unavailable == "stats are off"


def test_collect_peak_refuses_a_maximum_with_a_missing_round() -> None:
    peak = mp.collect_peak(StubProbe(), [10, None, 20], baseline=5)
    assert peak.peak_bytes is None
    assert peak.unavailable is not None and "round(s) 1 of 3" in peak.unavailable


def test_collect_peak_without_rounds_is_unavailable() -> None:
    assert mp.collect_peak(StubProbe(), [], baseline=None).unavailable == "no round was measured"


# -- TensorFlow allocator probe (stub) --------------------------------------------


def test_tf_probe_reports_the_peak_of_a_tensor_alive_inside_the_window() -> None:
    tf = FakeTensorFlow()
    held = tf.allocate("CPU:0", 3 * MIB)
    probe = mp.TfAllocatorProbe("CPU:0", tf_module=tf)
    assert probe.unavailable is None
    assert probe.reset() == 3 * MIB
    temporary = tf.allocate("CPU:0", 64 * MIB)
    del temporary
    assert probe.peak() == 67 * MIB
    assert probe.reset() == 3 * MIB  # the next round starts from what is in use now
    assert probe.peak() == 3 * MIB
    del held


def test_tf_probe_self_check_frees_its_test_tensor() -> None:
    tf = FakeTensorFlow()
    mp.TfAllocatorProbe("CPU:0", tf_module=tf)
    assert tf.current["CPU:0"] == 0


def test_tf_probe_without_cpu_stats_says_why_and_how_to_fix_it() -> None:
    probe = mp.TfAllocatorProbe("CPU:0", tf_module=FakeTensorFlow(stats="value_error"))
    assert probe.unavailable is not None
    assert "TF_ENABLE_ONEDNN_OPTS=0" in probe.unavailable
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in probe.unavailable
    assert probe.reset() is None and probe.peak() is None


def test_tf_probe_detects_counters_that_silently_stay_at_zero() -> None:
    probe = mp.TfAllocatorProbe("CPU:0", tf_module=FakeTensorFlow(stats="zeros"))
    assert probe.unavailable is not None
    assert "TF_ONEDNN_USE_SYSTEM_ALLOCATOR" in probe.unavailable
    assert probe.reset() is None and probe.peak() is None


def test_tf_probe_that_fails_mid_run_turns_unavailable_instead_of_raising() -> None:
    tf = FakeTensorFlow()
    probe = mp.TfAllocatorProbe("CPU:0", tf_module=tf)
    first = probe.reset()
    tf.fail_next_stats_call = RuntimeError("context was reset")
    assert probe.peak() is None
    assert probe.unavailable is not None and "context was reset" in probe.unavailable
    assert mp.collect_peak(probe, [first, None], baseline=first).unavailable == probe.unavailable


def test_tf_probe_that_cannot_start_is_unavailable_not_an_error() -> None:
    tf = FakeTensorFlow()

    def broken_device(name: str) -> None:
        raise RuntimeError("no such device")

    tf.device = broken_device  # type: ignore[method-assign]
    probe = mp.TfAllocatorProbe("CPU:0", tf_module=tf)
    assert probe.unavailable is not None and "no such device" in probe.unavailable


def test_default_probes_with_tensorflow_loaded_cover_cpu_and_every_gpu(
    monkeypatch: pytest.MonkeyPatch, no_nvidia_driver: None
) -> None:
    tf = FakeTensorFlow(gpus=2)
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    probes = mp.default_probes(tensorflow_loaded=True)
    tf_probes = [p for p in probes if p.source is MemorySource.TF_ALLOCATOR]
    assert [p.device for p in tf_probes] == ["CPU:0", "GPU:0", "GPU:1"]
    assert all(p.unavailable is None for p in tf_probes)
    gpu1 = tf_probes[2]
    base = gpu1.reset()
    tensor = tf.allocate("GPU:1", 5 * MIB)
    assert gpu1.peak() == (base or 0) + 5 * MIB
    del tensor
    for probe in probes:
        probe.close()


def test_default_probes_never_import_tensorflow_themselves(
    monkeypatch: pytest.MonkeyPatch, no_nvidia_driver: None
) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # any import attempt would raise ImportError
    probes = mp.default_probes(tensorflow_loaded=False)
    assert [p.source for p in probes if p.source is MemorySource.TF_ALLOCATOR] == []
    assert [p.device for p in probes] == ["host"]
    for probe in probes:
        probe.close()


# -- TensorFlow allocator probe (real TensorFlow, in subprocesses) ----------------

_REAL_TF_SCRIPT = """
import json
import tensorflow as tf
from pytest_tfperf.probes.memory_probes import default_probes
probes = default_probes(tensorflow_loaded=True)
cpu = next(p for p in probes if p.source.value == "tf_allocator" and p.device == "CPU:0")
out = {"unavailable": cpu.unavailable}
if cpu.unavailable is None:
    out["baseline"] = cpu.reset()
    held = tf.ones([16 * 2**20], dtype=tf.float32)  # 64 MiB
    out["peak"] = cpu.peak()
    out["baseline2"] = cpu.reset()
    del held
    out["peak2"] = cpu.peak()
print("RESULT " + json.dumps(out))
"""

_TF_CONFIGS = {
    # Whether TensorFlow's default CPU allocator keeps counters depends on the CPU (oneDNN is on by
    # default only with AVX-512): "default" is checked for consistency, the others force one allocator.
    "default": {},
    "bfc": {"TF_CPU_ALLOCATOR_USE_BFC": "true"},
    "onednn_off": {"TF_ENABLE_ONEDNN_OPTS": "0"},
    "system_allocator": {"TF_ENABLE_ONEDNN_OPTS": "1", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "true"},
}


@pytest.fixture(scope="module")
def real_tf_results() -> dict[str, dict[str, object]]:
    """Run the script under each allocator configuration, all at once (TF's import dominates: ~3 s)."""
    pytest.importorskip("tensorflow")
    running = {}
    for name, extra in _TF_CONFIGS.items():
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "CUDA_"))}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **extra)
        running[name] = subprocess.Popen([sys.executable, "-c", _REAL_TF_SCRIPT], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = {}
    for name, proc in running.items():
        out, err = proc.communicate(timeout=120)
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"{name}: exit {proc.returncode}\n{err[-2000:]}"
        results[name] = json.loads(lines[-1][len("RESULT "):])
    return results


def test_real_tf_probe_on_the_default_allocator_reports_or_names_the_fix(real_tf_results: dict[str, dict]) -> None:
    r = real_tf_results["default"]
    if r["unavailable"] is not None:  # a CPU without AVX-512: oneDNN and its counting allocator are off
        assert "TF_CPU_ALLOCATOR_USE_BFC=true" in r["unavailable"]
    else:
        assert abs(r["peak"] - r["baseline"] - 64 * MIB) <= 0.01 * 64 * MIB


def test_real_tf_probe_reports_a_64_mib_tensor_within_1_percent(real_tf_results: dict[str, dict]) -> None:
    r = real_tf_results["bfc"]
    assert r["unavailable"] is None
    added = r["peak"] - r["baseline"]
    assert abs(added - 64 * MIB) <= 0.01 * 64 * MIB
    # The next window starts with the tensor still alive, and sees no new allocation.
    assert r["baseline2"] - r["baseline"] == pytest.approx(64 * MIB, rel=0.01)
    assert r["peak2"] == r["baseline2"]


def test_real_tf_probe_with_onednn_off_is_unavailable_with_the_fix(real_tf_results: dict[str, dict]) -> None:
    reason = real_tf_results["onednn_off"]["unavailable"]
    assert reason is not None and "TF_CPU_ALLOCATOR_USE_BFC=true" in reason


def test_real_tf_probe_with_the_system_allocator_is_unavailable(real_tf_results: dict[str, dict]) -> None:
    reason = real_tf_results["system_allocator"]["unavailable"]
    assert reason is not None and "TF_ONEDNN_USE_SYSTEM_ALLOCATOR" in reason


# -- VmHWM probe ------------------------------------------------------------------------


def test_hwm_probe_sees_a_numpy_allocation_freed_inside_the_window() -> None:
    if mp.hwm_reset_problem() is not None:
        pytest.skip(f"VmHWM cannot be reset here: {mp.hwm_reset_problem()}")
    probe = mp.HwmRssProbe()
    baseline = probe.reset()
    array = np.ones(16 * MIB, dtype=np.float32)  # 64 MiB, every page written
    del array
    peak = probe.peak()
    assert baseline is not None and peak is not None
    # The kernel batches its RSS counters per CPU, so VmHWM is page-exact only to within a few hundred KiB.
    assert 63 * MIB <= peak - baseline < 80 * MIB
    # After a reset the freed spike no longer counts.
    baseline = probe.reset()
    peak = probe.peak()
    assert baseline is not None and peak is not None
    assert peak - baseline < 16 * MIB


def test_hwm_reset_refused_falls_back_to_the_sampler_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise PermissionError(13, "Permission denied", "/proc/self/clear_refs")

    if not sys.platform.startswith("linux"):
        pytest.skip("the exact probe exists on Linux only")
    monkeypatch.setattr(mp, "_write_clear_refs", refuse)
    monkeypatch.setattr(mp, "_hwm_problem_by_pid", {})
    assert "Permission denied" in (mp.HwmRssProbe().unavailable or "")
    probe = mp.host_rss_probe()
    assert isinstance(probe, mp.SampledRssProbe)
    assert probe.source is MemorySource.RSS_SAMPLED
    assert "Permission denied" in probe.detail
    probe.close()


def test_hwm_reset_that_is_silently_ignored_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/status")
    monkeypatch.setattr(mp, "_write_clear_refs", lambda: None)
    monkeypatch.setattr(mp, "_hwm_problem_by_pid", {})
    # Make sure the high-water mark sits above the current RSS, so only a real reset could lower it.
    blob = np.ones(8 * MIB, dtype=np.uint8)
    del blob
    assert "did not reset VmHWM" in (mp.hwm_reset_problem() or "")


def test_hwm_probe_off_linux_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mp, "_hwm_problem_by_pid", {})
    monkeypatch.setattr(mp.sys, "platform", "darwin")
    probe = mp.HwmRssProbe()
    assert probe.unavailable is not None and "darwin" in probe.unavailable
    assert probe.reset() is None and probe.peak() is None


# -- sampled RSS probe ----------------------------------------------------------------------


class ScriptedRss:
    """An RSS reader whose value the test sets; records which threads read it."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.seen_by_sampler = threading.Event()
        self.spike: int | None = None
        self.error: Exception | None = None

    def __call__(self) -> int:
        if self.error is not None and threading.current_thread() is not threading.main_thread():
            raise self.error
        value = self.value
        if value == self.spike and threading.current_thread() is not threading.main_thread():
            self.seen_by_sampler.set()
        return value


def test_sampled_probe_reads_at_reset_and_at_peak() -> None:
    rss = ScriptedRss(100)
    probe = mp.SampledRssProbe(interval_s=3600, read_rss=rss)  # the thread never ticks
    assert probe.reset() == 100
    rss.value = 300
    assert probe.peak() == 300
    rss.value = 50
    assert probe.reset() == 50
    assert probe.peak() == 50
    probe.close()


def test_sampled_probe_catches_a_spike_that_ended_before_the_round_did() -> None:
    rss = ScriptedRss(100)
    probe = mp.SampledRssProbe(interval_s=0.001, read_rss=rss)
    probe.reset()
    rss.spike = rss.value = 10_000
    assert rss.seen_by_sampler.wait(timeout=30), "the sampler thread never read the RSS"
    rss.value = 100
    assert probe.peak() == 10_000
    probe.close()


def test_sampled_probe_thread_runs_only_between_reset_and_peak() -> None:
    probe = mp.SampledRssProbe(interval_s=0.001, read_rss=ScriptedRss(1))
    assert not probe.sampler.running
    probe.reset()
    assert probe.sampler.running
    probe.peak()
    assert not probe.sampler.running
    probe.reset()
    probe.close()
    assert not probe.sampler.running


def test_sampled_probe_whose_reader_fails_in_the_thread_turns_unavailable() -> None:
    rss = ScriptedRss(1)
    probe = mp.SampledRssProbe(interval_s=0.001, read_rss=rss)
    rss.error = OSError("statm vanished")
    probe.reset()
    deadline = time.monotonic() + 30
    while probe.sampler.running and time.monotonic() < deadline:
        time.sleep(0.001)
    assert probe.peak() is None
    assert probe.unavailable is not None and "statm vanished" in probe.unavailable


def test_sampled_probe_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        mp.SampledRssProbe(interval_s=0)


def test_statm_reader_agrees_with_psutil_and_reopens_after_close() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/statm")
    statm = mp.StatmRssReader()
    first = statm()
    assert abs(first - mp.psutil_rss_reader()()) < 4 * MIB
    statm.close()
    assert abs(statm() - first) < 4 * MIB
    statm.close()


def test_sampled_probe_with_the_real_reader_sees_a_numpy_array_alive_at_peak() -> None:
    probe = mp.SampledRssProbe(interval_s=3600)
    baseline = probe.reset()
    array = np.ones(16 * MIB, dtype=np.float32)  # 64 MiB, every page written
    peak = probe.peak()
    del array
    probe.close()
    assert baseline is not None and peak is not None
    assert peak - baseline >= 63 * MIB
