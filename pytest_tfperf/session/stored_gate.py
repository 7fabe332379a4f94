"""The stored-baseline gate of one session: the baseline looked up, judged, and a regression confirmed.

A regression against a stored baseline fails a test only once a fresh pytest
process of this same tree measured it again and showed it too
(``gates.stored.judge`` with ``confirmation``): one process can run slow for
as long as it lives. The rule itself is ``gates``'; this module finds what it
needs (the baseline, the recorded runs, the machine's typical spread) and runs
the confirming process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tfperf.config import SessionConfig
from pytest_tfperf.measuring.workload import RunSettings
from pytest_tfperf.model import BudgetViolation, Environment, Measurement
from pytest_tfperf.session.outcome import Outcome, fail_test

if TYPE_CHECKING:  # annotations only: the session loads these lazily, when a test is judged
    from pytest_tfperf.gates.stored_rule import MachineFloor
    from pytest_tfperf.gates.verdict import Tolerances
    from pytest_tfperf.against.partner import Partner
    from pytest_tfperf.storage.baseline_store import BaselineStore
    from pytest_tfperf.storage.runs import RunSummary


class StoredGate:
    """Judges outcomes against the baselines in ``baseline_dir``; reads history and spreads once per session."""

    def __init__(self, config: SessionConfig, rootdir: str, baseline_dir: str, store: Callable[[], BaselineStore],
                 environment: Callable[[], Environment], invocation: Callable[[], tuple[str, list[str]]]) -> None:
        self.config = config
        self.rootdir = rootdir
        self.baseline_dir = baseline_dir
        self._store = store  # the session's BaselineStore, opened on first use
        self._environment = environment
        self._invocation = invocation  # where pytest ran, and its path arguments: the fresh process runs the same
        self._confirmer: Partner | None = None  # in this very tree: fresh processes that confirm a regression
        self._recorded: dict[tuple[str, str], list[RunSummary]] | None = None  # history's recorded runs, read once
        self._machine: dict[str, MachineFloor] = {}  # fingerprint -> this machine's floor, read once
        self._machine_notes: dict[str, str] = {}  # fingerprint -> why its calibration baseline was not used
        # What the stored gate could not see, for the Markdown summary and the results JSON as for the terminal:
        # one line each (a baseline recorded only for other environments, an unreadable calibration baseline).
        self.notes: list[str] = []
        self.no_baseline_for_environment: list[str] = []

    def close(self) -> None:
        if self._confirmer is not None:
            self._confirmer.close()
        self._confirmer = None

    # -- the verdict --------------------------------------------------------------------------------

    def judge(self, outcome: Outcome, tolerances: Tolerances) -> None:
        """Set ``outcome``'s verdict against its stored baseline, or say why there is none."""
        from pytest_tfperf.gates.stored import judge
        from pytest_tfperf.storage.baseline_store import MatchStatus
        from pytest_tfperf.gates.baseline_runs import BaselineRuns
        from pytest_tfperf.storage.fields import StorageError

        test_id = outcome.measurement.test_id
        try:
            match = self._store().load(test_id, self._environment())
        except StorageError as exc:
            fail_test(f"{test_id}: its baseline file cannot be used, so nothing was compared.\n{exc}")
        outcome.gating = not self.config.update
        if not match.found:
            if match.status is MatchStatus.OTHER_ENVIRONMENTS:
                outcome.baseline = "no baseline for this environment"
                outcome.notices.append(f"{test_id}: {match.describe()}")
                self.notes.append(f"{test_id}: {match.describe()}")
                self.no_baseline_for_environment.append(test_id)
            else:
                outcome.baseline = "no baseline"
            if self.config.strict and not self.config.update:
                outcome.violations += (
                    BudgetViolation(metric=f"baseline required by --tfperf-strict: {match.describe()}", limit=1,
                                    measured=0, unit="present"),
                )
            return
        baseline = match.baseline
        assert baseline is not None  # found
        if match.soft_differences:
            outcome.notices.append(f"{test_id}: {match.describe()}")
        try:
            history = self.recorded_runs().get((test_id, match.fingerprint), [])
        except StorageError as exc:
            fail_test(f"{test_id}: the run history cannot be used, so nothing was compared.\n{exc}")
        runs = BaselineRuns(runs=baseline.runs, history=tuple(history),
                            machine=self.machine_floor(match.fingerprint))
        unread = self._machine_notes.pop(match.fingerprint, "")
        if unread:  # said once, beside the first verdict it changed
            outcome.notices.append(unread)
            self.notes.append(unread)
        n = len(runs.runs)
        outcome.baseline = f"stored baseline ({n} run{'s' if n != 1 else ''})"
        outcome.stored = (baseline.measurement, runs)
        outcome.stored_profile = baseline.profile
        outcome.verdict = judge(outcome.measurement, baseline.measurement, tolerances, runs=runs)
        outcome.throughput_fails = self.config.throughput_gate == "fail"
        if outcome.warned_only and outcome.gating:
            throughput = outcome.verdict.metric("throughput")
            assert throughput is not None  # warned_only: throughput is the metric that regressed
            outcome.notices.append(f"{test_id}: warning: {throughput.message}")
        if str(outcome.verdict.status) == "improved":
            notice = outcome.verdict.improvement_message(
                "pytest --tfperf --tfperf-update --tfperf-update-improved")
            if notice:
                outcome.notices.append(notice)

    def machine_floor(self, fingerprint: str) -> MachineFloor:
        """This machine's floor on every test's spread (``gates.baseline_runs.machine_floor_of``), read once."""
        if fingerprint not in self._machine:
            from pytest_tfperf.gates.baseline_runs import machine_floor_of

            store = self._store()
            floor = machine_floor_of(store.baselines_for(self._environment()))
            self._machine[fingerprint] = floor
            unread = _unreadable_calibration(store, self._environment())
            if unread:
                self._machine_notes[fingerprint] = (
                    f"{unread}; this run's stored verdicts assume {_floor_words(floor)} instead of its runs. "
                    "The file was kept as it is: restore it from version control, or delete it and refresh with "
                    "`pytest --tfperf --tfperf-update`")
        return self._machine[fingerprint]

    def recorded_runs(self) -> dict[tuple[str, str], list[RunSummary]]:
        """Runs recorded with --tfperf-record, per (test id, fingerprint), read once per session."""
        if self._recorded is None:
            from pytest_tfperf.storage.history_csv import HISTORY_FILE_NAME, read_history_rows, recorded_runs

            path = Path(self.baseline_dir) / HISTORY_FILE_NAME
            self._recorded = recorded_runs(read_history_rows(path)) if path.exists() else {}
        return self._recorded

    # -- the confirmation: the same test in a fresh process of this tree ------------------------------

    def wants_confirmation(self, o: Outcome) -> bool:
        if o.verdict is None or not getattr(o.verdict, "needs_confirmation", False) or o.stored is None:
            return False
        if not o.gating:
            return False
        # A throughput-only regression under --tfperf-throughput-gate=warn fails nothing: no need to confirm it.
        return not o.warned_only

    def confirm(self, node_id: str, outcomes: list[Outcome], settings: RunSettings, tolerances: Tolerances) -> None:
        """Measure the test in a fresh pytest process and judge both runs: a regression must show in both.

        A ``tfperf.compare()`` test is measured whole there (every variant, interleaved as here), and
        each variant that asked for it is judged against its own run of that process. When that process
        cannot measure it (it fails to start, breaks, or does not run the test), the regression is
        reported as unconfirmed, with the reason, and fails nothing: one process can be slow for its
        whole life, which is exactly what the confirmation exists to rule out.
        """
        from pytest_tfperf.gates.stored import judge
        from pytest_tfperf.against.partner_tree import PartnerError

        try:
            fresh = {m.test_id: m for m in self._measure_in_fresh_process(node_id, settings)}
        except PartnerError as exc:
            for outcome in outcomes:
                _unconfirmed(outcome, f"the fresh process could not measure it: {exc}")
            return
        for outcome in outcomes:
            test_id = outcome.measurement.test_id
            theirs = fresh.get(test_id)
            if theirs is None:
                _unconfirmed(outcome, f"the fresh process did not measure it (it measured "
                                      f"{', '.join(sorted(fresh)) or 'nothing'})")
                continue
            assert outcome.stored is not None  # wants_confirmation
            baseline, runs = outcome.stored
            outcome.verdict = judge(outcome.measurement, baseline, tolerances, runs=runs, confirmation=theirs)
            held = "confirmed" if str(outcome.verdict.status) == "regressed" else "not confirmed"
            outcome.notices.append(f"{test_id}: a regression in this process was measured again in a fresh "
                                   f"process: {held}")

    def _measure_in_fresh_process(self, node_id: str, settings: RunSettings) -> list[Measurement]:
        from pytest_tfperf.against.partner import Partner

        if self._confirmer is None:
            invocation_dir, args = self._invocation()
            root = Path(self.rootdir)
            self._confirmer = Partner(str(root), current_root=root, invocation_dir=Path(invocation_dir),
                                      test_args=args, timeout_s=self.config.stall_ceiling_s + 60.0)
        else:
            self._confirmer.restart()  # each confirmation in a process of its own
        run = self._confirmer.begin(node_id, settings.rounds, settings.budget_s, variants=True)
        run.measure_alone(settings.rounds)
        return run.finish_all(True)


def _unreadable_calibration(store: BaselineStore, environment: Environment) -> str:
    """The calibration baseline's file and why it cannot be read, in one line; "" when it can (or is absent).

    ``BaselineStore.baselines_for`` skips unreadable files (a test's own fails that test when it is
    gated); the calibration belongs to no test, so without this its floor would vanish unsaid.
    """
    from pytest_tfperf.storage.fields import StorageError
    from pytest_tfperf.storage.runs import CALIBRATION_ID

    path = store.path_for(CALIBRATION_ID)
    if not path.exists():
        return ""
    try:
        store.load(CALIBRATION_ID, environment)
    except StorageError as exc:
        reason = " ".join(str(exc).split())
        return f"{path}: the calibration baseline cannot be read ({reason})"
    return ""


def _floor_words(floor: MachineFloor) -> str:
    if floor.source == "suite":
        return f"the spread this suite's tests typically have ({floor.sd:.1%} in logs)"
    if floor.source == "assumed":
        return f"an assumed spread of {floor.sd:.0%} in logs (what a shared CPU runner's processes typically show)"
    return "no floor"


def _unconfirmed(outcome: Outcome, reason: str) -> None:
    # Every stored-gate regression needs the second process, new traces where the baseline had none too
    # (``gates.stored.needs_confirmation``): without it the regression is reported, not failed.
    assert outcome.verdict is not None  # a regression to confirm
    outcome.verdict = outcome.verdict.unconfirmed(reason)
    outcome.notices.append(
        f"{outcome.measurement.test_id}: unconfirmed, not failed: {outcome.verdict.summary()} in this process, "
        f"and a regression fails a test only once a fresh process shows it too, but {reason}; run the test "
        "again to decide")
