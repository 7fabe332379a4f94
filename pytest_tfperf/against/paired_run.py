"""One test measured beside the partner (``against.partner``): its rounds paced, its result and profiles fetched.

``Partner.begin`` makes one; the protocol it speaks is the partner module's (``run``, ``round i``/``done i``,
``stop``, ``result``, then ``profile``/``release`` while the partner holds the test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pytest_tfperf.model import Measurement
from pytest_tfperf.against.partner_server import Channel
from pytest_tfperf.against.partner_tree import PartnerError

if TYPE_CHECKING:
    from pytest_tfperf.gates.verdict import Tolerances


class Partner(Protocol):
    """What a run needs of ``against.partner.Partner`` (which makes it: that module imports this one)."""

    timeout_s: float
    freezing: bool
    duet_cpu: int | None
    held: PairedRun | None

    def freeze(self) -> None: ...
    def thaw(self) -> None: ...
    def abandon(self, why: str) -> None: ...
    def answer_to_run(self, channel: Channel, test_id: str) -> str | None: ...


class PairedRun:
    """One test measured beside its partner: ``pace`` drives the partner's rounds, ``finish`` fetches its figures."""

    def __init__(self, partner: Partner, channel: Channel, test_id: str, *, explain: bool = False,
                 answered: bool = True) -> None:
        self._partner = partner
        self._channel = channel
        self._test_id = test_id
        self._explain = explain
        self.dropped: str | None = None  # why the pairing ended early, if it did
        self.never_started = False  # the partner could not measure the test at all (missing, failed, silent)
        self._ready: bool | None = True if answered else None  # the answer to "run": not read yet, ready, or not
        self._ours_per_s: list[float] = []
        self._theirs_per_s: list[float] = []  # the partner's throughput per round, from its "done" answers
        self._tolerances: Tolerances | None = None  # set by ``look``: the first look may end the rounds
        self.stopped_at: int | None = None  # rounds each side measured when the first look ended them
        self._rounds_done = 0

    @property
    def test_id(self) -> str:
        return self._test_id

    def pace(self, event: str, index: int) -> bool | None:
        """The runner's hook: the partner's round ``i`` runs after ours when ``i`` is even, before it when odd
        (in the duet design, at the same time as ours, on its own core);
        at ``ready`` (this side warmed up), the partner's answer to ``run`` is read if it has not been. True:
        the rounds end here, on both sides (the first look found the change clear)."""
        if event == "ready":
            self.await_ready()
        elif self._partner.duet_cpu is not None:
            if event == "before":
                self.start_round(index)
            else:
                self.end_round(index)
        elif (event == "after" and index % 2 == 0) or (event == "before" and index % 2 == 1):
            self.partner_round(index)
        if event == "after" and self._clear_after(index + 1):
            self._stop_rounds()
            return True
        return None

    def look(self, ours_per_s: list[float], tolerances: Tolerances) -> None:
        """Let the rounds end at the first look when the change is already clear (``gates.paired.clearly_within``):
        ``ours_per_s`` is this side's throughput per round as the runner logs it."""
        self._ours_per_s, self._tolerances = ours_per_s, tolerances

    def _clear_after(self, rounds: int) -> bool:
        from pytest_tfperf.gates.paired import FIRST_LOOK_ROUNDS, clearly_within

        if rounds != FIRST_LOOK_ROUNDS or self._tolerances is None or self.dropped is not None:
            return False
        ours, theirs = self._ours_per_s[:rounds], self._theirs_per_s[:rounds]
        return len(ours) == len(theirs) == rounds and clearly_within(ours, theirs, self._tolerances)

    def _stop_rounds(self) -> None:
        self._partner.thaw()
        try:
            self._channel.send(op="stop")
        except PartnerError as exc:
            self.dropped = f"the partner stopped answering at the first look ({exc})"
            return
        self.stopped_at = len(self._theirs_per_s)

    def await_ready(self) -> str | None:
        """Wait for the partner to be ready (once): None, or why it cannot measure (the pairing is then dropped,
        ``never_started``). Never raises: this runs inside this session's measurement."""
        if self._ready is None:
            try:
                why = self._partner.answer_to_run(self._channel, self._test_id)
            except PartnerError as exc:
                why = str(exc)
            self._ready = why is None
            if why is not None:
                self.dropped, self.never_started = why, True
            return why
        return None if self._ready else self.dropped

    def measure_alone(self, rounds: int) -> None:
        """Let the partner measure all its rounds while this session waits (a confirmation in a fresh process)."""
        for index in range(rounds):
            self.partner_round(index)

    def partner_round(self, index: int) -> None:
        self.start_round(index)
        self.end_round(index)

    def start_round(self, index: int) -> None:
        """Tell the partner to measure its round ``index`` (``end_round`` waits for it)."""
        if self._ready is None:
            self.await_ready()
        if self.dropped is not None:
            return
        self._partner.thaw()
        try:
            self._channel.send(op="round", index=index)
        except PartnerError as exc:
            self.dropped = f"the partner stopped answering in round {index + 1} ({exc})"

    def end_round(self, index: int) -> None:
        if self.dropped is not None:
            return
        try:
            answer = self._channel.receive(self._partner.timeout_s)
        except PartnerError as exc:
            self.dropped = f"the partner stopped answering in round {index + 1} ({exc})"
            return
        if self._partner.freezing:
            self._partner.freeze()
        if answer.get("op") != "done" or answer.get("index") != index:
            text = answer.get("text", answer)
            self.dropped = f"the partner's measurement failed in round {index + 1}: {text}"
            return
        per_s = answer.get("per_s")
        if isinstance(per_s, (int, float)):
            self._theirs_per_s.append(float(per_s))
        self._rounds_done += 1

    def finish(self, completed: bool) -> Measurement:
        """The partner's measurement; ``completed`` False (ours failed) stops the partner's test instead."""
        return self.finish_all(completed)[0]

    def finish_all(self, completed: bool) -> list[Measurement]:
        """Every measurement the partner sent: one, or each variant of a ``tfperf.compare()`` test."""
        from pytest_tfperf.storage.fields import Field, StorageError
        from pytest_tfperf.storage.serialization import measurement_from_dict

        self._partner.thaw()
        if not completed and self.dropped is None:
            self.dropped = "this session's measurement did not complete"
            try:
                self._channel.send(op="abort")
                self._drain()
            except PartnerError:
                pass
        if self.dropped is not None:
            raise PartnerError(self.dropped)
        try:
            answer = self._channel.receive(self._partner.timeout_s)
        except PartnerError as exc:
            raise PartnerError(f"the partner sent no result ({exc})") from None
        if answer.get("op") != "result":
            raise PartnerError(f"the partner sent no result: {answer.get('text', answer)}")
        if self._explain:
            self._partner.held = self  # its test now waits for "profile" or "release"
        where = Field(f"the partner's result for {self._test_id}", "", "a pytest-tfperf bug: please report it")
        # "measurements" carries every variant; a partner of an earlier version sends only "measurement".
        raw = answer.get("measurements") or [answer.get("measurement")]
        try:
            return [measurement_from_dict(item, where) for item in raw]
        except StorageError as exc:
            raise PartnerError(str(exc)) from None

    def profile(self, *, rootdir: str, test_id: str, side: str, iterations: int, timeout_s: float,
                variant: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
        """The partner's profiled pass of its side, into ``<rootdir>/.tfperf/profiles/<test>/<side>/``:
        (its compact profile as a dict, None) or (None, why there is none). Never raises and never waits
        longer than ``timeout_s``: a partner that has not answered by then is stopped (``Partner.abandon``)."""
        if self._partner.held is not self:
            return None, "the partner no longer holds this test's workload"
        self._partner.thaw()  # a stopped process would never answer
        try:
            self._channel.send(op="profile", rootdir=rootdir, test_id=test_id, side=side, iterations=iterations,
                               variant=variant, timeout_s=timeout_s)
            answer = self._channel.receive(timeout_s)
        except PartnerError as exc:
            why = f"the partner's profiled pass gave no answer ({exc}); that partner process was stopped"
            self._partner.abandon(why)
            return None, why
        if answer.get("op") != "profiled":
            why = f"the partner answered {str(answer.get('text', answer))[:200]} to a profile request"
            self._partner.abandon(why)
            return None, why
        profile = answer.get("profile")
        if isinstance(profile, dict):
            return profile, None
        return None, str(answer.get("reason") or "the partner sent no profile")

    def release(self) -> None:
        if self._partner.held is self:
            self._partner.held = None
        try:
            self._channel.send(op="release")
        except PartnerError:
            pass  # gone already: nothing is held

    def _drain(self) -> None:
        while True:
            answer = self._channel.receive(self._partner.timeout_s)
            if answer.get("op") in ("failed", "result"):
                return
