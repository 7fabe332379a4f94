"""Absolute limits (budgets) on synthetic measurements."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_tfperf.gates.budgets import Budgets, budgets_from_marker, check_budgets, unchecked_budgets
from pytest_tfperf.model import Measurement, MemoryPeak, MemorySource, Timings

MIB = 2**20


def measurement(**overrides: object) -> Measurement:
    fields: dict[str, object] = dict(
        test_id="t",
        mode="call",
        # 10 ms per iteration, 32 items: 3200 items/s.
        timings=Timings((10_000_000,) * 4, (2, 2), 32.0, 50_000_000),
        memory=(
            MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", 100 * MIB),
            MemoryPeak(MemorySource.RSS_HWM, "host", 800 * MIB),
        ),
        traces_steady=2,
        extra_metrics=(("input_bound_fraction", 0.4),),
    )
    fields.update(overrides)
    return Measurement(**fields)  # type: ignore[arg-type]


def test_no_budgets_no_violations() -> None:
    assert check_budgets(measurement(), Budgets()) == ()
    assert Budgets().empty


def test_each_budget_fails_only_when_crossed() -> None:
    m = measurement()
    within = Budgets(max_peak_tf_bytes=100 * MIB, max_peak_rss_bytes=900 * MIB, min_throughput_per_s=3000,
                     max_traces_steady=2, max_extra={"input_bound_fraction": 0.5})
    assert check_budgets(m, within) == ()
    over = Budgets(max_peak_tf_bytes=64 * MIB, max_peak_rss_bytes=512 * MIB, min_throughput_per_s=5000,
                   max_traces_steady=0, max_extra={"input_bound_fraction": 0.25})
    violations = {v.metric: v for v in check_budgets(m, over)}
    assert set(violations) == {"peak_tf_allocator[CPU:0]", "peak_rss_hwm[host]", "throughput", "traces_steady",
                               "input_bound_fraction"}
    tf = violations["peak_tf_allocator[CPU:0]"]
    assert (tf.limit, tf.measured, tf.unit) == (64 * MIB, 100 * MIB, "bytes")
    assert tf.message() == "peak_tf_allocator[CPU:0]: measured 100.0 MiB, limit 64.0 MiB"
    assert violations["throughput"].measured == pytest.approx(3200.0)
    assert violations["traces_steady"].measured == 2


def test_device_budget_reads_nvml_and_minimums_on_extras() -> None:
    m = measurement(memory=(MemoryPeak(MemorySource.NVML, "GPU:0", 3000 * MIB),))
    (v,) = check_budgets(m, Budgets(max_peak_device_bytes=2048 * MIB))
    assert v.metric == "peak_nvml[GPU:0]"
    (low,) = check_budgets(m, Budgets(min_extra={"input_bound_fraction": 0.5}))
    assert low.metric == "input_bound_fraction (minimum)" and low.measured == 0.4


def test_budgets_that_cannot_be_checked_are_listed_with_reasons() -> None:
    m = measurement(
        memory=(MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", None, unavailable="oneDNN is off"),),
        traces_steady=None,
    )
    budgets = Budgets(max_peak_tf_bytes=MIB, max_peak_device_bytes=MIB, max_traces_steady=0,
                      max_extra={"memory_growth_bytes_per_iteration": 1024})
    assert check_budgets(m, budgets) == ()
    notes = unchecked_budgets(m, budgets)
    assert any("max_peak_tf_bytes" in n and "oneDNN is off" in n for n in notes)
    assert any("max_peak_device_bytes" in n and "nvml" in n for n in notes)
    assert any(n.startswith("max_traces") for n in notes)
    assert any("memory_growth_bytes_per_iteration" in n for n in notes)
    assert unchecked_budgets(measurement(), Budgets(max_peak_tf_bytes=MIB)) == ()


def test_budgets_from_marker_options() -> None:
    options = SimpleNamespace(max_peak_tf_bytes=64 * MIB, max_peak_rss_bytes=None, max_peak_device_bytes=None,
                              min_throughput=100.0, max_traces=0, max_input_bound_fraction=0.3,
                              max_memory_growth_bytes_per_iteration=4096, budget_s=2.0,
                              extra={"min_cache_hit_rate": 0.9, "rounds": 5})
    budgets = budgets_from_marker(options)
    assert budgets.max_peak_tf_bytes == 64 * MIB
    assert budgets.min_throughput_per_s == 100.0
    assert budgets.max_traces_steady == 0
    assert budgets.max_extra == (("input_bound_fraction", 0.3), ("memory_growth_bytes_per_iteration", 4096.0))
    assert budgets.min_extra == (("cache_hit_rate", 0.9),)
    assert budgets_from_marker(SimpleNamespace()).empty


def test_budgets_reject_nonsense_with_the_field_name() -> None:
    with pytest.raises(ValueError, match="Budgets.max_peak_tf_bytes must be positive"):
        Budgets(max_peak_tf_bytes=-1)
    with pytest.raises(ValueError, match="Budgets.min_throughput_per_s must be a finite number"):
        Budgets(min_throughput_per_s="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Budgets.max_extra"):
        Budgets(max_extra={"x": float("nan")})
    assert Budgets(max_extra={"b": 1, "a": 2}) == Budgets(max_extra=(("a", 2.0), ("b", 1.0)))


def test_device_budget_message_says_it_limits_the_absolute_peak_and_what_the_test_added() -> None:
    peak = MemoryPeak(MemorySource.NVML, "GPU:0", 1544 * MIB, 520 * MIB, (1544 * MIB,),
                      per_round_start_bytes=(520 * MIB,), scope="process")
    (v,) = check_budgets(measurement(memory=(peak,)), Budgets(max_peak_device_bytes=256 * MIB))
    assert v.message() == (
        "peak_nvml[GPU:0]: measured 1,544.0 MiB, limit 256.0 MiB (the limit applies to the absolute peak: this "
        "process's NVML memory, CUDA context and allocator pool included; the test itself added 1,024.0 MiB above "
        "what was in use when its rounds began)")
    whole = MemoryPeak(MemorySource.NVML, "GPU:0", 9000 * MIB, scope="device")
    (w,) = check_budgets(measurement(memory=(whole,)), Budgets(max_peak_device_bytes=256 * MIB))
    assert "the whole device's NVML memory, all processes on it included" in w.message()


def test_min_gpu_busy_fraction_gates_the_busy_figure_and_says_why_it_is_missing() -> None:
    from pytest_tfperf.config import MarkerOptions
    from pytest_tfperf.model import GpuBusy

    budgets = budgets_from_marker(MarkerOptions.from_kwargs({"min_gpu_busy_fraction": 0.5}, "t"))
    starved = measurement(extra_metrics=(("gpu_busy_fraction", 0.11),))
    (v,) = check_budgets(starved, budgets)
    assert v.message() == "gpu_busy_fraction (minimum): measured 11.0%, limit 50.0%"
    assert check_budgets(measurement(extra_metrics=(("gpu_busy_fraction", 0.98),)), budgets) == ()
    (no_gpu,) = unchecked_budgets(measurement(), budgets)
    assert no_gpu.startswith("min_gpu_busy_fraction: not checked") and "NVML read no GPU" in no_gpu
    lost = measurement(gpu_busy=(GpuBusy("GPU:0", unavailable="round 2 of 5: NVML stopped answering"),))
    (why,) = unchecked_budgets(lost, budgets)
    assert "round 2 of 5: NVML stopped answering" in why
    with pytest.raises(ValueError, match="min_gpu_busy_fraction"):
        MarkerOptions.from_kwargs({"min_gpu_busy_fraction": 1.5}, "t")
