"""One pytest session's measurements: probes, budgets, the baseline gate, and what is written at the end.

No measuring code lives here (that is ``runner``) and no hook (that is
``plugin``); this module connects the two and keeps the session's results.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_tfperf import runner
from pytest_tfperf.config import MarkerOptions, SessionConfig
from pytest_tfperf.model import BudgetViolation, Environment, Measurement
from pytest_tfperf.runs import CALIBRATION_ID

if TYPE_CHECKING:
    from pytest_tfperf.fixture import TfPerf


@dataclass
class Outcome:
    """What happened to one measured test (or variant)."""

    measurement: Measurement
    violations: tuple[BudgetViolation, ...] = ()
    verdict: Any = None  # compare.Verdict, when a baseline was compared
    baseline: str = ""  # "", "no baseline", "no baseline for this environment"
    gating: bool = True  # False while baselines are being refreshed: a slower number is accepted then
    throughput_fails: bool = True  # False: a stored-baseline throughput regression is a warning (see config)
    paired_with: str | None = None  # the reference variant of a paired verdict (or --tfperf-against's version)
    partner: bool = False  # paired with the same test in a partner session (--tfperf-against)
    item_id: str = ""  # the pytest node id this outcome belongs to
    stored: Any = None  # (baseline Measurement, runs.BaselineRuns) behind a stored verdict, to judge a confirmation
    variant: str = ""  # the tfperf.compare variant name, "" for a single workload
    notices: list[str] = field(default_factory=list)
    reference: Measurement | None = None  # the partner's measurement (--tfperf-against), for the reports

    @property
    def label(self) -> str:
        if self.violations:
            return "OVER BUDGET"
        if self.verdict is not None:
            status = str(self.verdict.status)
            if status == "regressed":
                label = ("slower (warning)" if self.warned_only else "REGRESSED") if self.gating else "slower (accepted)"
            elif status == "unconfirmed":
                label = "unconfirmed"  # a regression in this process only: reported, not failed (see _confirm)
            else:
                label = {"unchanged": "ok"}.get(status, status)
            return label if self.paired_with is None else f"{label} vs {self.paired_with}"
        return self.baseline or "measured"

    @property
    def regressed_metrics(self) -> list[str]:
        """Metrics whose regression counts: none while the verdict is unconfirmed (one process's word)."""
        if self.verdict is None or str(self.verdict.status) == "unconfirmed":
            return []
        return [m.metric for m in self.verdict.metrics if str(m.status) == "regressed"]

    @property
    def warned_only(self) -> bool:
        """Only throughput regressed, against a stored baseline, under --tfperf-throughput-gate=warn."""
        return self.regressed_metrics == ["throughput"] and not self.throughput_fails and self.paired_with is None

    @property
    def failed(self) -> bool:
        regressed = bool(self.regressed_metrics) and not self.warned_only
        return bool(self.violations) or (regressed and self.gating)


class TfPerfSession:
    def __init__(self, config: SessionConfig, rootdir: str) -> None:
        self.config = config
        self.rootdir = rootdir
        self.outcomes: list[Outcome] = []
        self.failures: list[Any] = []  # diagnostics.MeasurementFailure: stalls, OOMs, NaNs
        self._environment: Environment | None = None
        self._probes: dict[bool, list[Any]] = {}
        self._store: Any = None
        self._written: list[str] = []  # what finish() wrote, for the summary
        self.partner_server: Any = None  # partner.PartnerServer when this session is another's partner
        self.invocation: tuple[str, list[str]] = (rootdir, [])  # where pytest ran, and its path arguments
        self._partner: Any = None  # partner.Partner under --tfperf-against, started on first use
        self._confirmer: Any = None  # partner.Partner in this very tree: fresh processes that confirm a regression
        self._recorded: dict[tuple[str, str], list[Any]] | None = None  # history's recorded runs, read once
        self._machine: dict[str, Any] = {}  # fingerprint -> stored_rule.MachineFloor, read once
        self.calibration: Measurement | None = None  # this process's run of the calibration workload (refreshes)
        self.invocation_args: tuple[str, ...] = ()  # the command line, for the extra processes of a refresh
        self.effects: list[dict[str, Any]] = []  # catalog comparisons (TfPerf.record_effect), for the reports

    # -- environment and probes (built once, lazily) ------------------------

    def environment(self) -> Environment:
        if self._environment is None:
            from pytest_tfperf.environment import collect_environment

            self._environment = collect_environment()
        return self._environment

    def probes(self) -> list[Any]:
        tf_loaded = "tensorflow" in sys.modules
        if tf_loaded not in self._probes:
            from pytest_tfperf.memory_probes import default_probes

            self._probes[tf_loaded] = default_probes(tensorflow_loaded=tf_loaded)
        return self._probes[tf_loaded]

    def close(self) -> None:
        for partner in (self._partner, self._confirmer):
            if partner is not None:
                partner.close()
        self._partner = self._confirmer = None
        for probes in self._probes.values():
            for probe in probes:
                probe.close()
        self._probes.clear()

    @property
    def baseline_dir(self) -> str:
        path = self.config.baseline_dir
        return path if os.path.isabs(path) else os.path.join(self.rootdir, path)

    def store(self) -> Any:
        if self._store is None:
            from pytest_tfperf.baseline_store import BaselineStore

            self._store = BaselineStore(self.baseline_dir)
        return self._store

    # -- measuring ------------------------------------------------------------

    def measure_and_judge(self, fx: TfPerf, workloads: dict[str, runner.Workload], mode: str,
                          settings: runner.RunSettings, reference: str | None = None) -> dict[str, Measurement]:
        options: MarkerOptions = fx._options
        if self.partner_server is not None and self.partner_server.request is not None:
            return self._measure_for_partner(fx, workloads, mode, settings)

        def measure_once(pace: Callable[[str, int], None] | None = None) -> dict[str, Measurement]:
            raws = runner.measure(workloads, settings, probes=self.probes(), sync=_device_sync(),
                                  watch=settings.stall.enabled, pace=pace)
            return {name: self._build(fx._variant_id(name), mode, raw) for name, raw in raws.items()}

        ours, theirs, against_note = None, None, None
        if self.config.against and reference is None and len(workloads) == 1 and options.gate:
            settings = _paired_settings(settings)
            ours, theirs, against_note = self._measure_beside_partner(
                fx._node_id, settings, measure_once, fallback="judged as without --tfperf-against")
        measured = ours if ours is not None else measure_once()
        against = theirs is not None
        if theirs is not None:
            name = next(iter(measured))
            outcomes = {name: self._judge_against(fx._node_id, measured, name, theirs, options, settings,
                                                  measure_once)}
        elif reference is not None:
            outcomes = {name: self._evaluate_paired(m, measured[reference], reference, options)
                        if name != reference else self._evaluate(m, options) for name, m in measured.items()}
        else:
            outcomes = {name: self._evaluate(m, options) for name, m in measured.items()}
        if against_note is not None:
            for o in outcomes.values():
                o.notices.append(against_note)
        to_confirm = [o for o in outcomes.values() if self._wants_confirmation(o)]
        if to_confirm:
            self._confirm(fx, to_confirm, settings, options)
        if (not against and reference is None and self.config.remeasure
                and any(_borderline(o) for o in outcomes.values())):
            # Borderline evidence: measure again (all variants, so pairs stay
            # interleaved) and judge the pooled samples, rather than flip a coin.
            from pytest_tfperf.compare import pool

            again = measure_once()
            for name in measured:
                measured[name] = pool(measured[name], again[name])
                outcomes[name] = self._evaluate(measured[name], options)
                outcomes[name].notices.append(
                    f"{measured[name].test_id}: re-measured once because the first verdict was borderline; "
                    "judged on both measurements pooled")
        fx.results.update(measured)
        for name, o in outcomes.items():
            o.item_id, o.variant = fx._node_id, name
            self.outcomes.append(o)
        failures = [self._failure_text(o) for o in outcomes.values() if o.failed]
        if failures:
            _fail("\n\n".join(failures))
        return measured

    # -- --tfperf-against: the same test of the other version, in a partner session --------

    def partner(self) -> Any:
        if self._partner is None:
            from pathlib import Path

            from pytest_tfperf.partner import Partner, repository_root

            invocation_dir, args = self.invocation
            root = repository_root(Path(invocation_dir)) or Path(self.rootdir)
            assert self.config.against is not None
            self._partner = Partner(self.config.against, current_root=root, invocation_dir=Path(invocation_dir),
                                    test_args=args, timeout_s=self.config.stall_ceiling_s + 60.0)
        return self._partner

    def _judge_against(self, test_id: str, measured: dict[str, Measurement], name: str, theirs: Measurement,
                       options: MarkerOptions, settings: runner.RunSettings,
                       measure_once: Callable[[Callable[[str, int], None] | None], dict[str, Measurement]]) -> Outcome:
        """The paired verdict against the partner's figures, confirmed before it fails a test.

        A borderline verdict, or a throughput regression, is measured once more
        beside a fresh partner process and the pooled rounds decide: two
        processes can differ by a few percent for as long as they live, and a
        failure must not rest on one such pair.
        """
        outcome = self._evaluate_against(measured[name], theirs, options)
        throughput = outcome.verdict.metric("throughput")
        regressed = throughput is not None and str(throughput.status) == "regressed"
        if not (self.config.remeasure and (regressed or _borderline(outcome))):
            return outcome
        from pytest_tfperf.compare import pool

        why = "the first verdict was a throughput regression" if regressed else "the first verdict was borderline"
        self.partner().restart()
        ours, theirs_again, note = self._measure_beside_partner(test_id, settings, measure_once,
                                                                fallback="the first measurement decided")
        if ours is None or theirs_again is None:
            outcome.notices.append(f"{note} (a re-measure because {why})")
            return outcome
        measured[name] = pool(measured[name], ours[name])
        outcome = self._evaluate_against(measured[name], pool(theirs, theirs_again), options)
        outcome.notices.append(
            f"{test_id}: re-measured beside a fresh partner process in {self.config.against} because {why}; "
            f"judged on both measurements pooled ({len(measured[name].timings.round_sizes)} rounds a side)")
        return outcome

    def _measure_beside_partner(
        self, test_id: str, settings: runner.RunSettings,
        measure_once: Callable[[Callable[[str, int], None] | None], dict[str, Measurement]], *, fallback: str,
    ) -> tuple[dict[str, Measurement] | None, Measurement | None, str | None]:
        """Measure with the partner taking turns: (ours, theirs, None), or what could be had and why not.

        Ours is None when the partner could not even start the test (measure
        alone then); theirs is None when the partner's figures were lost.
        """
        from pytest_tfperf.partner import PartnerError

        against = self.config.against
        try:
            run = self.partner().begin(test_id, settings.rounds, settings.budget_s)
        except PartnerError as exc:
            return None, None, f"{test_id}: not measured beside {against}: {exc}; {fallback}"
        completed = False
        try:
            ours = measure_once(run.pace)
            completed = True
        finally:
            try:
                theirs, why = run.finish(completed), None
            except PartnerError as exc:
                theirs, why = None, str(exc)
        if theirs is None:
            return ours, None, f"{test_id}: measured beside {against} but its figures were lost ({why}); {fallback}"
        return ours, theirs, None

    # -- the stored gate's confirmation: the same test in a fresh process of this tree ---------------

    def _wants_confirmation(self, o: Outcome) -> bool:
        if o.verdict is None or not getattr(o.verdict, "needs_confirmation", False) or o.stored is None:
            return False
        if not (o.gating and self.config.remeasure):
            return False
        # A throughput-only regression under --tfperf-throughput-gate=warn fails nothing: no need to confirm it.
        return not o.warned_only

    def _confirm(self, fx: TfPerf, outcomes: list[Outcome], settings: runner.RunSettings,
                 options: MarkerOptions) -> None:
        """Measure the test in a fresh pytest process and judge both runs: a regression must show in both.

        A ``tfperf.compare()`` test is measured whole there (every variant, interleaved as here), and
        each variant that asked for it is judged against its own run of that process. When that process
        cannot measure it (it fails to start, breaks, or does not run the test), the regression is
        reported as unconfirmed, with the reason, and fails nothing: one process can be slow for its
        whole life, which is exactly what the confirmation exists to rule out.
        """
        from pytest_tfperf.compare import judge
        from pytest_tfperf.partner import PartnerError

        try:
            fresh = {m.test_id: m for m in self._measure_in_fresh_process(fx._node_id, settings)}
        except PartnerError as exc:
            for outcome in outcomes:
                self._unconfirmed(outcome, f"the fresh process could not measure it: {exc}")
            return
        for outcome in outcomes:
            test_id = outcome.measurement.test_id
            theirs = fresh.get(test_id)
            if theirs is None:
                self._unconfirmed(outcome, f"the fresh process did not measure it (it measured "
                                           f"{', '.join(sorted(fresh)) or 'nothing'})")
                continue
            baseline, runs = outcome.stored
            outcome.verdict = judge(outcome.measurement, baseline, self._tolerances(options), runs=runs,
                                    confirmation=theirs)
            held = "confirmed" if str(outcome.verdict.status) == "regressed" else "not confirmed"
            outcome.notices.append(f"{test_id}: a regression in this process was measured again in a fresh "
                                   f"process: {held}")

    @staticmethod
    def _unconfirmed(outcome: Outcome, reason: str) -> None:
        from pytest_tfperf.compare import needs_confirmation

        exact = [m.metric for m in outcome.verdict.metrics if str(m.status) == "regressed" and not needs_confirmation(m)]
        if exact:
            # A regression that needs no second process (new traces where the baseline had none) fails alone.
            outcome.notices.append(f"{outcome.measurement.test_id}: the rest of its regression could not be confirmed "
                                   f"({reason}), but {', '.join(exact)} needs no confirmation and fails the test")
            return
        outcome.verdict = outcome.verdict.unconfirmed(reason)
        outcome.notices.append(
            f"{outcome.measurement.test_id}: unconfirmed, not failed: {outcome.verdict.summary()} in this process, "
            f"and a regression fails a test only once a fresh process shows it too, but {reason}; run the test "
            "again to decide")

    def _measure_in_fresh_process(self, node_id: str, settings: runner.RunSettings) -> list[Measurement]:
        from pathlib import Path

        from pytest_tfperf.partner import Partner

        if self._confirmer is None:
            invocation_dir, args = self.invocation
            root = Path(self.rootdir)
            self._confirmer = Partner(str(root), current_root=root, invocation_dir=Path(invocation_dir),
                                      test_args=args, timeout_s=self.config.stall_ceiling_s + 60.0)
        else:
            self._confirmer.restart()  # each confirmation in a process of its own
        run = self._confirmer.begin(node_id, settings.rounds, settings.budget_s, variants=True)
        run.measure_alone(settings.rounds)
        return run.finish_all(True)

    def _measure_for_partner(self, fx: TfPerf, workloads: dict[str, runner.Workload], mode: str,
                             settings: runner.RunSettings) -> dict[str, Measurement]:
        """This session is a partner: measure in step with the coordinator, send the result, judge nothing."""
        from pytest_tfperf.partner import PartnerError

        server = self.partner_server
        request = server.request
        if len(workloads) != 1 and not request.variants:
            raise PartnerError(f"{fx._test_id} measures {len(workloads)} variants with tfperf.compare() in this "
                               "version; --tfperf-against pairs single workloads only")
        settings = dataclasses.replace(settings, rounds=request.rounds, min_rounds=request.rounds,
                                       budget_s=request.budget_s)
        raws = runner.measure(workloads, settings, probes=self.probes(), sync=_device_sync(),
                              watch=settings.stall.enabled, pace=server.pace)
        measured = {name: self._build(fx._variant_id(name), mode, raw) for name, raw in raws.items()}
        server.send_result(list(measured.values()))
        fx.results.update(measured)
        return measured

    def _build(self, test_id: str, mode: str, raw: runner.RawRun) -> Measurement:
        from pytest_tfperf import diagnostics

        extras, diagnoses = diagnostics.analyse(raw)
        return runner.build_measurement(
            test_id, mode, raw, traces_first_call=raw.traces_first_call, traces_steady=raw.traces_steady,
            extra_metrics=extras, diagnoses=diagnoses, environment_id=self.environment().fingerprint,
        )

    def _evaluate(self, m: Measurement, options: MarkerOptions) -> Outcome:
        from pytest_tfperf.budgets import budgets_from_marker, check_budgets, unchecked_budgets

        budgets = budgets_from_marker(options)
        outcome = Outcome(measurement=m, violations=check_budgets(m, budgets))
        # A budget with nothing to check it against (no GPU for a device budget, say) is said, not skipped silently.
        outcome.notices += [f"{m.test_id}: budget not checked: {why}" for why in unchecked_budgets(m, budgets)]
        if options.gate and self.config.gate:
            self._gate(outcome, options)
        return outcome

    def _evaluate_paired(self, m: Measurement, reference: Measurement, name: str,
                         options: MarkerOptions, *, partner: bool = False) -> Outcome:
        """Budgets, then the paired gate: this variant against the reference measured beside it.

        With ``partner``, the reference is the same test of the other version
        of the code (``name``, from --tfperf-against), measured in turns.
        """
        from pytest_tfperf.compare import judge_paired

        outcome = self._evaluate(m, dataclasses.replace(options, gate=False))
        outcome.verdict = judge_paired(m, reference, self._tolerances(options))
        outcome.baseline = f"measured beside {name}" if partner else f"paired with '{name}'"
        outcome.paired_with = name
        outcome.partner = partner
        # A variant's reference is in the results under its own id; the other version's figures are not.
        outcome.reference = reference if partner else None
        return outcome

    def _evaluate_against(self, m: Measurement, theirs: Measurement, options: MarkerOptions) -> Outcome:
        assert self.config.against is not None
        return self._evaluate_paired(m, theirs, self.config.against, options, partner=True)

    def _tolerances(self, options: MarkerOptions) -> Any:
        from pytest_tfperf.compare import Tolerances

        tolerance = options.tolerance if options.tolerance is not None else self.config.tolerance
        return Tolerances() if tolerance is None else Tolerances(throughput=tolerance)

    def _gate(self, outcome: Outcome, options: MarkerOptions) -> None:
        from pytest_tfperf.baseline_store import MatchStatus
        from pytest_tfperf.compare import judge
        from pytest_tfperf.runs import BaselineRuns
        from pytest_tfperf.serialization import StorageError

        test_id = outcome.measurement.test_id
        try:
            match = self.store().load(test_id, self.environment())
        except StorageError as exc:
            _fail(f"{test_id}: its baseline file cannot be used, so nothing was compared.\n{exc}")
        outcome.gating = not self.config.update
        if not match.found:
            if match.status is MatchStatus.OTHER_ENVIRONMENTS:
                outcome.baseline = "no baseline for this environment"
                outcome.notices.append(f"{test_id}: {match.describe()}")
            else:
                outcome.baseline = "no baseline"
            if self.config.strict and not self.config.update:
                outcome.violations += (
                    BudgetViolation(metric=f"baseline required by --tfperf-strict: {match.describe()}", limit=1,
                                    measured=0, unit="present"),
                )
            return
        if match.soft_differences:
            outcome.notices.append(f"{test_id}: {match.describe()}")
        try:
            history = self.recorded_runs().get((test_id, match.fingerprint), [])
        except StorageError as exc:
            _fail(f"{test_id}: the run history cannot be used, so nothing was compared.\n{exc}")
        runs = BaselineRuns(runs=match.baseline.runs, history=tuple(history), machine=self.machine_floor(match.fingerprint))
        n = len(runs.runs)
        outcome.baseline = f"stored baseline ({n} run{'s' if n != 1 else ''})"
        outcome.stored = (match.measurement, runs)
        outcome.verdict = judge(outcome.measurement, match.measurement, self._tolerances(options), runs=runs)
        outcome.throughput_fails = self.config.throughput_gate == "fail"
        if outcome.warned_only and outcome.gating:
            throughput = outcome.verdict.metric("throughput")
            outcome.notices.append(f"{test_id}: warning: {throughput.message}")
        if str(outcome.verdict.status) == "improved":
            notice = outcome.verdict.improvement_message(
                "pytest --tfperf --tfperf-update --tfperf-update-improved")
            if notice:
                outcome.notices.append(notice)

    def machine_floor(self, fingerprint: str) -> Any:
        """This machine's floor on every test's spread (``BaselineStore.machine_floor``), read once."""
        if fingerprint not in self._machine:
            self._machine[fingerprint] = self.store().machine_floor(self.environment())
        return self._machine[fingerprint]

    def recorded_runs(self) -> dict[tuple[str, str], list[Any]]:
        """Runs recorded with --tfperf-record, per (test id, fingerprint), read once per session."""
        if self._recorded is None:
            from pathlib import Path

            from pytest_tfperf.history import HISTORY_FILE_NAME, read_history_rows, recorded_runs

            path = Path(self.baseline_dir) / HISTORY_FILE_NAME
            self._recorded = recorded_runs(read_history_rows(path)) if path.exists() else {}
        return self._recorded

    def _failure_text(self, o: Outcome) -> str:
        parts = []
        if o.violations:
            parts.append(f"{o.measurement.test_id}: over budget")
            parts += [f"  {v.message()}" for v in o.violations]
        if o.verdict is not None and o.verdict.status == "regressed":
            parts.append(o.verdict.failure_message(self.environment().fingerprint, self.refresh_hint(o),
                                                   paired_with=o.paired_with, partner=o.partner))
        for d in o.measurement.diagnoses:
            if d.severity != "info":
                parts.append(f"  diagnosis: {d.summary}")
        return "\n".join(parts)

    def refresh_hint(self, o: Outcome) -> str:
        return f"pytest --tfperf --tfperf-update {_shell_quote(o.measurement.test_id.split('[')[0])}"

    # -- reporting ------------------------------------------------------------

    def report_properties(self, test_id: str) -> list[tuple[str, object]]:
        """Figures for JUnit XML (``record_property``), for the outcomes of one test and its variants."""
        props: list[tuple[str, object]] = []
        for o in self.outcomes:
            if o.item_id == test_id:
                prefix = f"{o.variant}:" if o.variant else ""
                props += [(prefix + key, value) for key, value in _outcome_properties(o)]
        return props

    def _rows(self) -> list[Any]:
        from pytest_tfperf import report

        return [report.Row(o.measurement, o.label, report.format_limit(_detection_limit(o))) for o in self.outcomes]

    def summary_lines(self) -> list[str]:
        from pytest_tfperf import report
        from pytest_tfperf.diagnostics import failure_summary_lines

        if not self.outcomes and not self.failures and not self._written and not self.effects:
            return []
        lines = report.summary_table(self._rows()) if self.outcomes else []
        for o in self.outcomes:
            lines += o.notices
            for d in o.measurement.diagnoses:
                if d.severity != "info" or d.kind == "input_bound":
                    lines.append(f"{o.measurement.test_id}: {d.summary}")
        if any(o.warned_only and o.gating for o in self.outcomes):
            lines.append("throughput warnings are not failures under --tfperf-throughput-gate=warn; drop the option "
                         "(or set it to fail) to fail them")
        lines += self._limit_lines()
        missing = [o for o in self.outcomes if o.baseline == "no baseline"]
        if missing and not self.config.update:
            lines.append(f"{len(missing)} test(s) have no baseline yet: they were measured and reported, not gated. "
                         f"Record baselines with: pytest --tfperf --tfperf-update")
        lines += failure_summary_lines(self.failures)
        lines += self._written
        return lines

    def _limit_lines(self) -> list[str]:
        """What the stored throughput verdicts can catch here, said once for the whole session."""
        from pytest_tfperf.verdict import slowdown_text

        stored = [o for o in self.outcomes if o.paired_with is None and o.stored is not None and o.gating]
        limits = [lim for lim in (_detection_limit(o) for o in stored) if lim is not None]
        if not limits:
            return []
        tolerance = self.config.tolerance if self.config.tolerance is not None else 0.10
        finite = sorted(lim for lim in limits if lim < 1.0)
        lines = []
        if finite:
            lines.append(f"stored baselines: against their runs, slowdowns of {slowdown_text(finite[0])} to "
                         f"{slowdown_text(finite[-1])} (median {slowdown_text(finite[len(finite) // 2])}) are caught "
                         "on this machine")
        unknown = len(limits) - len(finite)
        if unknown:
            lines.append(f"{unknown} stored baseline(s) have too few runs to judge throughput: refresh them with "
                         "pytest --tfperf --tfperf-update (it measures each test in several processes)")
        if finite and finite[-1] > tolerance:
            lines.append(f"where that is wider than the {tolerance:.0%} tolerance, this machine's speed moves too "
                         "much between processes for a stored number: for finer changes measure the other version "
                         "beside this one, --tfperf-against=origin/main")
        return lines

    def finish(self) -> bool:
        """Write what the options asked for: JSON results, baselines, history, Markdown.

        Returns False when something could not be written; the reason is in the summary.
        """
        from pytest_tfperf.serialization import StorageError

        ok = True
        try:
            if not self.outcomes and not self.failures:
                return True
            if self.config.calibrate:
                self._measure_calibration()
            steps = []
            if self.config.json_path:
                steps.append(self._write_json)
            if self.config.update:
                steps.append(self._update_baselines)
            if self.config.record:
                steps.append(self._record_history)
            if self.config.markdown_path or os.environ.get("GITHUB_STEP_SUMMARY"):
                steps.append(self._write_markdown)
            if self.config.html_path:
                steps.append(self._write_html)  # last: it draws the history that the update appended
            for step in steps:
                try:
                    step()
                except (StorageError, OSError) as exc:
                    ok = False
                    self._written.append(f"ERROR: {exc}")
        finally:
            self.close()
        return ok

    def _measure_calibration(self) -> None:
        """Measure the calibration workload once in this refresh process, after its tests, where TensorFlow
        is loaded already (a suite that never imported it gets no calibration: its floor is the suite's)."""
        if "tensorflow" not in sys.modules or not any(o.measurement.timings.iterations > 1 for o in self.outcomes):
            return
        from pytest_tfperf import calibration

        settings = runner.RunSettings(budget_s=self.config.budget_s, rounds=self.config.rounds)
        raw = runner.measure({"": calibration.workload()}, settings, probes=self.probes(), sync=_device_sync(),
                             watch=settings.stall.enabled)[""]
        self.calibration = self._build(calibration.CALIBRATION_ID, "call", raw)

    def _write_json(self) -> None:
        from pytest_tfperf.results_json import write_results

        write_results(self.config.json_path, self.environment(), self.outcomes,
                      {f.test_id: f.verdict_dict() for f in self.failures}, effects=self.effects,
                      calibration=self.calibration)
        self._written.append(f"results written to {self.config.json_path}")

    def _update_baselines(self) -> None:
        from pathlib import Path

        from pytest_tfperf.history import append_history, current_git_commit
        from pytest_tfperf.refresh import run_extra_processes

        measurements = [o.measurement for o in self.outcomes if o.measurement.timings.iterations > 1]
        if not measurements:
            return
        improved = {o.measurement.test_id for o in self.outcomes
                    if o.verdict is not None and str(o.verdict.status) == "improved"}
        extra = None
        if self.config.runs > 1:
            # The same command again in fresh processes, one after the other: the baseline learns how far
            # this machine's figures move between processes, which one process's rounds cannot show.
            invocation_dir, positional = self.invocation
            # Absolute node ids: the extra processes run exactly the tests this one measured.
            node_ids = sorted({_absolute_node_id(o.item_id, self.rootdir) for o in self.outcomes
                               if o.item_id and o.measurement.timings.iterations > 1})
            extra = run_extra_processes(self.config.runs - 1, self.invocation_args, Path(invocation_dir),
                                        timeout_s=None, positional=positional, node_ids=node_ids)
            self._written += [f"refresh run {f}" for f in extra.failures]
        commit = current_git_commit(self.rootdir)
        calibrated = [] if self.calibration is None else [self.calibration]
        saved = self.store().save(
            measurements + calibrated, self.environment(), only_improved=self.config.update_improved_only,
            is_improvement=lambda new, old: new.test_id in improved or new.test_id == CALIBRATION_ID,
            extra_runs=None if extra is None else extra.measurements, git_commit=commit,
        )
        append_history(self.baseline_dir, measurements, self.environment(), git_commit=commit)
        tests = {t: m for t, m in (extra.measurements if extra is not None else {}).items() if t != CALIBRATION_ID}
        for others in _by_process(tests):
            append_history(self.baseline_dir, others, self.environment(), git_commit=commit)
        written = [(t, fp) for t, fp in saved.written if t != CALIBRATION_ID]
        kept = len(saved.not_improved)
        runs = ""
        if extra is not None:
            counts = [1 + len(extra.measurements.get(t, [])) for t, _ in written]
            fewest = min(counts) if counts else self.config.runs
            runs = (f", {self.config.runs} runs each in separate processes ({extra.processes} extra pytest "
                    f"session(s), {extra.seconds:.0f} s)" if fewest == self.config.runs
                    else f", {fewest} to {max(counts)} runs each (of {self.config.runs} asked for)")
        self._written.append(
            f"baselines written for {len(written)} test(s) in {self.baseline_dir}{runs}"
            + (f"; {kept} kept because they did not improve" if kept else "")
            + "; every other test's baseline was kept"
            + (f"; the machine's calibration workload measured in {1 + len(extra.measurements.get(CALIBRATION_ID, []))}"
               " process(es)" if calibrated and extra is not None else "")
        )

    def _record_history(self) -> None:
        from pytest_tfperf.history import append_history
        from pytest_tfperf.runs import RECORD

        measurements = [o.measurement for o in self.outcomes if o.measurement.timings.iterations > 1]
        if not measurements:
            return
        path = append_history(self.baseline_dir, measurements, self.environment(), kind=RECORD)
        self._written.append(f"this run recorded in {path} for {len(measurements)} test(s); baselines unchanged")
    def _write_html(self) -> None:
        from pytest_tfperf.report_cli import write_report
        from pytest_tfperf.results_json import results_to_dict

        assert self.config.html_path is not None
        document = results_to_dict(self.environment(), self.outcomes,
                                   {f.test_id: f.verdict_dict() for f in self.failures}, effects=self.effects)
        write_report(document, self.baseline_dir, self.config.html_path)
        self._written.append(f"HTML report written to {self.config.html_path}")

    def _write_markdown(self) -> None:
        from pytest_tfperf import report

        text = "\n".join(report.markdown_summary(self._rows(), [o.verdict for o in self.outcomes])) + "\n"
        if self.config.markdown_path:
            from pathlib import Path

            Path(self.config.markdown_path).parent.mkdir(parents=True, exist_ok=True)  # as for the JSON and HTML
            with open(self.config.markdown_path, "w", encoding="utf-8") as fh:
                fh.write(text)
            self._written.append(f"Markdown summary written to {self.config.markdown_path}")
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            with open(step_summary, "a", encoding="utf-8") as fh:
                fh.write(text)

    def record_failure(self, exc: BaseException, test_id: str, *, batch_size: int | None = None,
                       items_per_iteration: float | None = None) -> str | None:
        """Explain a stall, OOM or NaN, keep it for the summary and the JSON, and return the failure text."""
        from pytest_tfperf import diagnostics

        failure = diagnostics.diagnose_failure(exc, test_id, batch_size=batch_size,
                                               items_per_iteration=items_per_iteration)
        if failure is None:
            return None
        self.failures.append(failure)
        return failure.message


def _absolute_node_id(node_id: str, rootdir: str) -> str:
    path, separator, rest = node_id.partition("::")
    return (path if os.path.isabs(path) else os.path.join(rootdir, path)) + separator + rest


def _by_process(runs: dict[str, list[Measurement]]) -> list[list[Measurement]]:
    """Measurements of a refresh's extra processes, regrouped process by process (the i-th run of each test)."""
    deepest = max((len(v) for v in runs.values()), default=0)
    return [[v[i] for v in runs.values() if len(v) > i] for i in range(deepest)]


def _paired_settings(settings: runner.RunSettings) -> runner.RunSettings:
    """Rounds for a paired verdict: 7 pairs at least reach 99%; 20 short ones catch a 10% slowdown."""
    from pytest_tfperf.fixture import PAIRED_ROUNDS

    rounds = max(settings.rounds, PAIRED_ROUNDS)
    return dataclasses.replace(settings, rounds=rounds, min_rounds=rounds)


def _borderline(o: Outcome) -> bool:
    return o.verdict is not None and bool(getattr(o.verdict, "needs_remeasure", False))


def _device_sync() -> Callable[[], None] | None:
    """Wait for queued device work, so an iteration ends when its outputs exist.

    GPU kernels run asynchronously; without this the clock would stop when the
    work was queued. On the CPU eager ops are synchronous and nothing is needed.
    Not run on a real GPU here: written against tf.test.experimental.sync_devices.
    """
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    try:
        if not tf.config.list_logical_devices("GPU"):
            return None
    except Exception:  # noqa: BLE001 - device listing can fail before TF is initialised
        return None
    return tf.test.experimental.sync_devices  # type: ignore[no-any-return]


def _fail(message: str) -> None:
    import pytest

    pytest.fail(message, pytrace=False)


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _detection_limit(o: Outcome) -> float | None:
    """The throughput detection limit of an outcome's verdict (None: no throughput comparison)."""
    if o.verdict is None:
        return None
    throughput = o.verdict.metric("throughput")
    if throughput is None or str(throughput.status) == "unavailable":
        return None
    limit = throughput.minimum_detectable_change
    return None if limit is None else float(limit)


def _outcome_properties(o: Outcome) -> list[tuple[str, object]]:
    m = o.measurement
    props: list[tuple[str, object]] = [
        ("tfperf_throughput_per_s", round(m.throughput_per_s, 3)),
        ("tfperf_first_call_s", round(m.first_call_s, 6)),
        ("tfperf_median_s", m.median_s),
        ("tfperf_verdict", o.label),
    ]
    if o.verdict is not None and str(o.verdict.status) == "unconfirmed":
        props.append(("tfperf_unconfirmed_reason", o.verdict.unconfirmed_reason))
    limit = _detection_limit(o)
    if limit is not None:
        props.append(("tfperf_detection_limit", "none" if limit >= 1.0 else round(limit, 4)))
    for peak in m.memory:
        if peak.peak_bytes is not None:
            props.append((f"tfperf_{peak.metric_name}_bytes", peak.peak_bytes))
    if m.traces_steady is not None:
        props.append(("tfperf_traces_steady", m.traces_steady))
    for name, value in m.extra_metrics:
        props.append((f"tfperf_{name}", value))
    from pytest_tfperf.report import gpu_properties

    return props + gpu_properties(m)  # which NVML figure, what the test added, GPU busy
