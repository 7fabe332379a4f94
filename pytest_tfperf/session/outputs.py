"""What a session writes and says at its end: results JSON, baselines, history, Markdown, HTML, the summary.

Every function reads the finished session (``FinishedSession``: what
``TfPerfSession`` holds) and changes nothing in it but the lines saying what
was written; nothing here measures or judges.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_tfperf.config import SessionConfig
from pytest_tfperf.model import Environment, Measurement
from pytest_tfperf.session.outcome import Outcome, detection_limit

if TYPE_CHECKING:  # annotations only: each is loaded where it is used, at the session's end
    from pytest_tfperf.diagnoses.failures import MeasurementFailure
    from pytest_tfperf.reports.report import Row
    from pytest_tfperf.storage.baseline_store import BaselineStore
    from pytest_tfperf.storage.results_json import StoredGateNotes


class FinishedSession(Protocol):
    config: SessionConfig
    rootdir: str
    outcomes: list[Outcome]
    failures: list[MeasurementFailure]
    effects: list[dict[str, Any]]  # JSON objects (TfPerf.record_effect)
    calibration: Measurement | None  # the calibration workload, in a refresh's processes
    invocation: tuple[str, list[str]]
    invocation_args: tuple[str, ...]
    profiles: dict[str, dict[str, Any]]  # --tfperf-update --tfperf-explain: test id -> compact profile

    @property
    def baseline_dir(self) -> str: ...

    def environment(self) -> Environment: ...

    def store(self) -> BaselineStore: ...


def write_outputs(s: FinishedSession, written: list[str]) -> bool:
    """Write what the options asked for: JSON results, baselines, history, Markdown, HTML.

    Appends to ``written`` what was written, or why not; returns False when
    something could not be written.
    """
    from pytest_tfperf.storage.fields import StorageError

    steps = []
    if s.config.json_path:
        steps.append(_write_json)
    if s.config.update:
        steps.append(_update_baselines)
    if s.config.record:
        steps.append(_record_history)
    if s.config.markdown_path or os.environ.get("GITHUB_STEP_SUMMARY"):
        steps.append(_write_markdown)
    if s.config.html_path:
        steps.append(_write_html)  # last: it draws the history that the update appended
    ok = True
    for step in steps:
        try:
            step(s, written)
        except (StorageError, OSError) as exc:
            ok = False
            written.append(f"ERROR: {exc}")
    return ok


def summary_lines(s: FinishedSession, written: Sequence[str]) -> list[str]:
    """The end-of-session summary: the table, notices, diagnoses, what the gates can catch, what was written."""
    from pytest_tfperf.diagnoses.failures import failure_summary_lines
    from pytest_tfperf.reports import report

    if not s.outcomes and not s.failures and not written and not s.effects:
        return []
    lines = report.summary_table(_rows(s)) if s.outcomes else []
    lines += against_lines(s.config, found=False)
    for o in s.outcomes:
        lines += o.notices
        for d in o.measurement.diagnoses:
            if d.severity != "info" or d.kind == "input_bound":
                lines.append(f"{o.measurement.test_id}: {d.summary}")
    if any(o.warned_only and o.gating for o in s.outcomes):
        lines.append("throughput warnings are not failures under --tfperf-throughput-gate=warn; drop the option "
                     "(or set it to fail) to fail them")
    lines += _limit_lines(s)
    lines += _other_environment_lines(s)
    missing = [o for o in s.outcomes if o.baseline == "no baseline"]
    if missing and not s.config.update:
        lines.append(f"{len(missing)} test(s) have no baseline yet: they were measured and reported, not gated. "
                     f"Record baselines with: pytest --tfperf --tfperf-update")
    lines += failure_summary_lines(s.failures)
    lines += written
    return lines


# How a run whose --tfperf-against=auto found no baseline revision judged its tests (plugin._resolve_against).
FALLBACK_TAIL = "every test was judged by the stored gate (stored baselines) instead"


def against_lines(c: SessionConfig, *, found: bool) -> list[str]:
    """--tfperf-against=auto's result: why no revision was found (always), and the revision found (``found``:
    the terminal says that in its header already, the Markdown summary a reviewer reads does not)."""
    if c.against_fallback:
        return [f"{c.against_fallback}; {FALLBACK_TAIL}"]
    return [c.against_found] if found and c.against_found else []


def _rows(s: FinishedSession) -> list[Row]:
    from pytest_tfperf.reports import report

    return [report.Row(o.measurement, o.label, report.format_limit(detection_limit(o))) for o in s.outcomes]


def stored_gate_notes(s: FinishedSession) -> StoredGateNotes:
    """What the stored gate could and could not see in this run (``results_json.StoredGateNotes``): the lines
    the terminal says about it (which slowdowns the stored baselines catch here; every test whose baseline was
    recorded only for other environments; an unreadable calibration baseline), for the Markdown summary and the
    results JSON, where reviewers and CI look."""
    from pytest_tfperf.storage.results_json import StoredGateNotes

    gate = getattr(s, "stored_gate", None)
    notes = list(getattr(gate, "notes", ()))
    missing = tuple(getattr(gate, "no_baseline_for_environment", ()))
    return StoredGateNotes(lines=tuple(_limit_lines(s) + notes + _other_environment_lines(s)),
                           no_baseline_for_environment=missing)


def _other_environment_lines(s: FinishedSession) -> list[str]:
    missing = getattr(getattr(s, "stored_gate", None), "no_baseline_for_environment", ())
    if not missing or s.config.strict or s.config.update:
        return []
    return [f"{len(missing)} test(s) have baselines recorded only for other environments: they were measured, "
            "not gated (--tfperf-strict, or ini tfperf_strict = true, fails them)"]


def _limit_lines(s: FinishedSession) -> list[str]:
    """What the stored throughput verdicts can catch here, said once for the whole session."""
    from pytest_tfperf.gates.verdict import slowdown_text

    stored = [o for o in s.outcomes if o.paired_with is None and o.stored is not None and o.gating]
    limits = [lim for lim in (detection_limit(o) for o in stored) if lim is not None]
    if not limits:
        return []
    tolerance = s.config.tolerance if s.config.tolerance is not None else 0.10
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


def _write_json(s: FinishedSession, written: list[str]) -> None:
    from pytest_tfperf.storage.results_json import results_to_dict, write_results

    assert s.config.json_path is not None  # write_outputs runs this step only then
    write_results(s.config.json_path, results_to_dict(
        s.environment(), s.outcomes, {f.test_id: f.verdict_dict() for f in s.failures}, effects=s.effects,
        calibration=s.calibration, stored_gate=stored_gate_notes(s)))
    written.append(f"results written to {s.config.json_path}")


def _update_baselines(s: FinishedSession, written: list[str]) -> None:
    from pytest_tfperf.session.refresh import run_extra_processes
    from pytest_tfperf.storage.history_csv import append_history, current_git_commit
    from pytest_tfperf.storage.runs import CALIBRATION_ID

    measurements = [o.measurement for o in s.outcomes if o.measurement.timings.iterations > 1]
    if not measurements:
        return
    improved = {o.measurement.test_id for o in s.outcomes
                if o.verdict is not None and str(o.verdict.status) == "improved"}
    extra = None
    if s.config.runs > 1:
        # The same command again in fresh processes, one after the other: the baseline learns how far
        # this machine's figures move between processes, which one process's rounds cannot show.
        invocation_dir, positional = s.invocation
        # Absolute node ids: the extra processes run exactly the tests this one measured.
        node_ids = sorted({_absolute_node_id(o.item_id, s.rootdir) for o in s.outcomes
                           if o.item_id and o.measurement.timings.iterations > 1})
        extra = run_extra_processes(s.config.runs - 1, s.invocation_args, Path(invocation_dir),
                                    timeout_s=None, positional=positional, node_ids=node_ids)
        written += [f"refresh run {f}" for f in extra.failures]
    commit = current_git_commit(s.rootdir)
    calibrated = [] if s.calibration is None else [s.calibration]
    saved = s.store().save(
        measurements + calibrated, s.environment(), only_improved=s.config.update_improved_only,
        is_improvement=lambda new, old: new.test_id in improved or new.test_id == CALIBRATION_ID,
        extra_runs=None if extra is None else extra.measurements, git_commit=commit,
        profiles=getattr(s, "profiles", None) or None,
    )
    append_history(s.baseline_dir, measurements, s.environment(), git_commit=commit)
    tests = {t: m for t, m in (extra.measurements if extra is not None else {}).items() if t != CALIBRATION_ID}
    for others in _by_process(tests):
        append_history(s.baseline_dir, others, s.environment(), git_commit=commit)
    stored = [(t, fp) for t, fp in saved.written if t != CALIBRATION_ID]
    kept = len(saved.not_improved)
    runs = ""
    if extra is not None:
        counts = [1 + len(extra.measurements.get(t, [])) for t, _ in stored]
        fewest = min(counts) if counts else s.config.runs
        runs = (f", {s.config.runs} runs each in separate processes ({extra.processes} extra pytest "
                f"session(s), {extra.seconds:.0f} s)" if fewest == s.config.runs
                else f", {fewest} to {max(counts)} runs each (of {s.config.runs} asked for)")
    written.append(
        f"baselines written for {len(stored)} test(s) in {s.baseline_dir}{runs}"
        + (f"; {kept} kept because they did not improve" if kept else "")
        + "; every other test's baseline was kept"
        + (f"; the machine's calibration workload measured in {1 + len(extra.measurements.get(CALIBRATION_ID, []))}"
           " process(es)" if calibrated and extra is not None else "")
    )


def _record_history(s: FinishedSession, written: list[str]) -> None:
    from pytest_tfperf.storage.history_csv import append_history
    from pytest_tfperf.storage.runs import RECORD

    measurements = [o.measurement for o in s.outcomes if o.measurement.timings.iterations > 1]
    if not measurements:
        return
    path = append_history(s.baseline_dir, measurements, s.environment(), kind=RECORD)
    written.append(f"this run recorded in {path} for {len(measurements)} test(s); baselines unchanged")


def _write_html(s: FinishedSession, written: list[str]) -> None:
    from pytest_tfperf.reports.sources import write_report
    from pytest_tfperf.storage.results_json import results_to_dict

    assert s.config.html_path is not None
    document = results_to_dict(s.environment(), s.outcomes,
                               {f.test_id: f.verdict_dict() for f in s.failures}, effects=s.effects,
                               stored_gate=stored_gate_notes(s))
    write_report(document, s.baseline_dir, s.config.html_path)
    written.append(f"HTML report written to {s.config.html_path}")


def _write_markdown(s: FinishedSession, written: list[str]) -> None:
    from pytest_tfperf.reports import report

    explanations = [o.explanation.headline if o.explanation is not None else None for o in s.outcomes]
    lines = report.markdown_summary(_rows(s), [o.verdict for o in s.outcomes], explanations,
                                    stored_gate=stored_gate_notes(s).lines)
    against = [f"> {line}" for line in against_lines(s.config, found=True)]
    if against:  # under the heading, above the table: what the table's verdicts were measured against
        lines[2:2] = [*against, ""]
    text = "\n".join(lines) + "\n"
    if s.config.markdown_path:
        Path(s.config.markdown_path).parent.mkdir(parents=True, exist_ok=True)  # as for the JSON and HTML
        with open(s.config.markdown_path, "w", encoding="utf-8") as fh:
            fh.write(text)
        written.append(f"Markdown summary written to {s.config.markdown_path}")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(text)


def _absolute_node_id(node_id: str, rootdir: str) -> str:
    path, separator, rest = node_id.partition("::")
    return (path if os.path.isabs(path) else os.path.join(rootdir, path)) + separator + rest


def _by_process(runs: dict[str, list[Measurement]]) -> list[list[Measurement]]:
    """Measurements of a refresh's extra processes, regrouped process by process (the i-th run of each test)."""
    deepest = max((len(v) for v in runs.values()), default=0)
    return [[v[i] for v in runs.values() if len(v) > i] for i in range(deepest)]
