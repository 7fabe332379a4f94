"""One pytest session's measurements: probes, budgets, the gates, re-measuring borderline cases.

No measuring code lives here (that is ``measuring.runner``) and no hook (that
is ``plugin``); this module connects the two and keeps the session's results.
The stored gate's look-up and confirmation are ``stored_gate``'s, and what is
written at the end is ``outputs``'.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_tfperf.config import PARTNER_ENV, MarkerOptions, SessionConfig
from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.workload import RawRun, RunSettings, Workload, build_measurement
from pytest_tfperf.model import Environment, Measurement
from pytest_tfperf.session import outputs
from pytest_tfperf.session.outcome import Outcome, borderline, fail_test, outcome_properties
from pytest_tfperf.session.stored_gate import StoredGate

if TYPE_CHECKING:  # annotations only: each is loaded lazily where it is used (heavy, or the session's own on demand)
    from pytest_tfperf.diagnoses.failures import MeasurementFailure
    from pytest_tfperf.explain.explanation import Profiler
    from pytest_tfperf.gates.verdict import Tolerances
    from pytest_tfperf.probes.probe_base import MemoryProbe
    from pytest_tfperf.against.plan import Measure
    from pytest_tfperf.explain.orchestrate import MorePairs
    from pytest_tfperf.session.fixture import TfPerf
    from pytest_tfperf.against.partner import Partner
    from pytest_tfperf.against.partner_server import PartnerServer
    from pytest_tfperf.storage.baseline_store import BaselineStore


class TfPerfSession:
    def __init__(self, config: SessionConfig, rootdir: str) -> None:
        self.config = config
        self.rootdir = rootdir
        self.outcomes: list[Outcome] = []
        self.failures: list[MeasurementFailure] = []  # stalls, OOMs, NaNs
        self._environment: Environment | None = None
        self._probes: dict[bool, list[MemoryProbe]] = {}  # whether TensorFlow was loaded -> the probes
        self._store: BaselineStore | None = None
        self._written: list[str] = []  # what finish() wrote, for the summary
        self.partner_server: PartnerServer | None = None  # when this session is another's partner
        self.invocation: tuple[str, list[str]] = (rootdir, [])  # where pytest ran, and its path arguments
        self._partner: Partner | None = None  # under --tfperf-against, started on first use
        self._own_partner: Partner | None = None  # a fresh process of this tree, for confirming a paired regression
        self.stored_gate = StoredGate(config, rootdir, self.baseline_dir, self.store, self.environment,
                                      lambda: self.invocation)
        self.invocation_args: tuple[str, ...] = ()  # the command line, for the extra processes of a refresh
        self.effects: list[dict[str, Any]] = []  # catalog comparisons (TfPerf.record_effect), for the reports
        self.calibration: Measurement | None = None  # this process's run of the calibration workload (refreshes)
        self.profiler: Profiler | None = None  # --tfperf-explain's profiled pass (None: profile_step); tests fake it
        self.profiles: dict[str, dict[str, Any]] = {}  # test id -> compact profile, for the refreshed baselines
        self.input_profiler: Profiler | None = None  # the input-bound diagnosis' pass (profile_step); tests fake it

    # -- environment and probes (built once, lazily) ------------------------

    def environment(self) -> Environment:
        if self._environment is None:
            from pytest_tfperf.probes.environment import collect_environment

            self._environment = collect_environment()
        return self._environment

    def probes(self) -> list[MemoryProbe]:
        tf_loaded = "tensorflow" in sys.modules
        if tf_loaded not in self._probes:
            from pytest_tfperf.probes.memory_probes import default_probes

            self._probes[tf_loaded] = default_probes(tensorflow_loaded=tf_loaded)
        return self._probes[tf_loaded]

    def close(self) -> None:
        if self._partner is not None:
            self._partner.close()
        self._partner = None
        if self._own_partner is not None:
            self._own_partner.close()
        self._own_partner = None
        self.stored_gate.close()
        for probes in self._probes.values():
            for probe in probes:
                probe.close()
        self._probes.clear()

    @property
    def baseline_dir(self) -> str:
        path = self.config.baseline_dir
        return path if os.path.isabs(path) else os.path.join(self.rootdir, path)

    def store(self) -> BaselineStore:
        if self._store is None:
            from pathlib import Path

            from pytest_tfperf.storage.baseline_store import BaselineStore

            self._store = BaselineStore(Path(self.baseline_dir))
        return self._store

    # -- measuring ------------------------------------------------------------

    def measure_and_judge(self, fx: TfPerf, workloads: dict[str, Workload], mode: str,
                          settings: RunSettings, reference: str | None = None) -> dict[str, Measurement]:
        options: MarkerOptions = fx._options
        if self.partner_server is not None and self.partner_server.request is not None:
            return self._measure_for_partner(fx, workloads, mode, settings)

        def measure_once(pace: Callable[[str, int], bool | None] | None = None,
                         rounds_log: list[float] | None = None) -> dict[str, Measurement]:
            raws = runner.measure(workloads, settings, probes=self.probes(), sync=_device_sync(),
                                  watch=settings.stall.enabled, pace=pace, rounds_log=rounds_log)
            return {name: self._build(fx._variant_id(name), mode, raw, workloads[name]) for name, raw in raws.items()}

        ours, theirs, against_note = None, None, None
        if self.config.against and reference is None and len(workloads) == 1 and options.gate:
            settings = _paired_settings(settings)
            ours, theirs, against_note = self._measure_beside_partner(
                fx._node_id, settings, measure_once, fallback="judged as without --tfperf-against",
                tolerances=self._tolerances(options))
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
        elif self.config.against_fallback and reference is None and len(workloads) == 1 and options.gate:
            for o in outcomes.values():  # the reason is said once, in the summary's --tfperf-against=auto line
                o.notices.append(f"{fx._node_id}: judged by the stored gate, not beside a baseline revision "
                                 "(--tfperf-against=auto found none)")
        to_confirm = [o for o in outcomes.values() if self.stored_gate.wants_confirmation(o)]
        if to_confirm:
            self.stored_gate.confirm(fx._node_id, to_confirm, settings, self._tolerances(options))
        if not against and reference is None and any(borderline(o) for o in outcomes.values()):
            # Borderline evidence: measure again (all variants, so pairs stay
            # interleaved) and judge the pooled samples, rather than flip a coin.
            from pytest_tfperf.gates.pooling import pool

            again = measure_once()
            for name in measured:
                measured[name] = pool(measured[name], again[name])
                outcomes[name] = self._evaluate(measured[name], options)
                outcomes[name].notices.append(
                    f"{measured[name].test_id}: re-measured once because the first verdict was borderline; "
                    "judged on both measurements pooled")
        if self.config.explain:
            try:
                from pytest_tfperf.explain.orchestrate import explain_outcomes

                explain_outcomes(self, workloads, measured, outcomes, reference, settings, against=against,
                                 partner=self._partner, more_pairs=self._more_pairs(settings) if against else None)
            finally:
                for held in (self._partner, self._own_partner):
                    if held is not None:
                        held.release_held()  # the partner's test ends: nothing more to profile there
        fx.results.update(measured)
        for name, o in outcomes.items():
            o.item_id, o.variant = fx._node_id, name
            self.outcomes.append(o)
        failures = [self._failure_text(o) for o in outcomes.values() if o.failed]
        if failures:
            fail_test("\n\n".join(failures))
        return measured

    # -- --tfperf-against: the same test of the other version, in a partner session --------

    def partner(self) -> Partner:
        if self._partner is None:
            from pathlib import Path

            from pytest_tfperf.against.partner import Partner
            from pytest_tfperf.session.git_tree import repository_root

            invocation_dir, args = self.invocation
            root = repository_root(Path(invocation_dir)) or Path(self.rootdir)
            assert self.config.against is not None
            self._partner = Partner(self.config.against, current_root=root, invocation_dir=Path(invocation_dir),
                                    test_args=args, timeout_s=self.config.stall_ceiling_s + 60.0)
        return self._partner

    def start_partner_early(self) -> None:
        """Under --tfperf-against, the partner session started before this one collects: the two import
        TensorFlow and collect at once (a few seconds a run saved). Nothing is timed before both are ready. A
        session that is itself a partner (its pipes in PARTNER_ENV: known before collection, unlike
        ``partner_server``) starts none."""
        if self.config.against is not None and self.config.measure and PARTNER_ENV not in os.environ:
            self.partner().prestart()

    def _judge_against(self, test_id: str, measured: dict[str, Measurement], name: str, theirs: Measurement,
                       options: MarkerOptions, settings: RunSettings,
                       measure_once: Measure) -> Outcome:
        from pytest_tfperf.against import plan

        return plan.judge(self, test_id, measured, name, theirs, options, settings, measure_once)

    def _more_pairs(self, settings: RunSettings) -> MorePairs | None:
        """A red --tfperf-against verdict's explanation profiles both versions in more pairs of processes; None
        when asked for one pair (--tfperf-explain-pairs 1): its own pair, one test per group."""
        if self.config.explain_pairs <= 1:
            return None

        def more(test_id: str, iterations: int, timeout_s: float) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]],
                                                                           list[str]]:
            from pytest_tfperf.against import plan

            return plan.profile_fresh_pairs(self, test_id, settings, iterations, timeout_s)
        return more

    def _confirm_against(self, test_id: str, settings: RunSettings, fresh: bool = True
                         ) -> tuple[tuple[Measurement, Measurement] | None, str | None]:
        from pytest_tfperf.against import plan

        return plan.confirm(self, test_id, settings, fresh)

    def _measure_beside_partner(self, test_id: str, settings: RunSettings, measure_once: Measure, *, fallback: str,
                                tolerances: Tolerances | None = None,
                                ) -> tuple[dict[str, Measurement] | None, Measurement | None, str | None]:
        from pytest_tfperf.against import plan

        return plan.measure_beside(self, test_id, settings, measure_once, fallback=fallback, tolerances=tolerances)

    def _measure_for_partner(self, fx: TfPerf, workloads: dict[str, Workload], mode: str,
                             settings: RunSettings) -> dict[str, Measurement]:
        """This session is a partner: measure in step with the coordinator, send the result, judge nothing."""
        from pytest_tfperf.against.partner_tree import PartnerError

        server = self.partner_server
        assert server is not None and server.request is not None  # measure_and_judge sends only a partner here
        request = server.request
        if len(workloads) != 1 and not request.variants:
            raise PartnerError(f"{fx._test_id} measures {len(workloads)} variants with tfperf.compare() in this "
                               "version; --tfperf-against pairs single workloads only")
        settings = dataclasses.replace(settings, rounds=request.rounds, min_rounds=request.rounds,
                                       budget_s=request.budget_s)
        # Only the timed rounds are paired: the dataset-alone and step-alone phases would keep the coordinator
        # waiting for figures it does not judge.
        server.rounds_log = []
        raws = runner.measure(workloads, settings, probes=self.probes(), sync=_device_sync(),
                              watch=settings.stall.enabled, pace=server.pace, split_input=False,
                              rounds_log=server.rounds_log)
        measured = {name: self._build(fx._variant_id(name), mode, raw) for name, raw in raws.items()}
        server.send_result(list(measured.values()))
        from pytest_tfperf.explain.orchestrate import profile_for_coordinator

        server.hold(lambda message: profile_for_coordinator(self.profiler, workloads, message, measured))
        fx.results.update(measured)
        return measured

    def _build(self, test_id: str, mode: str, raw: RawRun, workload: Workload | None = None) -> Measurement:
        from pytest_tfperf.diagnoses import diagnostics

        extras, diagnoses = diagnostics.analyse(raw)
        if workload is not None and diagnostics.input_fired(diagnoses):
            # After the timed rounds, only when the diagnosis fires: which stage sets the pace, measured.
            from pytest_tfperf.input_bound.profiled_pass import profile_input

            stages = profile_input(workload, raw, self.rootdir, test_id, self.input_profiler)
            extras, diagnoses = diagnostics.analyse(raw, stages=stages)
        return build_measurement(
            test_id, mode, raw, traces_first_call=raw.traces_first_call, traces_steady=raw.traces_steady,
            extra_metrics=extras, diagnoses=diagnoses, environment_id=self.environment().fingerprint,
        )

    def _evaluate(self, m: Measurement, options: MarkerOptions) -> Outcome:
        from pytest_tfperf.gates.budgets import budgets_from_marker, check_budgets, unchecked_budgets

        budgets = budgets_from_marker(options)
        outcome = Outcome(measurement=m, violations=check_budgets(m, budgets))
        # A limit with nothing to check it against (no GPU for a device limit, say) is said, not skipped silently.
        outcome.notices += [f"{m.test_id}: limit not checked: {why}" for why in unchecked_budgets(m, budgets)]
        if options.gate and self.config.gate:
            self.stored_gate.judge(outcome, self._tolerances(options))
        return outcome

    def _evaluate_paired(self, m: Measurement, reference: Measurement, name: str,
                         options: MarkerOptions, *, partner: bool = False) -> Outcome:
        """Budgets, then the paired gate: this variant against the reference measured beside it.

        With ``partner``, the reference is the same test of the other version
        of the code (``name``, from --tfperf-against), measured in turns.
        """
        from pytest_tfperf.gates.paired import judge_paired

        outcome = self._evaluate(m, dataclasses.replace(options, gate=False))
        # beside the other version a failure is confirmed by fresh pairs: the stated limit counts them all
        outcome.verdict = judge_paired(m, reference, self._tolerances(options), against=partner)
        outcome.baseline = f"measured beside {name}" if partner else f"paired with '{name}'"
        outcome.paired_with = name
        outcome.partner = partner
        # A variant's reference is in the results under its own id; the other version's figures are not.
        outcome.reference = reference if partner else None
        return outcome

    def _evaluate_against(self, m: Measurement, theirs: Measurement, options: MarkerOptions) -> Outcome:
        assert self.config.against is not None
        return self._evaluate_paired(m, theirs, self.config.against, options, partner=True)

    def _tolerances(self, options: MarkerOptions) -> Tolerances:
        from pytest_tfperf.gates.verdict import Tolerances

        tolerance = options.tolerance if options.tolerance is not None else self.config.tolerance
        return Tolerances() if tolerance is None else Tolerances(throughput=tolerance)

    def _failure_text(self, o: Outcome) -> str:
        parts = []
        if o.violations:
            parts.append(f"{o.measurement.test_id}: limit crossed")
            parts += [f"  {v.message()}" for v in o.violations]
        if o.verdict is not None and o.verdict.status == "regressed":
            parts.append(o.verdict.failure_message(self.environment().fingerprint, self.refresh_hint(o),
                                                   paired_with=o.paired_with, partner=o.partner))
        for d in o.measurement.diagnoses:
            if d.severity != "info":
                parts.append(f"  diagnosis: {d.summary}")
        if o.explanation is not None:
            parts += [f"  {line}" for line in o.explanation.lines]
        return "\n".join(parts)

    def refresh_hint(self, o: Outcome) -> str:
        return f"pytest --tfperf --tfperf-update {_shell_quote(o.measurement.test_id.split('[')[0])}"

    # -- reporting ------------------------------------------------------------

    def summary_lines(self) -> list[str]:
        return outputs.summary_lines(self, self._written)

    def finish(self) -> bool:
        """Write what the options asked for (``outputs``); False when something could not be written.

        The reason is in the summary.
        """
        try:
            if not self.outcomes and not self.failures:
                return True
            if self.config.calibrate:
                self._measure_calibration()
            return outputs.write_outputs(self, self._written)
        finally:
            self.close()

    def _measure_calibration(self) -> None:
        """Measure the calibration workload once in this refresh process, after its tests, where TensorFlow
        is loaded already (a suite that never imported it gets no calibration: its floor is the suite's)."""
        if "tensorflow" not in sys.modules or not any(o.measurement.timings.iterations > 1 for o in self.outcomes):
            return
        from pytest_tfperf.measuring import calibration

        settings = RunSettings(budget_s=self.config.budget_s, rounds=self.config.rounds)
        raw = runner.measure({"": calibration.workload()}, settings, probes=self.probes(), sync=_device_sync(),
                             watch=settings.stall.enabled)[""]
        self.calibration = self._build(calibration.CALIBRATION_ID, "call", raw)

    def report_properties(self, test_id: str) -> list[tuple[str, object]]:
        """Figures for JUnit XML (``record_property``), for the outcomes of one test and its variants."""
        props: list[tuple[str, object]] = []
        for o in self.outcomes:
            if o.item_id == test_id:
                prefix = f"{o.variant}:" if o.variant else ""
                props += [(prefix + key, value) for key, value in outcome_properties(o)]
        return props

    def record_failure(self, exc: BaseException, test_id: str, *, batch_size: int | None = None,
                       items_per_iteration: float | None = None) -> str | None:
        """Explain a stall, OOM or NaN, keep it for the summary and the JSON, and return the failure text."""
        from pytest_tfperf.diagnoses.failures import diagnose_failure

        failure = diagnose_failure(exc, test_id, batch_size=batch_size, items_per_iteration=items_per_iteration)
        if failure is None:
            return None
        self.failures.append(failure)
        return failure.message


def _paired_settings(settings: RunSettings) -> RunSettings:
    """Rounds for a paired verdict: 7 pairs at least reach 99%; 20 short ones catch a 10% slowdown. Each side
    gets half the budget, so that both together measure as long as a plain run: what the pairing buys is the
    turns, not more time (docs/explanation/gates.md, benchmarks/paired_pipelines.py)."""
    from pytest_tfperf.session.fixture import PAIRED_ROUNDS

    rounds = max(settings.rounds, PAIRED_ROUNDS)
    return dataclasses.replace(settings, rounds=rounds, min_rounds=rounds, budget_s=settings.budget_s / 2.0)


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


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


