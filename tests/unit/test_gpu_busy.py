"""GPU busy fraction: the NVML probe's utilisation readings, their summary per variant, and the diagnosis.

Everything runs on a fake ``pynvml`` (``tests/fakes``) and a fake clock: no GPU, no timing thresholds. The
sampler thread is parked (interval of an hour), so each round's only reading is the one ``peak()`` takes
at the round's end, and a workload sets what that reading sees.
"""

from __future__ import annotations

import os
import sys

import pytest

from pytest_tfperf.diagnoses import diagnostics, gpu_waits
from pytest_tfperf.gates.pooling import pool_gpu_busy
from pytest_tfperf.probes import gpu_busy
from pytest_tfperf.probes import nvml
from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.workload import RawRun, RunSettings, Workload
from pytest_tfperf.model import GpuBusy
from pytest_tfperf.reports.report import format_gpu_busy
from tests.fakes import FakeGpu, make_fake_pynvml
from tests.helpers import FakeClock, clean_nvml_state  # noqa: F401 - clean_nvml_state: an autouse fixture

PARKED = 3600.0  # the sampler thread never ticks: readings come from reset()/peak() only
OTHER_PID = 999_999_999


def probe_for(monkeypatch: pytest.MonkeyPatch, *gpus: FakeGpu) -> list[nvml.NvmlMemoryProbe]:
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(list(gpus)))
    probes = nvml.nvml_probes(interval_s=PARKED)
    assert all(isinstance(p, nvml.NvmlMemoryProbe) for p in probes)
    return probes  # type: ignore[return-value]


def measure(probes: list[nvml.NvmlMemoryProbe], work: dict[str, object], rounds: int = 3) -> dict[str, RawRun]:
    clock = FakeClock()

    def timed(fn: object) -> Workload:
        def call() -> None:
            clock.work(1_000_000)
            fn()  # type: ignore[operator]
        return Workload(call=call)

    return runner.measure({name: timed(fn) for name, fn in work.items()},
                          RunSettings(budget_s=0.001 * rounds, rounds=rounds, warmup_s=0.0),
                          clock=clock, probes=probes, watch=False)


# -- the probe's readings ------------------------------------------------------------------------


def test_a_saturated_gpu_reads_busy_and_this_process_is_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(busy_percent=98, processes={os.getpid(): 2 << 30})
    [probe] = probe_for(monkeypatch, gpu)
    probe.reset()
    probe.peak()
    reading = probe.last_busy
    assert reading is not None
    assert (reading.fraction, reading.samples, reading.process_on_gpu) == (pytest.approx(0.98), 1, True)
    assert probe.scope == "process"
    probe.close()


def test_this_process_share_counts_only_its_own_samples_within_the_round(monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    gpu = FakeGpu(busy_percent=60, processes={me: 1 << 30}, process_samples=[(me, 100, 90)])  # before the round
    [probe] = probe_for(monkeypatch, gpu)
    probe.reset()
    gpu.process_samples += [(me, 200, 40), (OTHER_PID, 210, 20), (me, 300, 20)]
    probe.peak()
    assert probe.last_busy is not None and probe.last_busy.process_fraction == pytest.approx(0.30)
    probe.close()


def test_no_sample_of_this_process_in_the_round_is_none_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(busy_percent=60, process_samples=[(OTHER_PID, 100, 50)])  # NVML answers NotFound afterwards
    [probe] = probe_for(monkeypatch, gpu)
    probe.reset()
    probe.peak()
    assert probe.last_busy is not None
    assert probe.last_busy.process_fraction is None and probe.last_busy.process_problem is None
    probe.close()


def test_an_unsupported_board_loses_the_busy_figure_but_keeps_its_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(used_bytes=5 << 30, utilization_error="NotSupported", process_utilization_error="NotSupported")
    [probe] = probe_for(monkeypatch, gpu)
    probe.reset()
    assert probe.peak() == 5 << 30
    reading = probe.last_busy
    assert reading is not None and reading.fraction is None
    assert reading.problem is not None and "NVML gives no utilisation for GPU:0" in reading.problem
    assert reading.process_problem is not None and "no per-process utilisation" in reading.process_problem
    [busy] = gpu_busy.collect([gpu_busy.round_readings([probe])])
    assert not busy.available and "round 1 of 1" in (busy.unavailable or "")
    probe.close()


def test_nvml_lost_mid_run_makes_the_busy_figure_unavailable_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(busy_percent=90)
    [probe] = probe_for(monkeypatch, gpu)

    calls: list[int] = []

    def lose_nvml_in_round_two() -> None:
        calls.append(1)
        if len(calls) == 4:  # first call, one warm-up call, round 1, then round 2's only iteration
            gpu.memory_error = "GpuIsLost"
            gpu.utilization_error = "GpuIsLost"

    raw = measure([probe], {"": lose_nvml_in_round_two})[""]
    assert raw.timings.round_sizes == (1, 1, 1)
    [busy] = raw.gpu_busy
    assert not busy.available and "NVMLError_GpuIsLost" in (busy.unavailable or "")
    extras, diagnoses = diagnostics.analyse(raw)
    assert gpu_waits.GPU_BUSY_METRIC not in dict(extras)
    assert all(d.kind != "gpu_busy" for d in diagnoses)
    probe.close()


# -- per variant, through the runner -------------------------------------------------------------


def test_each_variant_gets_the_busy_fraction_of_its_own_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(processes={os.getpid(): 1 << 30})
    [probe] = probe_for(monkeypatch, gpu)

    def saturated() -> None:
        gpu.busy_percent = 98

    def starved() -> None:
        gpu.busy_percent = 11

    raws = measure([probe], {"saturated": saturated, "starved": starved}, rounds=4)
    [fed] = raws["saturated"].gpu_busy
    [waiting] = raws["starved"].gpu_busy
    assert fed.per_round_fraction == pytest.approx((0.98,) * 4)
    assert waiting.per_round_fraction == pytest.approx((0.11,) * 4)
    assert fed.process_on_gpu is True
    probe.close()


def test_starved_gpu_is_diagnosed_as_waiting_and_saturated_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(processes={os.getpid(): 1 << 30})
    [probe] = probe_for(monkeypatch, gpu)
    raws = measure([probe], {"fed": lambda: setattr(gpu, "busy_percent", 98),
                             "starved": lambda: setattr(gpu, "busy_percent", 11)})
    fed_extras, fed_diagnoses = diagnostics.analyse(raws["fed"])
    starved_extras, starved_diagnoses = diagnostics.analyse(raws["starved"])
    assert dict(fed_extras)["gpu_busy_fraction"] == pytest.approx(0.98)
    assert dict(starved_extras)["gpu_busy_fraction"] == pytest.approx(0.11)
    [fed_d] = [d for d in fed_diagnoses if d.kind == "gpu_busy"]
    [starved_d] = [d for d in starved_diagnoses if d.kind == "gpu_busy"]
    assert fed_d.severity == "info" and "GPU:0 busy 98%" in fed_d.summary
    assert starved_d.severity == "warning"
    assert starved_d.summary.startswith("the GPU waits: input-bound or host-bound: GPU:0 busy 11%")
    probe.close()


def test_the_diagnosis_names_the_input_wait_beside_the_busy_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(busy_percent=20, processes={os.getpid(): 1 << 30})
    [probe] = probe_for(monkeypatch, gpu)
    clock = FakeClock()

    def pull() -> int:
        clock.work(3_000_000)  # waits 3 ms of each 4 ms iteration for data
        return 1

    def step(element: object) -> None:
        clock.work(1_000_000)

    raw = runner.measure({"": Workload(call=pull, pull=pull, step=step)},
                         RunSettings(budget_s=0.02, rounds=2, warmup_s=0.0),
                         clock=clock, probes=[probe], watch=False, split_input=False)[""]
    _, diagnoses = diagnostics.analyse(raw)
    [d] = [d for d in diagnoses if d.kind == "gpu_busy"]
    assert "75% of each step waits for data" in d.summary
    assert dict(d.figures)["input_bound_fraction"] == pytest.approx(0.75)
    probe.close()


def test_busy_figures_stay_out_where_nvml_took_no_reading() -> None:
    extras: list[tuple[str, float]] = []
    diagnoses: list[object] = []
    raw = RawRun(timings=None, memory=(), input_wait_ns=())  # type: ignore[arg-type]
    gpu_waits.extend_analysis(raw, extras, diagnoses)  # type: ignore[arg-type]
    assert extras == [] and diagnoses == []


# -- which GPU stands for the workload; pooling; the table cell -----------------------------------


def test_a_gpu_without_this_process_is_not_the_one_that_waits() -> None:
    mine = GpuBusy("GPU:0", (0.9,), process_on_gpu=True)
    idle_other = GpuBusy("GPU:1", (0.0,), process_on_gpu=False)
    assert gpu_waits.busiest([idle_other, mine]) is mine
    assert gpu_waits.diagnose([mine, idle_other]).severity == "info"
    alone = gpu_waits.diagnose([GpuBusy("GPU:0", (0.05,), process_on_gpu=False)])
    assert alone.severity == "info" and "held no CUDA context" in alone.summary


def test_pooling_concatenates_rounds_per_device() -> None:
    a = (GpuBusy("GPU:0", (0.5, 0.6), (0.4, None), process_on_gpu=True, samples=4),)
    b = (GpuBusy("GPU:0", (0.7,), (0.6,), process_on_gpu=None, samples=2),
         GpuBusy("GPU:1", unavailable="lost"))
    pooled = pool_gpu_busy(a, b)
    assert pooled[0] == GpuBusy("GPU:0", (0.5, 0.6, 0.7), (0.4, None, 0.6), process_on_gpu=True, samples=6)
    assert pooled[1].device == "GPU:1" and not pooled[1].available


def test_the_table_cell_shows_the_device_figure_and_this_process_share() -> None:
    assert format_gpu_busy([GpuBusy("GPU:0", (0.98,), (0.97,))]) == "98% (own 97%)"
    assert format_gpu_busy([GpuBusy("GPU:0", (0.11,)), GpuBusy("GPU:1", unavailable="x")]) == "GPU:0 11%, GPU:1 n/a"


def test_gpu_busy_refuses_fractions_outside_zero_and_one_and_needs_a_figure_or_a_reason() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        GpuBusy("GPU:0", (1.5,))
    with pytest.raises(ValueError, match="exactly one"):
        GpuBusy("GPU:0")
