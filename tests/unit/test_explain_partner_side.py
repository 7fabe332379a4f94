"""explain_against: the partner's side (its profile as sent over the pipe) first, then this side, attributed;
trouble on either side is one line. Fake profilers; the protocol itself is tests/unit/test_partner.py's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_tfperf.measuring.workload import Workload
from pytest_tfperf.explain.explanation import (
    PARTNER_PROFILE_SLACK_S,
    explain_against,
    iterations_for,
    partner_profile_timeout_s,
)
from tests.unit.test_explain_session import BASE, MS, PLANTED, FakeProfiler


class PartnerSide:
    """Stands for PairedRun.profile: what the partner sends back for the iterations asked."""

    def __init__(self, answer: tuple[dict[str, Any] | None, str | None]) -> None:
        self.answer = answer
        self.asked: list[int] = []

    def __call__(self, iterations: int) -> tuple[dict[str, Any] | None, str | None]:
        self.asked.append(iterations)
        return self.answer


def workload() -> tuple[Workload, list[str]]:
    ran: list[str] = []
    return Workload(call=lambda: ran.append("this")), ran


def test_the_partners_profile_is_the_base_and_this_side_is_profiled_after_it(tmp_path: Path) -> None:
    this, ran = workload()
    partner = PartnerSide(({**BASE.to_dict(), "logdir": str(tmp_path / "p")}, None))
    fake = FakeProfiler(this=PLANTED)
    out = explain_against("t.py::test_x", partner, this, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                          rootdir=tmp_path, profiler=fake)
    assert partner.asked == [iterations_for(20 * MS, 2.0)]
    assert [(c[0], c[1], c[2]) for c in fake.calls] == [
        ("this", tmp_path / ".tfperf" / "profiles" / "t.py_test_x" / "this", partner.asked[0])]
    assert ran == ["this"]
    assert out.lines[0].startswith("where the time went: +8.00 ms/iteration measured")
    assert any("planted (MatMul family) appeared" in line for line in out.lines)
    assert out.lines[-1].strip() == (f"raw profiles: tensorboard --logdir {tmp_path / 'p'} (baseline), "
                             f"tensorboard --logdir {fake.calls[0][1]} (current)")
    assert out.to_dict()["causes"][0]["key"] == "layer:planted"


def test_this_side_is_profiled_with_the_partner_process_stopped_and_only_then(tmp_path: Path) -> None:
    events: list[str] = []

    @contextmanager
    def partner_stopped() -> Iterator[None]:
        events.append("partner stopped")
        yield
        events.append("partner resumed")

    def partner(iterations: int) -> tuple[dict[str, Any] | None, str | None]:
        events.append("partner profiled")
        return BASE.to_dict(), None

    this = Workload(call=lambda: events.append("this profiled"))
    explain_against("t.py::test_x", partner, this, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                    rootdir=tmp_path, profiler=FakeProfiler(this=PLANTED), partner_stopped=partner_stopped)
    assert events == ["partner profiled", "partner stopped", "this profiled", "partner resumed"]


def test_no_partner_profile_is_one_line_and_this_side_is_not_profiled(tmp_path: Path) -> None:
    this, ran = workload()
    fake = FakeProfiler()
    out = explain_against("t.py::test_x", PartnerSide((None, "the partner side could not be profiled: no TF")),
                          this, measured_s=MS, median_s=MS, budget_s=1.0, rootdir=tmp_path, profiler=fake)
    assert out.lines == ("no explanation: the partner side could not be profiled: no TF",)
    assert not fake.calls and not ran


def test_a_partner_profile_of_another_format_or_this_sides_trouble_is_one_line(tmp_path: Path) -> None:
    this, _ = workload()
    out = explain_against("t.py::test_x", PartnerSide(({"version": 99}, None)), this, measured_s=MS,
                          median_s=MS, budget_s=1.0, rootdir=tmp_path, profiler=FakeProfiler())
    assert len(out.lines) == 1 and out.lines[0].startswith("no explanation: the partner's profile cannot be read")
    out = explain_against("t.py::test_x", PartnerSide((BASE.to_dict(), None)), this, measured_s=MS, median_s=MS,
                          budget_s=1.0, rootdir=tmp_path, profiler=FakeProfiler(this="no XPlane protobuf"))
    assert out.lines == ("no explanation: this side could not be profiled: no XPlane protobuf",)


def test_the_wait_for_the_partner_grows_with_its_windows() -> None:
    assert partner_profile_timeout_s(0.01, 10) == PARTNER_PROFILE_SLACK_S + 3.0 * 51 * 0.01
    assert partner_profile_timeout_s(float("nan"), 1) == PARTNER_PROFILE_SLACK_S + 3.0 * 6


def test_more_pairs_of_processes_are_asked_for_after_this_side_and_their_groups_tested_across_them(
        tmp_path: Path) -> None:
    this, ran = workload()
    partner = PartnerSide((BASE.to_dict(), None))
    asked: list[int] = []

    def more(iterations: int) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[str]]:
        asked.append(iterations)
        assert ran == ["this"]  # after the explanation's own pair
        return [(BASE.to_dict(), PLANTED.to_dict())], ["pair 3 of processes could not be profiled (gone); the "
                                                        "groups were tested across 2"]

    out = explain_against("t.py::test_x", partner, this, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                          rootdir=tmp_path, profiler=FakeProfiler(this=PLANTED), more_pairs=more)
    assert asked == partner.asked
    assert out.to_dict()["pairs"] == 2
    assert "  each layer, op, tf.data stage and the wait for input tested across the 2 pairs of processes (one of " \
           "each version in each) where it was traced: its own between-process spread, each process's load included, " \
           "read from them" in out.lines
    assert out.lines[-1] == "  pair 3 of processes could not be profiled (gone); the groups were tested across 2"
