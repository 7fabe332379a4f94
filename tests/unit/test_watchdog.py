"""The stall watchdog with real threads but short, explicit deadlines."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_tfperf import runner
from pytest_tfperf.watchdog import StallError, StallPolicy, run_watched


def test_deadline_is_a_multiple_of_the_typical_iteration_clamped() -> None:
    policy = StallPolicy(multiple=10, floor_s=1, ceiling_s=100)
    assert policy.deadline_ns(None) == 100e9  # nothing measured yet: only the ceiling
    assert policy.deadline_ns(1e6) == 1e9  # 10 ms would be too short: the floor
    assert policy.deadline_ns(5e8) == 5e9
    assert policy.deadline_ns(1e11) == 100e9


@pytest.mark.parametrize("kwargs", [{"multiple": 1}, {"floor_s": 0}, {"floor_s": 5, "ceiling_s": 1}])
def test_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StallPolicy(**kwargs)


def test_a_blocked_iteration_fails_within_its_deadline_with_every_stack() -> None:
    release = threading.Event()
    progress = runner.Progress()

    def body() -> None:
        progress.phase = "round 2/5"
        progress.typical_ns = 1e6
        progress.iteration_started_ns = time.perf_counter_ns()
        release.wait(30)  # blocks like a get_next that never returns

    t0 = time.perf_counter()
    with pytest.raises(StallError) as info:
        run_watched(body, progress, StallPolicy(multiple=10, floor_s=0.3, ceiling_s=5, poll_s=0.02),
                    snapshot=lambda: ["  fake snapshot"])
    elapsed = time.perf_counter() - t0
    release.set()
    assert 0.3 <= elapsed < 3
    text = str(info.value)
    assert "round 2/5" in text and "past its deadline of 0.3 s" in text
    assert "tfperf-measure" in text and "the stalled workload" in text
    assert "release.wait(30)" in text  # the stuck line itself
    assert "fake snapshot" in text


def test_errors_of_the_workload_surface_in_the_calling_thread() -> None:
    def body() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_watched(body, runner.Progress(), StallPolicy(poll_s=0.01))


def test_disabled_watchdog_runs_on_the_calling_thread() -> None:
    seen = []
    run_watched(lambda: seen.append(threading.current_thread()), runner.Progress(), StallPolicy(enabled=False))
    assert seen == [threading.current_thread()]


def test_resource_snapshot_names_process_and_machine_memory() -> None:
    from pytest_tfperf.watchdog import resource_snapshot

    text = "\n".join(resource_snapshot())
    assert "process RSS" in text and "available" in text and "swap" in text
