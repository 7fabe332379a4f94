"""The stall watchdog with real threads but short, explicit deadlines."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.watchdog import Progress
from pytest_tfperf.measuring.workload import RunSettings, Workload
from pytest_tfperf.measuring.watchdog import StallError, StallPolicy, run_watched


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
    progress = Progress()

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
        run_watched(body, Progress(), StallPolicy(poll_s=0.01))


def test_disabled_watchdog_runs_on_the_calling_thread() -> None:
    seen = []
    run_watched(lambda: seen.append(threading.current_thread()), Progress(), StallPolicy(enabled=False))
    assert seen == [threading.current_thread()]


def test_resource_snapshot_names_process_and_machine_memory() -> None:
    from pytest_tfperf.measuring.watchdog import resource_snapshot

    text = "\n".join(resource_snapshot())
    assert "process RSS" in text and "available" in text and "swap" in text


def test_the_first_call_has_only_the_ceiling_as_its_deadline() -> None:
    release = threading.Event()
    progress = Progress()

    def body() -> None:
        progress.phase = "first call"
        progress.iteration_started_ns = time.perf_counter_ns()  # typical_ns stays None: nothing measured yet
        release.wait(30)

    t0 = time.perf_counter()
    with pytest.raises(StallError) as info:
        run_watched(body, progress, StallPolicy(multiple=10, floor_s=0.05, ceiling_s=0.4, poll_s=0.02),
                    snapshot=lambda: [])
    elapsed = time.perf_counter() - t0
    release.set()
    assert elapsed >= 0.4  # not the 0.05 s floor
    err = info.value
    assert "no iteration had completed yet, so the ceiling applies" in err.summary
    assert err.deadline_ns == 400_000_000 and err.waited_ns > err.deadline_ns
    assert err.phase == "first call" and err.iterations_done == 0


def test_a_stalled_thread_is_marked_abandoned_and_listed_until_it_ends() -> None:
    from pytest_tfperf.measuring.watchdog import abandoned_summary, abandoned_threads

    release = threading.Event()
    progress = Progress()

    def body() -> None:
        progress.phase = "round 1/5"
        progress.detail = "waiting for the next dataset element"
        progress.typical_ns = 1e6
        progress.iteration_started_ns = time.perf_counter_ns()
        release.wait(30)

    with pytest.raises(StallError) as info:
        run_watched(body, progress, StallPolicy(multiple=10, floor_s=0.1, ceiling_s=5, poll_s=0.02),
                    snapshot=lambda: [])
    assert progress.abandoned
    assert "stalled in the round 1/5, waiting for the next dataset element:" in info.value.summary
    stuck = abandoned_threads()
    assert stuck
    assert any("stalled in the round 1/5, waiting for the next dataset element" in ln for ln in abandoned_summary())
    release.set()
    for t in stuck:
        t.join(5)
    assert not abandoned_threads() and abandoned_summary() == []


def test_a_measurement_that_resumes_after_its_stall_stops_instead_of_measuring_on() -> None:
    release = threading.Event()
    calls = {"n": 0, "after_release": 0}

    def work() -> None:
        calls["n"] += 1
        if release.is_set():
            calls["after_release"] += 1
        if calls["n"] == 200:  # in the timed rounds: a pull that takes far too long, then returns after all
            release.wait(30)
        time.sleep(0.0002)

    settings = RunSettings(budget_s=0.5, rounds=5, warmup_s=0.02,
                                  stall=StallPolicy(multiple=10, floor_s=0.3, ceiling_s=5, poll_s=0.02))
    from pytest_tfperf.measuring.watchdog import abandoned_threads

    before = set(abandoned_threads())
    with pytest.raises(StallError):
        runner.measure({"": Workload(call=work)}, settings)
    (thread,) = set(abandoned_threads()) - before
    release.set()
    thread.join(5)
    assert not thread.is_alive()
    # it finished at most the rest of its chunk (about 1/64 of the rounds), not the remaining rounds
    assert calls["after_release"] < 100


_HARD_EXIT_SCRIPT = """
import ctypes, sys, time
from pytest_tfperf.measuring.watchdog import Progress, StallPolicy, run_watched

progress = Progress()
mode = sys.argv[1]

def body():
    if mode == "wedged":
        # a C call that keeps the GIL: the watching thread never runs again
        ctypes.PyDLL(None).sleep(20)
    else:
        end = time.monotonic() + 1.5  # healthy, and longer than hard_exit_s
        while time.monotonic() < end:
            progress.iteration_started_ns = time.perf_counter_ns()
            time.sleep(0.001)

run_watched(body, progress, StallPolicy(floor_s=5, ceiling_s=10, poll_s=0.02, hard_exit_s=0.6))
print("finished", flush=True)
"""


@pytest.mark.parametrize("mode", ["healthy", "wedged"])
def test_the_hard_exit_fires_only_when_the_watching_thread_cannot_run(mode: str) -> None:
    import subprocess
    import sys

    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _HARD_EXIT_SCRIPT, mode], capture_output=True, text=True,
                          timeout=60)
    elapsed = time.perf_counter() - t0
    if mode == "healthy":
        assert done.returncode == 0 and "finished" in done.stdout, done.stderr
    else:
        assert done.returncode != 0 and "finished" not in done.stdout
        assert "Timeout" in done.stderr and "in body" in done.stderr  # faulthandler's dump of every thread
        assert elapsed < 15  # well before the 20 s wedge ends
