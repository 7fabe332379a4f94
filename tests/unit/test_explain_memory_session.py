"""A failed TF-allocator peak under --tfperf-explain, in the session: which profiles are read, what is said when
there are none (a stored baseline, a side without a readable profile), and how the explanation joins the
time's. Fake profilers and verdicts; the allocation reader is tests/unit/test_profiling_memory.py's, real
TensorFlow tests/plugin/test_explain_memory.py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_tfperf.config import SessionConfig
from pytest_tfperf.measuring.workload import RunSettings, Workload
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.explain.explanation import Explanation, MemoryExplained, regressed_tf_memory, with_memory
from pytest_tfperf.explain.orchestrate import explain_memory_outcome, store_memory
from pytest_tfperf.session.outcome import Outcome
from pytest_tfperf.session.session import TfPerfSession
from tests.unit.test_explain_session import BASE, FakeProfiler

MIB = 2**20


def metric(name: str, status: str, base: float = MIB, current: float = 5 * MIB) -> Any:
    return SimpleNamespace(metric=name, status=status, baseline_value=base, current_value=current,
                           relative_change=current / base - 1.0)


def outcome(test_id: str, *metrics: Any) -> Outcome:
    m = Measurement(test_id=test_id, mode="call", timings=Timings((1000, 1000, 1000), (3,), 1.0, first_call_ns=10))
    return Outcome(measurement=m, verdict=SimpleNamespace(metrics=metrics, status="regressed"))


def test_only_a_regressed_tf_allocator_peak_is_explained() -> None:
    assert regressed_tf_memory(SimpleNamespace(metrics=[metric("peak_rss_hwm[host]", "regressed")])) is None
    assert regressed_tf_memory(SimpleNamespace(metrics=[metric("peak_tf_allocator[CPU:0]", "unchanged")])) is None
    found = metric("peak_tf_allocator[CPU:0]", "regressed")
    assert regressed_tf_memory(SimpleNamespace(metrics=[found])) is found
    assert regressed_tf_memory(None) is None


def test_a_memory_only_pair_is_profiled_for_it_and_a_missing_raw_profile_is_one_line(tmp_path: Path) -> None:
    session = TfPerfSession(SessionConfig(measure=True, explain=True), str(tmp_path))
    session.profiler = FakeProfiler(reference=BASE, variant=BASE)  # writes no .xplane.pb
    o = outcome("t.py::test[wide]", metric("peak_tf_allocator[CPU:0]", "regressed"))
    ref = outcome("t.py::test[main]").measurement
    workloads = {"main": Workload(call=lambda: None), "wide": Workload(call=lambda: None)}
    explain_memory_outcome(session, o, "wide", workloads, {"main": ref, "wide": o.measurement}, "main",
                           RunSettings(), against=False)
    assert [c[0] for c in session.profiler.calls] == ["reference", "variant"]  # the throughput passed
    assert isinstance(o.explanation, MemoryExplained)
    (line,) = o.explanation.lines  # the time's lines are not shown for a throughput that passed
    assert line.startswith("no explanation of the memory: the baseline side's profile: no .xplane.pb under ")
    assert line.endswith("/.tfperf/profiles/t.py_test_wide/reference")
    data = o.explanation.to_dict()
    assert data["memory"]["reason"].startswith("the baseline side's profile") and data["reason"] is None


def test_a_stored_baseline_says_it_keeps_no_allocations_and_nothing_is_profiled(tmp_path: Path) -> None:
    session = TfPerfSession(SessionConfig(measure=True, explain=True), str(tmp_path))
    session.profiler = FakeProfiler()
    o = outcome("t.py::test", metric("peak_tf_allocator[CPU:0]", "regressed"))
    explain_memory_outcome(session, o, "", {"": Workload(call=lambda: None)}, {"": o.measurement}, None,
                           RunSettings(), against=False)
    assert not session.profiler.calls
    assert o.explanation.lines == ("no explanation of the memory: the stored baseline keeps no allocations by op; "
                                   "refresh it with --tfperf-update",)


def write_xplane(logdir: Path, wide: int) -> None:
    from tests.unit.test_profiling_memory import step_space

    run = Path(logdir) / "plugins" / "profile" / "2026_11_26"
    run.mkdir(parents=True, exist_ok=True)
    (run / "host.xplane.pb").write_bytes(step_space(wide=wide).space.SerializeToString())


class XplaneProfiler(FakeProfiler):
    """A fake profiled pass that also leaves a raw profile with allocation events, as TensorFlow would."""

    def __init__(self, wide: int, **by_side: Any) -> None:
        super().__init__(**by_side)
        self.wide = wide

    def __call__(self, step: Any, logdir: Path, *, name: str, windows: int, iterations: int, **budget: Any) -> Any:
        write_xplane(logdir, self.wide)
        return super().__call__(step, logdir, name=name, windows=windows, iterations=iterations)


def test_a_refresh_stores_the_allocations_and_a_stored_regression_is_explained_against_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tfperf.profiling import xspace
    from pytest_tfperf.explain.explanation import profile_dir
    from tests.unit.test_profiling_xspace import xplane_pb2

    # The protobuf module loaded from its file, as test_profiling_xspace.py does: importing it by name would
    # import TensorFlow into this process.
    monkeypatch.setattr(xspace, "xplane_module", lambda: xplane_pb2)

    session = TfPerfSession(SessionConfig(measure=True, explain=True, update=True), str(tmp_path))
    o = outcome("t.py::test", metric("peak_tf_allocator[CPU:0]", "regressed", MIB, 5.1 * MIB))
    session.profiles[o.measurement.test_id] = {**BASE.to_dict(), "logdir": ".tfperf/profiles/t.py_test/baseline"}
    write_xplane(profile_dir(tmp_path, "t.py::test", "baseline"), wide=MIB)
    store_memory(session, {"": o.measurement})
    stored = session.profiles["t.py::test"]
    assert stored["memory"]["version"] == 1 and stored["memory"]["allocator"] == "bfc_cpu_allocator_for_gpu"

    later = TfPerfSession(SessionConfig(measure=True, explain=True), str(tmp_path))
    later.profiler = XplaneProfiler(5 * MIB, current=BASE)
    o.stored, o.stored_profile = (o.measurement, None), stored
    explain_memory_outcome(later, o, "", {"": Workload(call=lambda: None)}, {"": o.measurement}, None,
                           RunSettings(), against=False)
    assert [c[0] for c in later.profiler.calls] == ["current"]
    lines = o.explanation.lines
    assert lines[0].startswith("where the memory went: +4.10 MiB added peak measured (profiled windows +4.00 MiB")
    assert lines[1].startswith("  wide grew +4.00 MiB at the peak")
    memory = o.explanation.to_dict()["memory"]
    assert memory["base_logdir"] == ".tfperf/profiles/t.py_test/baseline"
    assert memory["current_logdir"] == str(profile_dir(tmp_path, "t.py::test", "current"))


def test_the_memory_joins_the_times_explanation_and_its_headline_speaks_of_bytes() -> None:
    memory = (("where the memory went: +4.00 MiB ...", "  wide grew +4.00 MiB at the peak ±64.00 KiB"),
              {"causes": [{"label": "wide", "how": "grew", "delta_bytes": 4 * MIB}], "lines": ["..."]})
    time = Explanation(lines=("where the time went: ...",), attribution={"causes": [], "lines": ["t"]})
    both = with_memory(time, memory)
    assert both.lines == ("where the time went: ...", *memory[0])
    assert both.to_dict()["memory"] == memory[1] and both.to_dict()["causes"] == []
    alone = with_memory(None, memory)
    assert alone.headline == "wide grew +4.00 MiB at the TF allocator's peak"
    assert alone.to_dict() == {"lines": list(memory[0]), "reason": None, "memory": memory[1]}
