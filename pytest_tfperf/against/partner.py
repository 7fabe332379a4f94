"""Measure the baseline code beside the current code: ``pytest --tfperf --tfperf-against=REV``.

A shared CI machine's speed moves by far more than 10% from one process to
the next and from one minute to the next (``benchmarks/results/validation.md``),
so a number measured today cannot be judged against one stored last week.
What does work is measuring both versions *at the same time*, rounds
interleaved: a slow spell of the machine then hits both alike and cancels in
the per-round ratio. Two versions of a user's package cannot live in one
Python process, so the baseline runs in a second pytest session, the
*partner*, started in a checkout of the baseline revision (a ``git worktree``
made for the run, or a directory). This session drives it test by test:

1. ``run``: the partner runs the same test id up to its ``tfperf`` call,
   warms up and calibrates, and answers ``ready`` (or ``missing`` when its
   tree has no such test, ``failed`` when the test broke before measuring).
   It starts, sets up and warms up while this session does (``prestart``,
   ``begin(wait=False)``): nothing is timed before both are ready.
2. The two sessions then take turns, one timed round each, in ABBA order
   (``round i`` / ``done i``, with the round's throughput): only one of them
   runs at a time, the other stopped (``against.freeze``), so they never
   compete for the 2 cores, and each pair of rounds is a few hundred
   milliseconds apart. ``stop`` ends the rounds of both at the first look.
3. ``result``: the partner sends its measurement; this session judges the two
   with ``gates.paired.judge_paired``.
4. The looks and the confirmation by two fresh pairs of processes are
   ``against.plan``'s; the partner's own side is ``against.partner_server``.
5. Under ``--tfperf-explain`` the ``run`` request says ``explain``: after its
   ``result`` the partner keeps the test's workload and waits. ``profile`` asks
   it for a profiled pass of its side into a folder this session names (the
   answer, ``profiled``, holds the compact profile or why there is none);
   ``release`` lets its test end. Each side profiles its own code in its own
   process, one after the other, and a partner that does not answer in time is
   stopped (the next test starts a fresh one), never waited on.

The wire format is one JSON object per line over two pipes whose descriptors
the partner finds in ``TFPERF_PARTNER_FDS``. Any failure of the partner (a
crash, a timeout, a test that is missing or fails on the baseline side) drops
the pairing for that test only, with a notice saying why; the test is then
judged as without ``--tfperf-against``.

Two live processes taking turns on unchanged code differed by -2.1% to +4.5%
(``benchmarks/process_noise.py``, 10 pairs), inside the 5% decision
threshold, where processes measured minutes apart differed by 1.35x.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pytest_tfperf.against import freeze
from pytest_tfperf.against.paired_run import PairedRun
from pytest_tfperf.against.partner_server import PROTOCOL, Channel
from pytest_tfperf.session.git_tree import argument_in_tree, mapped_directory, pytest_command
from pytest_tfperf.against.partner_tree import BaselineTree, PartnerError, checkout, import_failure, partner_environment

LOG_TAIL_LINES = 30


def duet() -> bool:
    """Whether ``TFPERF_DUET=1`` asks for the duet design (both versions at once on split cores; Linux only)."""
    return os.environ.get("TFPERF_DUET") == "1" and hasattr(os, "sched_setaffinity")


# -- this session's side: the coordinator ---------------------------------------------------


class Partner:
    """The partner session, started on first use and stopped by ``close``."""

    def __init__(self, against: str, *, current_root: Path, invocation_dir: Path, test_args: Sequence[str],
                 timeout_s: float, python: str = sys.executable, duet_role: int = 1) -> None:
        self.against = against
        self._current_root = current_root
        self._invocation_dir = invocation_dir
        self._test_args = list(test_args)
        self.timeout_s = timeout_s  # longest wait for any answer of the partner
        self._python = python
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._greeted = False  # its hello read: the process is up and has collected the tests
        self._scratch: Path | None = None
        self._tree: BaselineTree | None = None
        self._broken: str | None = None  # why the partner cannot be used at all any more
        self.held: PairedRun | None = None  # a run whose partner test waits for "profile" or "release"
        # TFPERF_DUET=1 (Linux, for benchmarks/paired_duet.py): the duet design instead of turns. Both sides run
        # each round at once, each on a core of its own (this process's role: 0 for a tree of the code under
        # test, 1 for the baseline's), and nothing is stopped.
        self.duet_cpu = duet_role if duet() else None
        self.freezing = (freeze.supported() and os.environ.get("TFPERF_FREEZE", "1") != "0"
                         and self.duet_cpu is None)
        self._frozen = False
        self._guard: subprocess.Popen[bytes] | None = None

    def freeze(self) -> None:
        """Stop the partner process while this one is timed (``against.freeze``)."""
        if self._process is not None and not self._frozen:
            self._frozen = freeze.stop(self._process.pid)

    def thaw(self) -> None:
        if self._process is not None and self._frozen:
            freeze.cont(self._process.pid)
        self._frozen = False

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The partner process stopped for the duration, where freezing is on (``against.freeze``): another
        process's profiled pass runs meanwhile, and this one's tf.data threads would refill its buffers after
        its own pass or rounds on the cores being timed."""
        if self.freezing:
            self.freeze()
        try:
            yield
        finally:
            self.thaw()

    @property
    def log_path(self) -> Path | None:
        return None if self._scratch is None else self._scratch / "partner.log"

    def prestart(self) -> None:
        """Start the process now, its hello read at the first ``begin``: its import and collection (seconds)
        overlap this session's work. A failure to start is kept and said at that ``begin``."""
        try:
            self._start(greet=False)
        except PartnerError:
            pass

    def await_started(self) -> None:
        """Wait until the process has imported and collected its tests (its hello read); PartnerError if it
        cannot start."""
        self._start()

    def _start(self, *, greet: bool = True) -> Channel:
        if self._broken is not None:
            raise PartnerError(self._broken)
        if self._channel is not None and (self._greeted or not greet):
            return self._channel
        try:
            if self._channel is None:
                self._spawn()
            assert self._channel is not None
            if greet:
                hello = self._channel.receive(self.timeout_s)
                if hello.get("op") != "hello" or hello.get("protocol") != PROTOCOL:
                    raise PartnerError(f"it speaks another version of the partner protocol ({hello}; this one "
                                       f"speaks {PROTOCOL}): install the same pytest-tfperf for both trees")
                self._greeted = True
        except OSError as exc:  # no pipes, no process: as much a failure to start as a silent partner
            self._broken = f"the partner session in {self.against} could not start: {exc}"
            self.close(keep_reason=True)
            raise PartnerError(self._broken) from None
        except PartnerError as exc:
            why = self._import_failure() or f"{exc}{self._log_tail()}"
            self._broken = f"the partner session in {self.against} could not start: {why}"
            self.close(keep_reason=True)
            raise PartnerError(self._broken) from None
        return self._channel

    def _spawn(self) -> None:
        """The partner process started, its pipes open; its hello not read yet."""
        if self._tree is None:  # first start; a restart keeps the tree
            self._scratch = Path(tempfile.mkdtemp(prefix="tfperf-partner-"))
            self._tree = checkout(self.against, self._invocation_dir, self._scratch)
        assert self._scratch is not None
        cwd = mapped_directory(self._invocation_dir, self._current_root, self._tree.path)
        to_partner_r, to_partner_w = os.pipe()
        from_partner_r, from_partner_w = os.pipe()
        env = partner_environment(self._tree.path, dict(os.environ), f"{to_partner_r},{from_partner_w}")
        args = [argument_in_tree(a, self._current_root, self._tree.path) for a in self._test_args]
        # Results, baselines and JUnit XML are this session's to write; the partner only measures.
        command = pytest_command(self._python, "--tfperf", "-q",
                                 f"--junitxml={self._scratch / 'partner-junit.xml'}", *args)
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:  # a restarted partner adds to the same log
            self._process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, pass_fds=(to_partner_r, from_partner_w))
        os.close(to_partner_r)
        os.close(from_partner_w)
        if self.duet_cpu is not None:  # before TensorFlow starts a thread there, so that all of them stay
            os.sched_setaffinity(self._process.pid, {self.duet_cpu})
        if self.freezing:
            self._guard = freeze.guard(os.getpid(), self._process.pid)
        self._channel = Channel(from_partner_r, to_partner_w)  # not greeted yet: every stop resets that

    def begin(self, test_id: str, rounds: int, budget_s: float, *, variants: bool = False,
              explain: bool = False, wait: bool = True) -> PairedRun:
        """Ask the partner to get ``test_id`` ready to measure; raises PartnerError with the reason it can't.

        ``variants``: a ``tfperf.compare()`` test may measure all its variants (a confirmation, read with
        ``finish_all``); without it the partner refuses one, since a pairing needs a single workload.
        ``explain``: after its result the partner keeps the workload for a profiled pass (``PairedRun.profile``)
        until released (``release_held``; the next ``begin``, ``restart`` or ``close`` release it too).
        ``wait=False``: return at once and read its answer at the run's ``pace("ready")`` (or ``await_ready``),
        so that the partner sets up and warms up while this session does (nothing is timed then); a partner
        that cannot measure the test then drops the pairing (``PairedRun.dropped``) instead of raising.
        """
        self.release_held()
        channel = self._start()
        freeze = os.getpid() if self.freezing else 0
        try:
            channel.send(op="run", nodeid=test_id, rounds=rounds, budget_s=budget_s, variants=variants,
                         explain=explain, freeze=freeze)
        except PartnerError as exc:
            self._lost(exc)
        run = PairedRun(self, channel, test_id, explain=explain, answered=False)
        if wait:
            why = run.await_ready()
            if why is not None:
                raise PartnerError(why)
        return run

    def answer_to_run(self, channel: Channel, test_id: str) -> str | None:
        """Read the partner's answer to ``run``: None when ready (then stopped until its first round), else why
        not. A partner that does not answer is given up (``_lost``) and the PartnerError says so."""
        try:
            answer = channel.receive(self.timeout_s)
        except PartnerError as exc:
            self._lost(exc)
        op = answer.get("op")
        if op == "ready":
            if self.freezing:
                self.freeze()  # warmed up: it waits for its first round where it stands, doing nothing
            return None
        if op == "missing":
            return f"{self.against} has no test {test_id}"
        if op == "failed":
            return f"the test failed in {self.against} before measuring: {answer.get('text', '')}"
        self._lost(PartnerError(f"unexpected answer {answer}"))
        raise AssertionError("unreachable")  # pragma: no cover

    def _lost(self, exc: PartnerError) -> None:
        self._broken = f"the partner session in {self.against} stopped answering ({exc}){self._log_tail()}"
        self.close(keep_reason=True)
        raise PartnerError(self._broken) from None

    def _import_failure(self) -> str | None:
        """Its tests did not import in the baseline tree: one line (``import_failure``), not its traceback."""
        path = self.log_path
        if path is None or not path.exists():
            return None
        return import_failure(path.read_text(errors="replace"), None if self._tree is None else self._tree.path)

    def _log_tail(self) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return ""
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        return "; its output ended with:\n    " + "\n    ".join(lines) if lines else ""

    def release_held(self) -> None:
        """Let the partner's held test end (it waited for a ``profile`` request that did not come)."""
        run, self.held = self.held, None
        self.thaw()  # a stopped process would never read the release
        if run is not None:
            run.release()

    def abandon(self, why: str) -> None:
        """Stop a partner that did not answer in time, at once: a late answer must never be read as the next
        one. Not broken: the next test starts a fresh process in the same tree."""
        self.held = None
        self.thaw()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None
        self._greeted = False
        freeze.end_guard(self._guard)
        self._guard = None
        with open(self.log_path or os.devnull, "a") as log:
            log.write(f"\n[tfperf] partner stopped by the coordinator: {why}\n")

    def restart(self) -> None:
        """Stop the partner process; the next test starts a fresh one in the same tree.

        Two processes can differ by a few percent for as long as they live
        (thread placement, memory layout); a verdict confirmed beside a fresh
        partner process does not rest on one such pair.
        """
        if self._broken is None:
            self._stop_process()

    def _stop_process(self) -> None:
        self.held = None  # "exit" ends a held test too
        self.thaw()
        if self._channel is not None:
            try:
                self._channel.send(op="exit")
            except PartnerError:
                pass
            self._channel.close()
            self._channel = None
        if self._process is not None:
            if not self._greeted:  # started ahead (``prestart``) and never used: nothing of it to wait for
                self._process.kill()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        self._greeted = False
        freeze.end_guard(self._guard)
        self._guard = None

    def close(self, *, keep_reason: bool = False) -> None:
        self._stop_process()
        if self._tree is not None:
            self._tree.remove()
            self._tree = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if not keep_reason:
            self._broken = "closed"
