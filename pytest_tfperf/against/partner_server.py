"""The partner's side of ``--tfperf-against``: the session started in the baseline tree, measuring on command.

``against.partner`` starts it and drives it (the coordinator); this module is
what both speak (``Channel``, ``PROTOCOL``) and what the partner runs
(``PartnerServer``): it serves ``run`` requests test by test, takes its timed
rounds when told (``round i`` / ``done i``, stopping the coordinator while it
is timed: ``against.freeze``), ends them early on ``stop``, sends its
``result``, and under explanations holds the workload for ``profile``
requests until ``release``.
"""

from __future__ import annotations

import json
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_tfperf.config import PARTNER_ENV as ENV_FDS
from pytest_tfperf.model import Measurement
from pytest_tfperf.against import freeze
from pytest_tfperf.against.partner_tree import PartnerError

if TYPE_CHECKING:
    import pytest

PROTOCOL = 3  # bumped when the messages change: both sessions must speak the same one
# The longest a profiled pass keeps the coordinator stopped when its request names no deadline (an older coordinator).
PROFILE_FREEZE_MAX_S = 120.0


class Channel:
    """One JSON object per line, both ways, with a timeout on every read."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._buffer = b""

    def send(self, **message: Any) -> None:
        data = (json.dumps(message) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._write_fd, data):]
        except OSError as exc:  # EPIPE: the other side is gone
            raise PartnerError(f"the other session is gone ({exc.strerror})") from None

    def receive(self, timeout_s: float | None) -> dict[str, Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._read_fd], [], [], remaining)
            if not ready:
                raise PartnerError(f"no answer within {timeout_s:.0f} s")
            chunk = os.read(self._read_fd, 65536)
            if not chunk:
                raise PartnerError("the other session ended")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            raise PartnerError(f"unreadable message {line[:80]!r}") from None
        if not isinstance(message, dict) or "op" not in message:
            raise PartnerError(f"unreadable message {line[:80]!r}")
        return message

    def close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass
class Request:
    """What the coordinator asked this partner session to measure now."""

    test_id: str
    rounds: int
    budget_s: float
    variants: bool = False  # every tfperf.compare() variant may be measured (a confirmation), not just one
    explain: bool = False  # after the result, hold the workload for "profile" requests until "release"
    freeze: int = 0  # the coordinator's pid: stopped while this session times a round (``against.freeze``)
    answered: bool = False  # a "ready", "result" or "failed" went back
    failure: str = ""


class PartnerServer:
    """Runs in the partner session: serves ``run`` requests test by test, rounds on command."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.request: Request | None = None
        self._exit = False  # "exit" came while a test was held
        self._frozen = False  # the coordinator is stopped by this session
        self.rounds_log: list[float] = []  # this side's throughput per round (the runner's ``rounds_log``)

    @classmethod
    def from_environment(cls) -> PartnerServer:
        raw = os.environ.get(ENV_FDS, "")
        read_fd, _, write_fd = raw.partition(",")
        try:
            return cls(Channel(int(read_fd), int(write_fd)))
        except ValueError:
            raise PartnerError(f"{ENV_FDS}={raw!r}: expected two pipe descriptors, 'READ,WRITE'") from None

    def serve(self, items: Sequence[pytest.Item], run_item: Callable[[pytest.Item], None]) -> None:
        by_id = {item.nodeid: item for item in items}
        self.channel.send(op="hello", protocol=PROTOCOL, pid=os.getpid())
        while not self._exit:
            try:
                message = self.channel.receive(None)
            except PartnerError:
                return  # the coordinator is gone: nothing left to do
            op = message.get("op")
            if op == "exit":
                return
            if op != "run":
                continue  # a stray "abort" after a request ended
            test_id = str(message.get("nodeid"))
            item = by_id.get(test_id)
            if item is None:
                self.channel.send(op="missing")
                continue
            self.request = Request(test_id, int(message.get("rounds", 20)), float(message.get("budget_s", 2.0)),
                                   variants=bool(message.get("variants", False)),
                                   explain=bool(message.get("explain", False)),
                                   freeze=int(message.get("freeze", 0) or 0))
            try:
                run_item(item)
            finally:
                self._thaw_coordinator()  # a round that raised must not leave the coordinator stopped
                request, self.request = self.request, None
            if request is not None and not request.answered:
                self.channel.send(op="failed", text=request.failure or "the test ended without measuring")

    # Called by the partner session's measuring code.

    def pace(self, event: str, index: int) -> bool | None:
        if event == "ready":
            self._answer(op="ready")
        elif event == "before":
            message = self.channel.receive(None)
            if message.get("op") == "stop":
                return True  # the coordinator's first look: the change is clear, the rounds end here
            if message.get("op") != "round" or message.get("index") != index:
                raise PartnerError(f"stopped by the coordinator ({message.get('op')})")
            if self.request is not None and self.request.freeze:
                self._frozen = freeze.stop(self.request.freeze)
        elif event == "after":
            self._thaw_coordinator()
            self.channel.send(op="done", index=index, per_s=self.rounds_log[-1] if self.rounds_log else None)
        return None

    def _thaw_coordinator(self) -> None:
        if self._frozen and self.request is not None:
            freeze.cont(self.request.freeze)
        self._frozen = False

    def send_result(self, measurements: Sequence[Measurement]) -> None:
        from pytest_tfperf.storage.serialization import measurement_to_dict

        encoded = [measurement_to_dict(m) for m in measurements]
        self._answer(op="result", measurement=encoded[0], measurements=encoded)

    def hold(self, profile: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """After the result, under ``explain``: answer ``profile`` requests (``profile(message)`` gives the
        answer's fields) until ``release`` or ``exit``; the test ends then. Nothing here raises into the test:
        a coordinator that is gone releases it."""
        if self.request is None or not self.request.explain:
            return
        while True:
            try:
                message = self.channel.receive(None)
            except PartnerError:
                return
            op = message.get("op")
            if op == "exit":
                self._exit = True
                return
            if op != "profile":
                return  # "release" (or anything else: nothing is asked of this test any more)
            # The coordinator stopped while this side's pass runs, as for a round: its threads (a tf.data
            # pipeline refilling its buffers) must not work on the cores this pass is timing. A pass stuck in
            # TensorFlow's C++ must not keep it stopped: it runs again at its own deadline for the answer (a
            # thread of this process's), and then stops this one (``PairedRun.profile``).
            timer = None
            if self.request.freeze:
                self._frozen = freeze.stop(self.request.freeze)
                timer = threading.Timer(float(message.get("timeout_s") or PROFILE_FREEZE_MAX_S), freeze.cont,
                                        (self.request.freeze,))
                timer.daemon = True
                timer.start()
            try:
                answer = profile(message)
            except Exception as exc:  # noqa: BLE001 - the coordinator must get an answer, whatever happened
                answer = {"profile": None, "reason": f"the partner's profiled pass raised {type(exc).__name__}: "
                                                     f"{str(exc).strip()[:200]}"}
            finally:
                if timer is not None:
                    timer.cancel()
                self._thaw_coordinator()
            try:
                self.channel.send(op="profiled", **answer)
            except PartnerError:
                return

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Registered as a pytest plugin: keep the first failure's last line for the coordinator."""
        if report.failed and self.request is not None and not self.request.failure:
            crash = getattr(report.longrepr, "reprcrash", None)
            lines = str(report.longreprtext).strip().splitlines()
            text = crash.message if crash is not None else (lines[-1] if lines else "failed")
            self.request.failure = f"{report.when}: {text}"

    def _answer(self, **message: Any) -> None:
        self.channel.send(**message)
        if self.request is not None and message.get("op") in ("result", "failed"):
            self.request.answered = True
