"""The summary table, Markdown and JUnit properties with and without GPU figures."""

from __future__ import annotations

from pytest_tfperf.reports import report
from pytest_tfperf.model import GpuBusy, Measurement, MemoryPeak, MemorySource, Timings

MIB = 2**20


def measurement(test_id: str = "t.py::test_step", **fields: object) -> Measurement:
    timings = Timings(samples_ns=(1_000_000,) * 10, round_sizes=(5, 5), items_per_iteration=32, first_call_ns=10**8)
    base: dict[str, object] = {"test_id": test_id, "mode": "call", "timings": timings,
                               "memory": (MemoryPeak(MemorySource.RSS_HWM, "host", 300 * MIB),)}
    base.update(fields)
    return Measurement(**base)  # type: ignore[arg-type]


def on_gpu(scope: str = "process") -> Measurement:
    nvml = MemoryPeak(MemorySource.NVML, "GPU:0", 1544 * MIB, 520 * MIB, (1544 * MIB, 1544 * MIB),
                      per_round_start_bytes=(520 * MIB, 520 * MIB), scope=scope)
    return measurement(memory=(MemoryPeak(MemorySource.RSS_HWM, "host", 300 * MIB), nvml),
                       gpu_busy=(GpuBusy("GPU:0", (0.98, 0.97), (0.96, 0.97), process_on_gpu=True, samples=40),))


def test_without_gpu_figures_the_table_has_no_gpu_columns() -> None:
    lines = report.summary_table([report.Row(measurement(), "ok")])
    assert "GPU" not in "\n".join(lines)
    md = report.markdown_summary([report.Row(measurement(), "ok")], [None])
    assert "GPU" not in "\n".join(md)
    assert report.gpu_properties(measurement()) == []


def test_with_gpu_figures_the_table_shows_gpu_memory_and_busy() -> None:
    rows = [report.Row(on_gpu(), "ok"), report.Row(measurement("t.py::test_cpu"), "ok")]
    lines = report.summary_table(rows)
    assert lines[0].split("GPU mem")[1].split()[:5] == ["GPU", "busy", "traces", "catches", "verdict"]
    gpu_row = next(line for line in lines if line.startswith("t.py::test_step"))
    assert "1,544.0 MiB (+1,024.0)" in gpu_row and "98% (own 96%)" in gpu_row
    cpu_row = next(line for line in lines if line.startswith("t.py::test_cpu"))
    assert " - " in cpu_row
    assert any(line.startswith("GPU mem: NVML peak of this process") for line in lines)


def test_a_whole_device_figure_is_marked() -> None:
    lines = report.summary_table([report.Row(on_gpu(scope="device"), "ok")])
    assert "1,544.0 MiB (+1,024.0)*" in lines[2]


def test_markdown_has_gpu_columns_when_a_gpu_was_measured() -> None:
    md = report.markdown_summary([report.Row(on_gpu(), "ok")], [None])
    assert md[2] == "| test | throughput | change vs baseline | catches | peak TF | GPU mem | GPU busy | verdict |"
    assert "| 1,544.0 MiB (+1,024.0) | 98% (own 96%) | ok |" in md[4]


def test_junit_properties_say_which_nvml_figure_and_the_busy_fractions() -> None:
    props = dict(report.gpu_properties(on_gpu()))
    assert props == {
        "tfperf_peak_nvml[GPU:0]_scope": "process",
        "tfperf_peak_nvml[GPU:0]_added_bytes": 1024 * MIB,
        "tfperf_gpu_busy[GPU:0]_fraction": 0.975,
        "tfperf_gpu_busy[GPU:0]_process_fraction": 0.965,
    }
