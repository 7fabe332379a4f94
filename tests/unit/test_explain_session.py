"""--tfperf-explain's orchestration with a fake profiler: which sides are profiled where, what the message and
JSON gain, and the one line when there is no explanation. No TensorFlow: the profiled pass is injected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_tfperf.explain.explanation import (
    NO_STORED_PROFILE,
    explain_pair,
    explain_stored,
    iterations_for,
    one_iteration,
    rounds_seconds,
    profile_dir,
    safe_name,
)
from pytest_tfperf.measuring.workload import Workload
from pytest_tfperf.profiling.capture import ProfileOutcome
from pytest_tfperf.profiling.profile_model import Group, Profile

MS = 1e-3
STEADY = (10.0, 10.1, 9.9, 10.05, 9.95)


def profile(*groups: Group, wall: tuple[float, ...] = (20, 20.2, 19.8, 20.1, 19.9), logdir: str | None = None
            ) -> Profile:
    k = len(wall)
    return Profile(name="p", iterations=10, wall=tuple(w * MS for w in wall), groups=groups, other=(0.0,) * k,
                   smallest_kept=0.0, input_wait=(0.0,) * k, elements=0.0, logdir=logdir)


def layer(name: str, values: tuple[float, ...]) -> Group:
    return Group(key=f"layer:{name}", kind="layer", label=name, families=("MatMul",),
                 per_window=tuple(v * MS for v in values))


class FakeProfiler:
    """Stands for profile_step: records each call, returns the profile planned for its side (or a reason)."""

    def __init__(self, **by_side: Any) -> None:
        self.by_side = by_side
        self.calls: list[tuple[str, Path, int]] = []
        self.budgets: list[dict[str, Any]] = []

    def __call__(self, step: Any, logdir: Path, *, name: str, windows: int, iterations: int,
                 **budget: Any) -> ProfileOutcome:
        self.calls.append((name, Path(logdir), iterations))
        self.budgets.append(budget)
        step()  # the side's own iteration runs
        planned = self.by_side[name]
        if isinstance(planned, Exception):
            raise planned
        if isinstance(planned, str):
            return ProfileOutcome(None, planned, None, 0.1)
        return ProfileOutcome(Profile(**{**{f: getattr(planned, f) for f in planned.__slots__},
                                         "logdir": str(logdir)}), None, str(logdir), 0.1)


BASE = profile(layer("body", STEADY))
PLANTED = profile(layer("body", STEADY), layer("planted", (8.0, 8.1, 7.9, 8.0, 8.0)),
                  wall=(28, 28.2, 27.8, 28.1, 27.9))


def workloads() -> tuple[Workload, Workload, list[str]]:
    ran: list[str] = []
    return Workload(call=lambda: ran.append("reference")), Workload(call=lambda: ran.append("variant")), ran


def test_a_pair_profiles_the_reference_then_the_variant_each_in_its_own_folder(tmp_path: Path) -> None:
    reference, variant, ran = workloads()
    fake = FakeProfiler(reference=BASE, variant=PLANTED)
    out = explain_pair("t.py::test_pair[slow]", reference, variant, measured_s=8 * MS, median_s=20 * MS,
                       budget_s=2.0, rootdir=tmp_path, profiler=fake)
    assert [c[0] for c in fake.calls] == ["reference", "variant"] and ran == ["reference", "variant"]
    assert fake.calls[0][1] == tmp_path / ".tfperf" / "profiles" / "t.py_test_pair_slow" / "reference"
    assert fake.calls[1][1] == tmp_path / ".tfperf" / "profiles" / "t.py_test_pair_slow" / "variant"
    assert out.lines[0].startswith("where the time went: +8.00 ms/iteration measured")
    assert any("planted (MatMul family) appeared" in line for line in out.lines)
    assert f"tensorboard --logdir {fake.calls[1][1]} (current)" in out.lines[-1]
    data = out.to_dict()
    assert data["causes"][0]["key"] == "layer:planted" and data["lines"] == list(out.lines)
    assert out.headline == "planted (MatMul family) appeared +8.00 ms/iteration"


def test_a_profile_that_cannot_be_taken_is_one_line_and_the_variant_is_not_profiled(tmp_path: Path) -> None:
    reference, variant, _ = workloads()
    fake = FakeProfiler(reference="another profiler session is running (TensorFlow allows one at a time)")
    out = explain_pair("t.py::test", reference, variant, measured_s=MS, median_s=MS, budget_s=1.0,
                       rootdir=tmp_path, profiler=fake)
    assert out.lines == ("no explanation: the reference side could not be profiled: another profiler session is "
                         "running (TensorFlow allows one at a time)",)
    assert [c[0] for c in fake.calls] == ["reference"]
    assert out.to_dict() == {"lines": list(out.lines), "reason": out.reason}


def test_a_step_that_raises_in_the_profiled_pass_gives_a_reason_not_an_error(tmp_path: Path) -> None:
    reference, variant, _ = workloads()
    fake = FakeProfiler(reference=BASE, variant=RuntimeError("boom\nmore"))
    out = explain_pair("t.py::test", reference, variant, measured_s=MS, median_s=MS, budget_s=1.0,
                       rootdir=tmp_path, profiler=fake)
    assert out.lines == ("no explanation: the variant side's profiled pass raised RuntimeError: boom",)


def test_a_stored_regression_profiles_the_current_side_against_the_stored_profile(tmp_path: Path) -> None:
    _, current, ran = workloads()
    fake = FakeProfiler(current=PLANTED)
    stored = profile(layer("body", STEADY), logdir=".tfperf/profiles/t.py_test/baseline").to_dict()
    out = explain_stored("t.py::test", stored, current, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                         rootdir=tmp_path, profiler=fake)
    assert [c[0] for c in fake.calls] == ["current"] and ran == ["variant"]
    assert any("planted (MatMul family) appeared" in line for line in out.lines)
    # the baseline's raw profile is not in this checkout: the line says how to profile both sides here
    assert "the baseline's raw profile is not in this checkout" in out.lines[-1]
    assert "tensorboard --logdir .tfperf/profiles/t.py_test/baseline" not in "\n".join(out.lines)


def test_no_stored_profile_says_how_to_get_one_without_profiling(tmp_path: Path) -> None:
    _, current, ran = workloads()
    fake = FakeProfiler()
    out = explain_stored("t.py::test", None, current, measured_s=MS, median_s=MS, budget_s=1.0,
                         rootdir=tmp_path, profiler=fake)
    assert out.lines == (NO_STORED_PROFILE,) and not fake.calls and not ran
    # explanations are on by default: a plain refresh stores the profile
    assert NO_STORED_PROFILE.endswith("; refresh it with --tfperf-update")


def test_a_stored_profile_of_another_format_is_one_line(tmp_path: Path) -> None:
    _, current, _ = workloads()
    out = explain_stored("t.py::test", {"version": 99}, current, measured_s=MS, median_s=MS, budget_s=1.0,
                         rootdir=tmp_path, profiler=FakeProfiler())
    assert len(out.lines) == 1 and out.lines[0].startswith("no explanation: the baseline's profile cannot be read")


def test_folder_names_and_iteration_counts() -> None:
    assert safe_name("tests/a b.py::test_x[p/q:1]") == "tests_a_b.py_test_x_p_q_1"
    assert profile_dir("/r", "t.py::x", "variant") == Path("/r/.tfperf/profiles/t.py_x/variant")
    assert iterations_for(0.001, 2.0) == 50 and iterations_for(0.05, 2.0) == 4 and iterations_for(10.0, 2.0) == 1
    pulled = []
    w = Workload(call=lambda: None, pull=lambda: 3, step=lambda e: pulled.append(e))
    one_iteration(w)()
    assert pulled == [3]


class FakePairProfiler:
    """Stands for profile_steps: one call for both sides, one folder; each side's planned profile or a reason."""

    def __init__(self, reason: str | None = None, raises: Exception | None = None) -> None:
        self.reason, self.raises = reason, raises
        self.calls: list[tuple[list[str], Path, int, dict[str, int]]] = []
        self.budgets: list[dict[str, Any]] = []

    def __call__(self, steps: Any, logdir: Path, *, windows: int, iterations: dict[str, int],
                 **budget: Any) -> dict[str, Any]:
        self.calls.append((list(steps), Path(logdir), windows, dict(iterations)))
        self.budgets.append(budget)
        if self.raises:
            raise self.raises
        for step in steps.values():
            step()
        planned = {"reference": BASE, "variant": PLANTED}
        return {side: ProfileOutcome(None if self.reason else Profile(**{
            **{f: getattr(planned[side], f) for f in planned[side].__slots__}, "logdir": str(logdir)}),
            self.reason, str(logdir), 0.1) for side in steps}


def test_a_pair_is_profiled_in_one_session_its_sides_alternating_in_one_folder(tmp_path: Path) -> None:
    reference, variant, ran = workloads()
    fake = FakePairProfiler()
    out = explain_pair("t.py::test_pair[slow]", reference, variant, measured_s=8 * MS, median_s=20 * MS,
                       budget_s=2.5, rootdir=tmp_path, pair_profiler=fake)
    ((sides, logdir, windows, iterations),) = fake.calls
    assert sides == ["reference", "variant"] and ran == ["reference", "variant"]
    assert logdir == tmp_path / ".tfperf" / "profiles" / "t.py_test_pair_slow" / "pair"
    # each side's windows take a quarter of the budget: 2.5 s / 4 / 6 windows = 104 ms a window, of 20 and 28 ms
    assert windows == 6 and iterations == {"reference": 5, "variant": 3}
    assert out.attribution is not None and out.attribution["causes"][0]["key"] == "layer:planted"
    assert out.lines[-1] == f"  raw profile (both sides, alternating windows): tensorboard --logdir {logdir}"


def test_a_pair_that_cannot_be_profiled_or_raises_is_one_line(tmp_path: Path) -> None:
    reference, variant, _ = workloads()
    out = explain_pair("t.py::test", reference, variant, measured_s=MS, median_s=MS, budget_s=1.0, rootdir=tmp_path,
                       pair_profiler=FakePairProfiler(reason="another profiler session is running"))
    assert out.lines == ("no explanation: the pair could not be profiled: another profiler session is running",)
    out = explain_pair("t.py::test", reference, variant, measured_s=MS, median_s=MS, budget_s=1.0, rootdir=tmp_path,
                       pair_profiler=FakePairProfiler(raises=RuntimeError("boom\nmore")))
    assert out.lines == ("no explanation: the profiled pass raised RuntimeError: boom",)


def test_a_pair_that_pulls_from_a_dataset_keeps_one_pass_per_side(tmp_path: Path) -> None:
    # a pipeline works ahead on its own threads: alternating windows would count it in the other side's
    pulled: list[str] = []
    reference = Workload(call=lambda: None, pull=lambda: pulled.append("r"), step=lambda e: None)
    variant = Workload(call=lambda: None, pull=lambda: pulled.append("v"), step=lambda e: None)
    pair = FakePairProfiler()
    single = FakeProfiler(reference=BASE, variant=PLANTED)
    import pytest_tfperf.profiling.capture as capture
    original = capture.profile_step
    capture.profile_step = single  # type: ignore[assignment]
    try:
        explain_pair("t.py::test", reference, variant, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                     rootdir=tmp_path, pair_profiler=pair)
    finally:
        capture.profile_step = original  # type: ignore[assignment]
    assert pair.calls == [] and [c[0] for c in single.calls] == ["reference", "variant"]


def test_the_profiled_pass_is_bounded_by_the_measured_rounds_it_explains(tmp_path: Path) -> None:
    from pytest_tfperf.model import Timings

    timings = Timings(samples_ns=(20_000_000,) * 50, round_sizes=(10,) * 5, items_per_iteration=1, first_call_ns=1)
    assert rounds_seconds(timings) == 1.0
    # a stored subsample of 400 measured iterations: the rounds took 8 times the samples' sum
    stored = Timings(samples_ns=(20_000_000,) * 50, round_sizes=(50,), items_per_iteration=1, first_call_ns=1,
                     measured_iterations=400)
    assert rounds_seconds(stored) == 8.0
    # a pair in one session: both sides' rounds bound it, 5 windows a side at the least
    reference, variant, _ = workloads()
    pair = FakePairProfiler()
    explain_pair("t.py::test_p", reference, variant, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                 rootdir=tmp_path, pair_profiler=pair, rounds_s=2.2)
    assert pair.budgets == [{"budget_s": 2.2, "min_windows": 5}]
    # one pass per side (a dataset, or an injected single-side profiler): half of both sides' rounds each
    single = FakeProfiler(reference=BASE, variant=PLANTED)
    explain_pair("t.py::test_p", reference, variant, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                 rootdir=tmp_path, profiler=single, rounds_s=2.2)
    # (each side settled first: ten of its iterations set aside, 20 ms and 28 ms, at most a quarter of its budget;
    # see test_explain_settle)
    assert [{k: v for k, v in b.items() if k != "before_windows"} for b in single.budgets] \
        == [{"budget_s": pytest.approx(1.1 - 0.2), "min_windows": 5}, {"budget_s": pytest.approx(1.1 * 3 / 4),
                                                                       "min_windows": 5}]
    # a stored gate: the current side's rounds; without them (a caller that has none) no bound is passed
    current = FakeProfiler(current=PLANTED)
    explain_stored("t.py::test_s", BASE.to_dict(), variant, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                   rootdir=tmp_path, profiler=current, rounds_s=1.0)
    explain_stored("t.py::test_s", BASE.to_dict(), variant, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                   rootdir=tmp_path, profiler=current)
    assert [{k: v for k, v in b.items() if k != "before_windows"} for b in current.budgets] \
        == [{"budget_s": 0.75, "min_windows": 5}, {}]  # a quarter (0.25 s < ten 28 ms iterations) to settle
