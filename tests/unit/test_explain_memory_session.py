"""A failed TF-allocator peak under --tfperf-explain, in the session: which profiles are read, what is said when
there are none (a stored baseline, a side without a readable profile), and how the explanation joins the
time's. Fake profilers and verdicts; the allocation reader is tests/unit/test_profiling_memory.py's, real
TensorFlow tests/plugin/test_explain_memory.py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pytest_tfperf.config import SessionConfig
from pytest_tfperf.measuring.workload import RunSettings, Workload
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.session.explain import Explanation, MemoryExplained, regressed_tf_memory, with_memory
from pytest_tfperf.session.outcome import Outcome
from pytest_tfperf.session.session import TfPerfSession
from tests.unit.test_explain_session import BASE, FakeProfiler

MIB = 2**20


def metric(name: str, status: str, base: float = MIB, current: float = 5 * MIB) -> Any:
    return SimpleNamespace(metric=name, status=status, baseline_value=base, current_value=current)


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
    session._explain_memory(o, "wide", workloads, {"main": ref, "wide": o.measurement}, "main", RunSettings(),
                            against=False)
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
    session._explain_memory(o, "", {"": Workload(call=lambda: None)}, {"": o.measurement}, None, RunSettings(),
                            against=False)
    assert not session.profiler.calls
    assert o.explanation.lines == ("no explanation of the memory: the stored baseline keeps no allocations by op; "
                                   "compare beside the other version (--tfperf-against) or with "
                                   "tfperf.compare(reference=...)",)


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
