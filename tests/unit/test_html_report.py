"""The HTML report: its data (bands, order, tolerance of missing fields), its structure, and escaping."""

from __future__ import annotations

import io
import math
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import pytest

from pytest_tfperf import stats
from pytest_tfperf.reports import html_report, plots, sources
from pytest_tfperf.cli import report_cli
from pytest_tfperf.storage.history_csv import history_rows
from pytest_tfperf.model import (
    Environment,
    Measurement,
    MemoryPeak,
    MemorySource,
    Timings,
)
from pytest_tfperf.reports.report_model import Band, build_report, prediction_band
from pytest_tfperf.storage.results_json import results_to_dict, write_results
from pytest_tfperf.reports.shards import load_shards

ENV = Environment(hard=(("cpu_model", "Xeon"), ("tensorflow", "2.21.0")))
HOSTILE = "t.py::test_x[<script>alert(\"1\")</script>-'q'-ünï☃]"


def measurement(test_id: str, speed: float = 1.0, rounds: int = 5) -> Measurement:
    samples = tuple(int(1_000_000 / speed) + 1000 * i for i in range(rounds * 4))
    peaks = tuple(50 * 2**20 + i * 2**18 for i in range(rounds))
    return Measurement(test_id=test_id, mode="call", timings=Timings(samples, (4,) * rounds, 32.0, 10**8),
                       memory=(MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", max(peaks), 0, peaks),
                               MemoryPeak(MemorySource.RSS_HWM, "host", 700 * 2**20, 690 * 2**20, (700 * 2**20,) * rounds)),
                       traces_first_call=1, traces_steady=0, environment_id=ENV.fingerprint)


def verdict(status: str, change: float = -0.2, mdc: float = 0.12) -> dict[str, object]:
    return {"status": status, "metrics": [{"metric": "throughput", "status": status, "relative_change": change,
                                           "ci_low": change - 0.05, "ci_high": change + 0.05,
                                           "minimum_detectable_change": mdc, "message": f"throughput {status}"}]}


def test_prediction_band_is_the_t_prediction_interval_in_logs() -> None:
    values = [100.0, 110.0, 90.0, 105.0, 95.0]
    logs = [math.log(v) for v in values]
    mean = sum(logs) / 5
    half = stats.t_quantile(0.99, 4) * stats.stdev(logs) * math.sqrt(1 + 1 / 5)
    band = prediction_band(values)
    assert band is not None and band.runs == 5
    assert band.level == pytest.approx(math.exp(mean))
    assert band.low == pytest.approx(math.exp(mean - half)) and band.high == pytest.approx(math.exp(mean + half))
    assert prediction_band([120.0]) == Band(pytest.approx(120.0), None, None, 1)  # one run: a level, no spread
    assert prediction_band([0.0, 2.0]) == Band(1.0, None, None, 2)  # counts with zeros: the plain mean
    assert prediction_band([]) is None


def results(tmp_path: Path, name: str = "r.json") -> Path:
    tests = [measurement("t.py::test_ok"), measurement("t.py::test_slow", 0.7), measurement(HOSTILE),
             measurement("t.py::test_noisy")]
    verdicts = {"t.py::test_ok": verdict("unchanged", 0.01), "t.py::test_slow": verdict("regressed", -0.3),
                HOSTILE: {"status": "improved"}, "t.py::test_noisy": verdict("noisy", -0.02, float("inf"))}
    effects = [{"scenario": "demo", "anti": "anti", "fix": "fix", "metric": "throughput", "value": 4.0,
                "spread": [3.0, 5.0], "min_effect": 1.5, "gated": True, "passed": True},
               {"scenario": "<b>bold</b>", "metric": "traces", "value": 1.0, "min_effect": 0.9, "passed": True}]
    return write_results(tmp_path / name, results_to_dict(ENV, tests, verdicts, effects=effects))


def baseline_dir(tmp_path: Path) -> Path:
    from pytest_tfperf.storage.baseline_store import BaselineStore

    directory = tmp_path / "baselines"
    BaselineStore(directory).save([measurement("t.py::test_ok"), measurement("t.py::test_slow")], ENV)
    rows = []
    for run in range(6):
        rows += history_rows([measurement("t.py::test_ok", 1 + run / 50), measurement(HOSTILE)], ENV, f"r{run}",
                             recorded_at=f"2026-11-{run + 10:02d}T06:00:00Z", git_commit=f"{run:040x}",
                             version="0.1.0")
    from pytest_tfperf.storage.history_csv import COLUMNS

    text = ",".join(COLUMNS) + "\n" + "".join(",".join(f'"{c}"' for c in r.as_tuple()) + "\n" for r in rows)
    (directory / "history.csv").write_text(text, encoding="utf-8")
    return directory


def test_failures_come_first_and_verdict_fields_are_read_tolerantly(tmp_path: Path) -> None:
    report = build_report(load_shards([results(tmp_path)]))
    assert [t.status for t in report.tests] == ["regressed", "noisy", "improved", "unchanged"]
    slow = report.tests[0]
    assert slow.failed and slow.change == pytest.approx(-0.3) and slow.detection_limit == pytest.approx(0.12)
    assert slow.ci == (pytest.approx(-0.35), pytest.approx(-0.25))
    assert math.isinf(report.tests[1].detection_limit or 0)
    hostile = report.tests[2]
    assert hostile.change is None and hostile.detection_limit is None and hostile.messages == ()
    assert re.fullmatch(r"t-[A-Za-z0-9_-]+", hostile.anchor)
    assert html_report.detection_text(report.tests[1]) == "none"
    assert html_report.change_text(slow) == "-30.0% [-35.0%, -25.0%]"


class Structure(HTMLParser):
    """Checks that non-void elements nest and close, and collects ids and data-plot values."""

    VOID: ClassVar[set[str]] = {"meta", "br", "img", "hr", "input", "link", "path", "use", "rect", "stop", "circle", "line",
            "polyline", "polygon", "ellipse"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ids: list[str] = []
        self.plots: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if found.get("data-plot"):
            self.plots.append(str(found["data-plot"]))
        self.scripts += tag == "script"
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def test_every_test_and_plot_is_on_a_well_formed_page_with_unique_ids(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code = report_cli.main([str(results(tmp_path)), "--baseline-dir", str(baseline_dir(tmp_path)), "-o", str(out)],
                           stdout=io.StringIO(), stderr=io.StringIO())
    assert code == 0
    page = out.read_text(encoding="utf-8")
    parser = Structure()
    parser.feed(page)
    parser.close()
    assert parser.stack == [] and parser.scripts == 0
    assert len(parser.ids) == len(set(parser.ids)), "ids repeat across the inline SVGs"
    assert parser.plots.count("rounds") == 4 and parser.plots.count("memory") == 4
    assert parser.plots.count("catalog") == 1
    # History: test_ok's throughput moved (drawn); the hostile test's never did (said in words).
    assert parser.plots.count("history") == 1 and 'data-metric="throughput_per_s"' in page
    assert "traces_steady was 0 in every run" in page
    assert page.count('<section class="test') == 4 and page.count('<tr class="failed">') == 1
    assert page.index("t.py::test_slow") < page.index("t.py::test_ok")  # failures first
    assert "≥ 12%" in page  # the detection limit, from minimum_detectable_change
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page


def test_hostile_test_ids_and_texts_are_escaped(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert report_cli.main([str(results(tmp_path)), "-o", str(out)], stdout=io.StringIO()) == 0
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&quot;1&quot;)&lt;/script&gt;-&#x27;q&#x27;-ünï☃" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page


def test_tfperf_report_errors_are_one_line_and_exit_two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(*argv: str) -> tuple[int, str]:
        err = io.StringIO()
        return report_cli.main(list(argv), stdout=io.StringIO(), stderr=err), err.getvalue()

    code, err = run(str(tmp_path / "missing.json"), "-o", str(tmp_path / "x.html"))
    assert code == 2 and err.startswith("tfperf-report: ") and err.count("\n") == 1 and "missing.json" in err
    one, two = results(tmp_path, "a.json"), results(tmp_path, "b.json")
    code, err = run(str(one), str(two), "-o", str(tmp_path / "x.html"))
    assert code == 2 and "must run in exactly one shard" in err and err.count("\n") == 1

    def missing() -> None:
        raise plots.PlottingUnavailable(f"the HTML report draws its charts with matplotlib, which is not "
                                        f"installed: {plots.INSTALL_HINT}")

    monkeypatch.setattr(plots, "_matplotlib", missing)
    code, err = run(str(one), "-o", str(tmp_path / "x.html"))
    assert code == 2 and "pip install 'pytest-tfperf[report]'" in err and not (tmp_path / "x.html").exists()


def test_ticks_stay_few_and_finite_for_flat_and_huge_series() -> None:
    assert plots.nice_ticks(0, 10, 4) == [0, 5, 10] and plots.nice_ticks(0, 10, 6) == [0, 2, 4, 6, 8, 10]
    flat = plots.nice_ticks(1e12, 1e12 + 1e-3, 4)
    assert 1 <= len(flat) <= 9
    assert plots.nice_ticks(5, 5) == [5]


def test_gpu_busy_fraction_is_shown_where_a_probe_recorded_it(tmp_path: Path) -> None:
    import dataclasses

    busy = dataclasses.replace(measurement("t.py::test_gpu"), extra_metrics=(("gpu_busy_fraction", 0.43),))
    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [busy, measurement("t.py::test_cpu")]))
    report = build_report(load_shards([path]))
    assert {t.test_id: t.gpu_busy for t in report.tests} == {"t.py::test_gpu": 0.43, "t.py::test_cpu": None}
    page = html_report.render_html(report)
    assert page.count("<b>GPU busy</b>") == 1 and 'style="width:43%"' in page


class Paired:
    """An outcome as the session keeps it, with what its paired verdict compared with."""

    def __init__(self, measurement: Measurement, baseline: str, reference: Measurement | None = None) -> None:
        self.measurement, self.verdict, self.baseline, self.reference = measurement, verdict("unchanged"), baseline, \
            reference


def test_rounds_are_drawn_against_the_partner_or_the_reference_variant(tmp_path: Path) -> None:
    ours, theirs = measurement("t.py::test_a"), measurement("t.py::test_a", speed=0.9)
    anti, fix = measurement("t.py::test_v[case-anti]", 0.5), measurement("t.py::test_v[case-fix]")
    path = write_results(tmp_path / "r.json", results_to_dict(ENV, [Paired(ours, "measured beside origin/main", theirs),
                                                    Paired(fix, "paired with 'anti'"), Paired(anti, "")]))
    views = {t.test_id: t for t in build_report(load_shards([path])).tests}
    partner = views["t.py::test_a"]
    assert partner.reference_label == "measured beside origin/main"
    assert partner.rounds_reference == (theirs.timings.round_throughputs_per_s,)
    variant = views["t.py::test_v[case-fix]"]
    assert variant.reference_label == "variant 'anti'"
    assert variant.rounds_reference == (anti.timings.round_throughputs_per_s,)
    assert views["t.py::test_v[case-anti]"].rounds_reference == ()


def test_baselines_with_several_runs_give_a_band_and_history_kinds_mark_refreshes() -> None:
    from types import SimpleNamespace

    from pytest_tfperf.storage.history_csv import HistoryRow
    from pytest_tfperf.reports.report_model import BaselineFigures, metric_histories

    from pytest_tfperf.gates.baseline_runs import BaselineRuns
    from pytest_tfperf.gates.stored import baseline_bands
    from pytest_tfperf.gates.stored_rule import MachineFloor
    from pytest_tfperf.gates.verdict import Tolerances
    from pytest_tfperf.storage.runs import RunSummary

    runs = [RunSummary(run_id=f"r{i}", throughput_per_s=v, memory_added_bytes=(("peak_tf_allocator[CPU:0]", 2**20),),
                       traces_steady=0, recorded_at=f"2026-11-0{i + 1}T00:00:00Z", kind="refresh")
            for i, v in enumerate((100.0, 104.0, 98.0, 101.0, 99.0))]
    stored = SimpleNamespace(measurement=measurement("t::a"), recorded_at="2026-11-01T00:00:00Z", runs=tuple(runs))
    floor = MachineFloor(sd=0.05, df=6.0, source="calibration")
    store = SimpleNamespace(load=lambda test_id, env: SimpleNamespace(baseline=stored))
    figures = sources.baseline_figures(store, "t::a", ENV, machine=floor)  # type: ignore[arg-type]
    # The band drawn is the bound the gate applies: the machine's floor included.
    gate = baseline_bands(BaselineRuns(tuple(runs), machine=floor), Tolerances())
    assert figures.gate_bands["throughput_per_s"] == gate["throughput_per_s"]
    assert figures.gate_bands != baseline_bands(BaselineRuns(tuple(runs)), Tolerances())
    assert figures.values["throughput_per_s"] == (100.0, 104.0, 98.0, 101.0, 99.0)
    assert figures.values["added_peak_tf_allocator[CPU:0]"] == (2**20,) * 5 and len(figures.recorded_at) == 5

    rows = []
    for i, (value, kind) in enumerate(((100.0, "refresh"), (103.0, "record"), (97.0, "record"))):
        for metric in ("throughput_per_s", "peak_tf_allocator[CPU:0]", "added_peak_tf_allocator[CPU:0]"):
            row = HistoryRow(f"2026-11-1{i}T00:00:00Z", f"r{i}-{kind}", "t::a", metric, value, "", ENV.fingerprint,
                             "0.1.0", "")
            rows.append(SimpleNamespace(**{f: getattr(row, f) for f in row.__slots__}, kind=kind))
    histories = {h.metric: h for h in metric_histories(rows, figures)}  # type: ignore[arg-type]
    assert set(histories) == {"throughput_per_s", "added_peak_tf_allocator[CPU:0]"}  # added beats absolute
    throughput = histories["throughput_per_s"]
    assert throughput.refreshes == (0,)
    assert throughput.band is not None and throughput.band.low is not None and throughput.band.runs == 5
    assert throughput.band.low == pytest.approx(gate["throughput_per_s"][0])
    assert BaselineFigures.from_measurements([measurement("t::a")]).values["traces_steady"] == (0.0,)
