"""What happened to one measured test (or variant), and how it fails the test or shows in JUnit XML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_tfperf.model import BudgetViolation, Measurement

if TYPE_CHECKING:  # annotations only: those modules load when a test is judged or explained, not with this one
    from pytest_tfperf.explain.explanation import Explanation
    from pytest_tfperf.gates.baseline_runs import BaselineRuns
    from pytest_tfperf.gates.verdict import Verdict


@dataclass
class Outcome:
    """What happened to one measured test (or variant)."""

    measurement: Measurement
    violations: tuple[BudgetViolation, ...] = ()
    verdict: Verdict | None = None  # when a baseline was compared
    baseline: str = ""  # "", "no baseline", "no baseline for this environment"
    gating: bool = True  # False while baselines are being refreshed: a slower number is accepted then
    throughput_fails: bool = True  # False: a stored-baseline throughput regression is a warning (see config)
    paired_with: str | None = None  # the reference variant of a paired verdict (or --tfperf-against's version)
    partner: bool = False  # paired with the same test in a partner session (--tfperf-against)
    item_id: str = ""  # the pytest node id this outcome belongs to
    stored: tuple[Measurement, BaselineRuns] | None = None  # behind a stored verdict, to judge a confirmation
    variant: str = ""  # the tfperf.compare variant name, "" for a single workload
    notices: list[str] = field(default_factory=list)
    reference: Measurement | None = None  # the partner's measurement (--tfperf-against), for the reports
    explanation: Explanation | None = None  # under --tfperf-explain, for a throughput regression
    stored_profile: Mapping[str, object] | None = None  # the stored baseline's compact profile, when it has one

    @property
    def label(self) -> str:
        if self.violations:
            return "OVER LIMIT"
        if self.verdict is not None:
            status = str(self.verdict.status)
            if status == "regressed":
                label = ("slower (warning)" if self.warned_only else "REGRESSED") if self.gating else "slower (accepted)"
            elif status == "unconfirmed":
                label = "unconfirmed"  # a regression in this process only: reported, not failed (see stored_gate)
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
    def throughput_regressed(self) -> bool:
        """A throughput regression that fails this test (what --tfperf-explain explains)."""
        return "throughput" in self.regressed_metrics and self.failed

    @property
    def failed(self) -> bool:
        regressed = bool(self.regressed_metrics) and not self.warned_only
        return bool(self.violations) or (regressed and self.gating)


def borderline(o: Outcome) -> bool:
    """The verdict's evidence straddles the decision threshold: measure once more before deciding."""
    return o.verdict is not None and bool(getattr(o.verdict, "needs_remeasure", False))


def detection_limit(o: Outcome) -> float | None:
    """The throughput detection limit of an outcome's verdict (None: no throughput comparison)."""
    if o.verdict is None:
        return None
    throughput = o.verdict.metric("throughput")
    if throughput is None or str(throughput.status) == "unavailable":
        return None
    limit = throughput.minimum_detectable_change
    return None if limit is None else float(limit)


def outcome_properties(o: Outcome) -> list[tuple[str, object]]:
    """An outcome's figures for JUnit XML (``record_property``)."""
    m = o.measurement
    props: list[tuple[str, object]] = [
        ("tfperf_throughput_per_s", round(m.throughput_per_s, 3)),
        ("tfperf_first_call_s", round(m.first_call_s, 6)),
        ("tfperf_median_s", m.median_s),
        ("tfperf_verdict", o.label),
    ]
    if o.verdict is not None and str(o.verdict.status) == "unconfirmed":
        props.append(("tfperf_unconfirmed_reason", o.verdict.unconfirmed_reason))
    limit = detection_limit(o)
    if limit is not None:
        props.append(("tfperf_detection_limit", "none" if limit >= 1.0 else round(limit, 4)))
    for peak in m.memory:
        if peak.peak_bytes is not None:
            props.append((f"tfperf_{peak.metric_name}_bytes", peak.peak_bytes))
    if m.traces_steady is not None:
        props.append(("tfperf_traces_steady", m.traces_steady))
    for name, value in m.extra_metrics:
        props.append((f"tfperf_{name}", value))
    from pytest_tfperf.reports.report import gpu_properties

    return props + gpu_properties(m)  # which NVML figure, what the test added, GPU busy


def fail_test(message: str) -> None:
    """Fail the running test with ``message`` and no plugin traceback."""
    import pytest

    pytest.fail(message, pytrace=False)
