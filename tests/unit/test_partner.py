"""The partner protocol of --tfperf-against, without processes: pipes, fake channels, a throwaway git repository."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.against.paired_run import PairedRun
from pytest_tfperf.against.partner import Partner
from pytest_tfperf.against.partner_server import ENV_FDS, PROTOCOL, Channel, PartnerServer, Request
from pytest_tfperf.session.git_tree import mapped_directory
from pytest_tfperf.against.partner_tree import PartnerError, checkout, partner_environment, resolve_against
from pytest_tfperf.storage.serialization import measurement_to_dict


def pipe_channels() -> tuple[Channel, Channel]:
    a_r, b_w = os.pipe()
    b_r, a_w = os.pipe()
    return Channel(a_r, a_w), Channel(b_r, b_w)


def test_channel_carries_json_lines_both_ways() -> None:
    a, b = pipe_channels()
    a.send(op="run", nodeid="t.py::test[x]", rounds=20)
    a.send(op="round", index=3)
    assert b.receive(1.0) == {"op": "run", "nodeid": "t.py::test[x]", "rounds": 20}
    assert b.receive(1.0) == {"op": "round", "index": 3}
    b.send(op="done", index=3)
    assert a.receive(1.0) == {"op": "done", "index": 3}
    a.close()
    b.close()


def test_channel_reports_silence_an_ended_peer_and_garbage() -> None:
    a, b = pipe_channels()
    with pytest.raises(PartnerError, match="no answer within"):
        a.receive(0.05)
    os.write(b._write_fd, b"not json\n")
    with pytest.raises(PartnerError, match="unreadable message"):
        a.receive(1.0)
    b.close()
    with pytest.raises(PartnerError, match="ended"):
        a.receive(1.0)
    with pytest.raises(PartnerError, match="gone"):
        a.send(op="exit")
    a.close()


class ScriptedChannel:
    """Answers each receive from a script; records what was sent."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answers = list(answers)

    def send(self, **message: Any) -> None:
        self.sent.append(message)

    def receive(self, timeout_s: float | None) -> dict[str, Any]:
        if not self.answers:
            raise PartnerError("no answer within 1 s")
        return self.answers.pop(0)


class FakePartner:
    timeout_s = 1.0
    freezing = False
    duet_cpu: int | None = None

    def __init__(self) -> None:
        self.calls: list[str] = []

    def freeze(self) -> None:
        self.calls.append("freeze")

    def thaw(self) -> None:
        self.calls.append("thaw")


def measurement() -> Measurement:
    return Measurement(test_id="t.py::test_a", mode="call",
                       timings=Timings((1000, 1100, 1200, 1300), (2, 2), 1.0, first_call_ns=5000))


def test_partner_rounds_go_abba_around_ours() -> None:
    channel = ScriptedChannel([{"op": "done", "index": i} for i in range(4)]
                              + [{"op": "result", "measurement": measurement_to_dict(measurement())}])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    order: list[str] = []

    def partner_rounds_since(mark: int) -> None:
        order.extend(f"partner {m['index']}" for m in channel.sent[mark:])

    for r in range(4):
        mark = len(channel.sent)
        run.pace("before", r)
        partner_rounds_since(mark)
        order.append(f"ours {r}")
        mark = len(channel.sent)
        run.pace("after", r)
        partner_rounds_since(mark)
    assert order == ["ours 0", "partner 0", "partner 1", "ours 1", "ours 2", "partner 2", "partner 3", "ours 3"]
    assert run.finish(True) == measurement()


def test_in_the_duet_design_the_partner_round_runs_while_ours_does() -> None:
    """TFPERF_DUET=1 (benchmarks/paired_duet.py): round i is sent before ours starts and awaited after it ends."""
    channel = ScriptedChannel([{"op": "done", "index": i} for i in range(3)])
    partner = FakePartner()
    partner.duet_cpu = 1
    run = PairedRun(partner, channel, "t.py::test_a")  # type: ignore[arg-type]
    for r in range(3):
        run.pace("before", r)
        assert channel.sent[-1] == {"op": "round", "index": r} and len(channel.answers) == 3 - r  # not awaited
        run.pace("after", r)
        assert len(channel.answers) == 2 - r  # its "done" read once ours ended
    assert run._theirs_per_s == [] and run._rounds_done == 3 and "freeze" not in partner.calls


def test_the_duet_design_is_asked_for_by_its_variable_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tfperf.against import partner as partner_module

    monkeypatch.delenv("TFPERF_DUET", raising=False)
    assert not partner_module.duet()
    monkeypatch.setenv("TFPERF_DUET", "1")
    assert partner_module.duet() == hasattr(os, "sched_setaffinity")


def test_a_confirmation_reads_every_variant_and_an_old_partner_sends_one() -> None:
    other = Measurement(test_id="t.py::test_a[b]", mode="call",
                        timings=Timings((900, 950), (2,), 1.0, first_call_ns=4000))
    both = [measurement_to_dict(measurement()), measurement_to_dict(other)]
    channel = ScriptedChannel([{"op": "done", "index": 0},
                               {"op": "result", "measurement": both[0], "measurements": both}])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    run.measure_alone(1)
    assert run.finish_all(True) == [measurement(), other]
    old = ScriptedChannel([{"op": "result", "measurement": both[0]}])  # a partner without "measurements"
    assert PairedRun(FakePartner(), old, "t.py::test_a").finish_all(True) == [measurement()]  # type: ignore[arg-type]


def test_a_partner_that_fails_mid_run_drops_the_pairing_with_its_reason() -> None:
    channel = ScriptedChannel([{"op": "done", "index": 0}, {"op": "failed", "text": "call: ZeroDivisionError"}])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    for r in range(4):
        run.pace("before", r)
        run.pace("after", r)
    assert len(channel.sent) == 2  # no more rounds asked of a partner that failed
    assert run.dropped is not None and "ZeroDivisionError" in run.dropped and "round 2" in run.dropped
    with pytest.raises(PartnerError, match="ZeroDivisionError"):
        run.finish(True)


def test_when_our_side_fails_the_partner_is_stopped_and_drained() -> None:
    channel = ScriptedChannel([{"op": "failed", "text": "stopped by the coordinator"}])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    with pytest.raises(PartnerError, match="did not complete"):
        run.finish(False)
    assert channel.sent == [{"op": "abort"}] and not channel.answers


def test_an_unreadable_result_is_reported_as_such() -> None:
    channel = ScriptedChannel([{"op": "result", "measurement": {"test_id": 3}}])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    with pytest.raises(PartnerError, match="the partner's result for t.py::test_a"):
        run.finish(True)


class FakeItem:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_partner_server_answers_missing_failed_and_result() -> None:
    channel = ScriptedChannel([
        {"op": "run", "nodeid": "t.py::nope", "rounds": 20, "budget_s": 1.0},
        {"op": "run", "nodeid": "t.py::broken", "rounds": 20, "budget_s": 1.0},
        {"op": "run", "nodeid": "t.py::good", "rounds": 2, "budget_s": 0.5},
        {"op": "round", "index": 0}, {"op": "round", "index": 1},
        {"op": "exit"},
    ])
    server = PartnerServer(channel)  # type: ignore[arg-type]
    seen = []

    def run_item(item: FakeItem) -> None:
        assert server.request is not None
        seen.append((item.nodeid, server.request.rounds, server.request.budget_s))
        if item.nodeid.endswith("broken"):
            crash = SimpleNamespace(message="OSError: no data")
            report = SimpleNamespace(failed=True, when="setup", longrepr=SimpleNamespace(reprcrash=crash),
                                     longreprtext="...\nfixtures.py:3: OSError")
            server.pytest_runtest_logreport(report)
            return
        server.pace("ready", -1)
        for r in range(server.request.rounds):
            server.pace("before", r)
            server.pace("after", r)
        server.send_result([measurement()])

    server.serve([FakeItem("t.py::broken"), FakeItem("t.py::good")], run_item)  # type: ignore[arg-type]
    ops = [m["op"] for m in channel.sent]
    assert channel.sent[0]["protocol"] == PROTOCOL
    assert ops == ["hello", "missing", "failed", "ready", "done", "done", "result"]
    assert channel.sent[2]["text"] == "setup: OSError: no data"
    assert seen == [("t.py::broken", 20, 1.0), ("t.py::good", 2, 0.5)]
    assert server.request is None


class HoldingPartner:
    """What PairedRun.profile needs of its Partner: the held run, and abandon (recorded)."""

    timeout_s = 1.0

    def __init__(self) -> None:
        self.held: Any = None
        self.abandoned: list[str] = []

    def abandon(self, why: str) -> None:
        self.abandoned.append(why)
        self.held = None

    def thaw(self) -> None:
        pass


def held_run(answers: list[dict[str, Any]]) -> tuple[PairedRun, ScriptedChannel, HoldingPartner]:
    partner = HoldingPartner()
    channel = ScriptedChannel([{"op": "result", "measurement": measurement_to_dict(measurement())}, *answers])
    run = PairedRun(partner, channel, "t.py::test_a", explain=True)  # type: ignore[arg-type]
    run.finish(True)
    assert partner.held is run  # under explain, the partner's test waits after its result
    return run, channel, partner


def test_a_held_partner_profiles_its_side_into_the_folder_named_and_is_released() -> None:
    run, channel, partner = held_run([{"op": "profiled", "profile": {"version": 1}, "reason": None}])
    assert run.profile(rootdir="/r", test_id="t.py::test_a", side="partner", iterations=7, timeout_s=5.0) == (
        {"version": 1}, None)
    assert channel.sent[-1] == {"op": "profile", "rootdir": "/r", "test_id": "t.py::test_a", "side": "partner",
                                "iterations": 7, "variant": None, "timeout_s": 5.0}
    run.release()
    assert channel.sent[-1] == {"op": "release"} and partner.held is None and not partner.abandoned
    # Released: nothing more is asked of it.
    assert run.profile(rootdir="/r", test_id="t.py::test_a", side="partner", iterations=7, timeout_s=5.0) == (
        None, "the partner no longer holds this test's workload")


def test_a_partner_without_a_profile_says_why_and_one_that_is_silent_is_stopped() -> None:
    run, _, partner = held_run([{"op": "profiled", "profile": None, "reason": "the partner side could not be "
                                                                              "profiled: no profiler"}])
    assert run.profile(rootdir="/r", test_id="t", side="partner", iterations=1, timeout_s=5.0) == (
        None, "the partner side could not be profiled: no profiler")
    assert not partner.abandoned
    run, _, partner = held_run([])  # no answer: ScriptedChannel raises as Channel does on its timeout
    profile, why = run.profile(rootdir="/r", test_id="t", side="partner", iterations=1, timeout_s=5.0)
    assert profile is None and why is not None and "gave no answer (no answer within 1 s)" in why
    assert partner.abandoned == [why]
    run, _, partner = held_run([{"op": "failed", "text": "call: boom"}])
    assert run.profile(rootdir="/r", test_id="t", side="partner", iterations=1, timeout_s=5.0)[0] is None
    assert len(partner.abandoned) == 1 and "call: boom" in partner.abandoned[0]


def test_a_silent_partner_is_stopped_at_once_and_the_next_test_may_start_a_fresh_one(tmp_path: Path) -> None:
    partner = Partner("HEAD~1", current_root=tmp_path, invocation_dir=tmp_path, test_args=[], timeout_s=1.0)
    ours, theirs = pipe_channels()
    process = subprocess.Popen(["sleep", "600"])
    partner._process, partner._channel = process, ours
    run = PairedRun(partner, ours, "t.py::test_a", explain=True)
    partner.held = run
    profile, why = run.profile(rootdir="/r", test_id="t", side="partner", iterations=1, timeout_s=0.05)
    assert profile is None and why is not None and "no answer within 0 s" in why
    assert process.returncode is not None  # killed, not waited on
    assert partner._process is None and partner._channel is None and partner.held is None
    assert partner._broken is None  # not broken: the next begin starts a fresh process
    theirs.close()


def test_a_held_partner_test_answers_profile_requests_until_released() -> None:
    channel = ScriptedChannel([{"op": "profile", "iterations": 3}, {"op": "profile", "iterations": 4},
                               {"op": "release"}])
    server = PartnerServer(channel)  # type: ignore[arg-type]

    server.request = Request("t.py::test_a", 2, 0.5, explain=True)
    asked: list[int] = []

    def profile(message: dict[str, Any]) -> dict[str, Any]:
        asked.append(message["iterations"])
        if message["iterations"] == 4:
            raise RuntimeError("the step broke")
        return {"profile": {"version": 1}, "reason": None}

    server.hold(profile)
    assert asked == [3, 4]
    assert channel.sent[0] == {"op": "profiled", "profile": {"version": 1}, "reason": None}
    assert channel.sent[1]["profile"] is None
    assert channel.sent[1]["reason"] == "the partner's profiled pass raised RuntimeError: the step broke"
    assert not channel.answers


def test_a_held_partner_stops_the_coordinator_while_its_pass_runs_and_lets_it_run_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tfperf.against import partner_server

    events: list[str] = []
    monkeypatch.setattr(partner_server.freeze, "stop", lambda pid: events.append(f"stop {pid}") or True)
    monkeypatch.setattr(partner_server.freeze, "cont", lambda pid: events.append(f"cont {pid}"))
    channel = ScriptedChannel([{"op": "profile", "iterations": 3}, {"op": "profile", "iterations": 4},
                               {"op": "release"}])
    server = PartnerServer(channel)  # type: ignore[arg-type]
    server.request = Request("t.py::test_a", 2, 0.5, explain=True, freeze=4321)

    def profile(message: dict[str, Any]) -> dict[str, Any]:
        events.append(f"pass {message['iterations']}")
        if message["iterations"] == 4:
            raise RuntimeError("the step broke")
        return {"profile": None, "reason": "unused"}

    server.hold(profile)
    # a pass that raised lets the coordinator run too
    assert events == ["stop 4321", "pass 3", "cont 4321", "stop 4321", "pass 4", "cont 4321"]
    # A pass stuck past the coordinator's deadline for its answer lets the coordinator run at that deadline (which
    # then stops this process): here the pass waits until the coordinator is let run.
    events.clear()
    let_run = threading.Event()
    monkeypatch.setattr(partner_server.freeze, "cont", lambda pid: (events.append(f"cont {pid}"), let_run.set()))
    stuck = PartnerServer(ScriptedChannel([{"op": "profile", "iterations": 5, "timeout_s": 0.01}]))  # type: ignore[arg-type]
    stuck.request = Request("t.py::test_a", 2, 0.5, explain=True, freeze=4321)

    def stuck_pass(message: dict[str, Any]) -> dict[str, Any]:
        assert let_run.wait(60.0)
        events.append("pass ended")
        return {"profile": None, "reason": "unused"}

    stuck.hold(stuck_pass)
    assert events[:3] == ["stop 4321", "cont 4321", "pass ended"]
    # A coordinator that asked not to be stopped (freezing off) is not.
    events.clear()
    quiet = PartnerServer(ScriptedChannel([{"op": "profile", "iterations": 3}]))  # type: ignore[arg-type]
    quiet.request = Request("t.py::test_a", 2, 0.5, explain=True)
    quiet.hold(profile)
    assert events == ["pass 3"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process state is read from /proc (Linux)")
def test_a_partner_process_is_stopped_inside_frozen_and_before_a_profile_or_release_runs_again(
        tmp_path: Path) -> None:
    from pytest_tfperf.against import freeze

    partner = Partner("HEAD~1", current_root=tmp_path, invocation_dir=tmp_path, test_args=[], timeout_s=1.0)
    process = subprocess.Popen(["sleep", "600"])
    try:
        partner._process, partner.freezing = process, True
        def running() -> bool:  # SIGCONT is sent, not waited for: the state follows within moments
            deadline = time.monotonic() + 5.0
            while freeze._state(process.pid) in ("T", "t") and time.monotonic() < deadline:
                time.sleep(0.001)
            return freeze._state(process.pid) not in ("T", "t")

        with partner.frozen():
            assert freeze._state(process.pid) in ("T", "t")  # ``freeze.stop`` waits until it is stopped
        assert running()
        partner.freeze()
        partner.release_held()  # a stopped process would never read the release
        assert running()
        partner.freezing = False
        with partner.frozen():  # freezing off (TFPERF_FREEZE=0, the duet design): it runs on
            assert running()
    finally:
        partner._process = None
        process.kill()
        process.wait()


def test_exit_while_held_ends_the_test_and_the_partner_session() -> None:

    channel = ScriptedChannel([{"op": "run", "nodeid": "t.py::good", "rounds": 1, "budget_s": 0.5,
                                "explain": True},
                               {"op": "round", "index": 0}, {"op": "exit"},
                               {"op": "run", "nodeid": "t.py::good", "rounds": 1, "budget_s": 0.5}])
    server = PartnerServer(channel)  # type: ignore[arg-type]
    runs = []

    def run_item(item: FakeItem) -> None:
        assert isinstance(server.request, Request) and server.request.explain
        runs.append(item.nodeid)
        server.pace("ready", -1)
        server.pace("before", 0)
        server.pace("after", 0)
        server.send_result([measurement()])
        server.hold(lambda message: {"profile": None, "reason": "unused"})

    server.serve([FakeItem("t.py::good")], run_item)  # type: ignore[arg-type]
    assert runs == ["t.py::good"] and len(channel.answers) == 1  # the later "run" is never read
    # Without explain the test does not wait after its result.
    plain = PartnerServer(ScriptedChannel([]))  # type: ignore[arg-type]
    plain.request = Request("t.py::good", 1, 0.5)
    plain.hold(lambda message: {})


def test_a_partner_told_to_stop_mid_run_raises_in_its_test() -> None:
    server = PartnerServer(ScriptedChannel([{"op": "abort"}]))  # type: ignore[arg-type]
    with pytest.raises(PartnerError, match="stopped by the coordinator"):
        server.pace("before", 4)


def test_partner_descriptors_must_be_two_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_FDS, "nonsense")
    with pytest.raises(PartnerError, match="READ,WRITE"):
        PartnerServer.from_environment()


def test_the_partner_imports_its_own_tree_first(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    env = partner_environment(tmp_path, {"PYTHONPATH": "/elsewhere", "HOME": "/root", "GITHUB_STEP_SUMMARY": "s.md"}, "5,6")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), str(tmp_path / "src"), "/elsewhere"]
    assert env[ENV_FDS] == "5,6" and env["HOME"] == "/root" and "GITHUB_STEP_SUMMARY" not in env


def test_the_partner_runs_where_this_session_runs_inside_its_tree(tmp_path: Path) -> None:
    current, tree = tmp_path / "current", tmp_path / "tree"
    (current / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks").mkdir(parents=True)
    assert mapped_directory(current / "benchmarks", current, tree) == tree / "benchmarks"
    assert mapped_directory(current, current, tree) == tree
    assert mapped_directory(tmp_path / "elsewhere", current, tree) == tree


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def test_against_a_directory_a_revision_or_neither(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "work.py").write_text("N = 1\n")
    git(repo, "add", "work.py")
    git(repo, "commit", "-qm", "base")
    (repo / "work.py").write_text("N = 2\n")
    git(repo, "commit", "-qam", "change")

    assert resolve_against(str(tmp_path), repo)[0] == tmp_path.resolve()
    with pytest.raises(PartnerError, match="neither a directory nor a revision"):
        resolve_against("no-such-branch", repo)
    with pytest.raises(PartnerError, match="not inside a git repository"):
        resolve_against("HEAD~1", tmp_path)

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    tree = checkout("HEAD~1", repo, scratch)
    assert (tree.path / "work.py").read_text() == "N = 1\n"
    assert "baseline-tree" in git(repo, "worktree", "list")
    tree.remove()
    assert not tree.path.exists() and "baseline-tree" not in git(repo, "worktree", "list")


def test_a_checkout_of_this_plugin_still_runs_this_plugin(tmp_path: Path) -> None:
    import pytest_tfperf

    (tmp_path / "pytest_tfperf").mkdir()
    env = partner_environment(tmp_path, {}, "5,6")
    first = env["PYTHONPATH"].split(os.pathsep)[0]
    assert Path(first) == Path(pytest_tfperf.__file__).resolve().parent.parent  # the folder holding the package


def test_paths_given_to_this_session_point_into_the_partner_tree(tmp_path: Path) -> None:
    from pytest_tfperf.session.git_tree import argument_in_tree

    current, tree = tmp_path / "current", tmp_path / "tree"
    (current / "tests").mkdir(parents=True)
    assert argument_in_tree("tests/test_a.py::test_x[1]", current, tree) == "tests/test_a.py::test_x[1]"
    assert argument_in_tree(f"{current}/tests/test_a.py::test_x", current, tree) == f"{tree}/tests/test_a.py::test_x"
    assert argument_in_tree(f"{current}/tests", current, tree) == f"{tree}/tests"
    assert argument_in_tree("/elsewhere/test_b.py", current, tree) == "/elsewhere/test_b.py"


def test_the_partner_is_let_run_only_for_its_own_rounds() -> None:
    """Stopped while this session is timed (freeze), let run (thaw) just before each of its rounds."""
    channel = ScriptedChannel([{"op": "done", "index": i} for i in range(2)]
                              + [{"op": "result", "measurement": measurement_to_dict(measurement())}])
    partner = FakePartner()
    partner.freezing = True
    run = PairedRun(partner, channel, "t.py::test_a")  # type: ignore[arg-type]
    run.pace("after", 0)
    assert partner.calls == ["thaw", "freeze"]
    run.pace("before", 1)
    assert partner.calls == ["thaw", "freeze", "thaw", "freeze"]
    run.finish(True)
    assert partner.calls[-1] == "thaw"  # running again to send its result


class AnsweringPartner(FakePartner):
    """Reads the answer to "run" as Partner does: ready, or why not."""

    freezing = True

    def answer_to_run(self, channel: Any, test_id: str) -> str | None:
        answer = channel.receive(1.0)
        if answer["op"] == "ready":
            self.freeze()
            return None
        return f"there is no test {test_id}"


def test_a_partner_asked_without_waiting_is_read_at_this_sides_ready_and_stopped_till_its_round() -> None:
    channel = ScriptedChannel([{"op": "ready"}, {"op": "done", "index": 0}])
    partner = AnsweringPartner()
    run = PairedRun(partner, channel, "t.py::test_a", answered=False)  # type: ignore[arg-type]
    assert partner.calls == []  # it sets up and warms up while this side does
    run.pace("ready", -1)
    assert partner.calls == ["freeze"] and run.dropped is None
    run.pace("after", 0)
    assert partner.calls == ["freeze", "thaw", "freeze"]


def test_a_partner_that_cannot_measure_the_test_drops_the_pairing_without_raising_into_the_measurement() -> None:
    run = PairedRun(AnsweringPartner(), ScriptedChannel([{"op": "missing"}]), "t.py::test_a",  # type: ignore[arg-type]
                    answered=False)
    run.pace("ready", -1)  # inside this side's measurement: must not raise
    run.pace("after", 0)  # no round is asked of it
    assert run.never_started and run.dropped == "there is no test t.py::test_a"
    with pytest.raises(PartnerError, match="there is no test"):
        run.finish(True)


def test_the_first_look_ends_both_sides_rounds_when_the_change_is_clear() -> None:
    from pytest_tfperf.gates.paired import FIRST_LOOK_ROUNDS
    from pytest_tfperf.gates.verdict import Tolerances

    n = FIRST_LOOK_ROUNDS
    channel = ScriptedChannel([{"op": "done", "index": i, "per_s": 100.0 + 0.1 * (i % 3)} for i in range(n)])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    ours: list[float] = []
    run.look(ours, Tolerances())
    ended = None
    for r in range(n):  # as the runner calls it, logging this side's rounds
        run.pace("before", r)
        ours.append(100.0 + 0.1 * ((r + 1) % 3))
        ended = run.pace("after", r)
        if r < n - 1:
            assert not ended
    assert ended is True and run.stopped_at == n
    assert channel.sent[-1] == {"op": "stop"}  # the partner ends its rounds too


def test_without_a_look_the_rounds_run_to_the_end() -> None:
    from pytest_tfperf.gates.paired import FIRST_LOOK_ROUNDS

    n = FIRST_LOOK_ROUNDS
    channel = ScriptedChannel([{"op": "done", "index": i, "per_s": 100.0} for i in range(n)])
    run = PairedRun(FakePartner(), channel, "t.py::test_a")  # type: ignore[arg-type]
    assert not any(run.pace("before", r) or run.pace("after", r) for r in range(n))
    assert {"op": "stop"} not in channel.sent


# A stand-in for the partner's python: it says hello only once the file GO exists (a partner still importing
# TensorFlow and collecting), then leaves at the first message it reads ("exit").
SLOW_HELLO = """#!{python}
import json, os, sys, time
r, w = (int(fd) for fd in os.environ["TFPERF_PARTNER_FDS"].split(","))
while not os.path.exists({go!r}):
    time.sleep(0.01)
os.write(w, (json.dumps({{"op": "hello", "protocol": {protocol}, "pid": os.getpid()}}) + "\\n").encode())
os.read(r, 65536)
"""


def slow_partner(tmp_path: Path) -> tuple[Partner, Path]:
    (tmp_path / "base").mkdir()
    go = tmp_path / "go"
    python = tmp_path / "python"
    python.write_text(SLOW_HELLO.format(python=sys.executable, go=str(go), protocol=PROTOCOL))
    python.chmod(0o755)
    partner = Partner(str(tmp_path / "base"), current_root=tmp_path, invocation_dir=tmp_path, test_args=[],
                      timeout_s=30.0, python=str(python))
    partner.freezing = False
    return partner, go


def test_a_partner_started_ahead_is_not_waited_for_until_its_first_use(tmp_path: Path) -> None:
    partner, go = slow_partner(tmp_path)
    partner.prestart()  # returns while the process has not said hello: waiting here would take 30 s and fail
    process = partner._process
    assert process is not None and process.poll() is None and partner._broken is None
    assert not partner._greeted
    go.touch()
    assert partner._start() is partner._channel and partner._greeted  # its hello read at the first use
    partner.prestart()  # a partner already up is left as it is
    assert partner._process is process
    partner.close()
    assert process.returncode == 0  # told to exit, and it did


def test_a_partner_started_ahead_and_never_used_is_stopped_without_waiting_for_it(tmp_path: Path) -> None:
    partner, _ = slow_partner(tmp_path)  # GO never appears: the process would never say hello
    partner.prestart()
    process = partner._process
    assert process is not None
    partner.close()
    assert process.returncode is not None and process.returncode < 0  # killed, not waited on for 30 s


def test_a_partner_that_cannot_start_ahead_says_why_at_its_first_use(tmp_path: Path) -> None:
    partner = Partner(str(tmp_path / "missing"), current_root=tmp_path, invocation_dir=tmp_path, test_args=[],
                      timeout_s=5.0)
    partner.prestart()  # nothing raised into the session's start
    with pytest.raises(PartnerError, match="missing"):
        partner.begin("t.py::test_a", 2, 0.1)
