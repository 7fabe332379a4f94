"""Settings: command-line options, ini keys and per-test marker arguments.

Pure data and validation; the pytest objects are read in ``from_pytest_config``
and ``MarkerOptions.from_kwargs`` only, so everything else takes plain values.
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_BASELINE_DIR = "benchmarks/baselines"
# Set in a partner session (see ``partner``): the pipes to the session that drives it.
PARTNER_ENV = "TFPERF_PARTNER_FDS"
# Set in the extra processes of a refresh (see ``refresh``): where that process writes its results, and
# that it only measures (no baselines, no history, no gate).
RUN_CHILD_ENV = "TFPERF_REFRESH_RESULTS"
DEFAULT_RUNS = 7  # processes a refresh measures each test in (why 7: stored_rule's "How many runs")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A relative tolerance: ``10%`` or ``0.10``."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 10% or a fraction like 0.1, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a tolerance between 0% and 100% (exclusive), got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """What the command line and ini file asked for, for the whole session."""

    measure: bool = False
    json_path: str | None = None
    markdown_path: str | None = None
    html_path: str | None = None  # --tfperf-html: the report page (reports.html_report)
    budget_s: float = 2.0
    rounds: int = 5
    baseline_dir: str = DEFAULT_BASELINE_DIR
    update: bool = False
    update_improved_only: bool = False
    strict: bool = False
    tolerance: float | None = None  # None: the comparison's own default
    stall_ceiling_s: float = 300.0
    watchdog: bool = True
    # What a stored-baseline throughput regression does: "fail" (default) fails the test, "warn" reports it.
    # Memory, trace and paired verdicts always fail. See docs/explanation/gates.md.
    throughput_gate: str = "fail"
    runs: int = DEFAULT_RUNS  # --tfperf-update: processes each test is measured in
    record: bool = False  # --tfperf-record: add this run to the history (never to the baseline)
    gate: bool = True  # False in a refresh's extra processes: they measure, nothing is compared
    # A refresh's processes (the first and each extra one) also measure the calibration workload (``calibration``).
    calibrate: bool = False
    hard_exit: bool = True  # arm faulthandler as a last resort against a wedged GIL
    # --tfperf-against: a git revision or directory whose code is measured beside this one, round by round.
    against: str | None = None
    # --tfperf-against=auto (against.baseline_revision): the revision found and how, said in the header and the
    # Markdown summary; or why none was found, when the stored gate judges instead (said in every report).
    against_found: str | None = None
    against_fallback: str | None = None
    # A failed throughput (or TF-allocator) verdict gets a profiled pass of each side and the change attributed
    # to ops and tf.data stages (explain/); never inside the timed rounds, nothing on a passing run. On by
    # default: a red test is where the user wants the answer, and it costs nothing on green ones
    # (--no-tfperf-explain or ini tfperf_explain = false turn it off).
    explain: bool = True
    # A red --tfperf-against verdict is profiled in this many pairs of processes, one of each version in each,
    # and each layer, op and tf.data stage tested across them (against.plan.profile_fresh_pairs); 1: the
    # explanation's own pair only, the cheapest and the least sure (--tfperf-explain-pairs, ini
    # tfperf_explain_pairs). Five, not
    # three: a cost spread over several layers moves each by less than its between-process spread, and on
    # the same profiles five pairs named the planted layer first in 7 of 12 such red verdicts, three in 4
    # (benchmarks/results/explain_kept_offline_5pairs.md), for about 10 s more a red test.
    explain_pairs: int = 5


# Marker arguments, their types and what they mean. Kept as data so that the
# error for an unknown argument can list the known ones.
MARKER_FIELDS: dict[str, str] = {
    "budget_s": "seconds of steady-state measurement for this test",
    "rounds": "number of timed rounds",
    "warmup_s": "extra warm-up seconds after the first call",
    "tolerance": "throughput slowdown the baseline gate must catch ('10%' or 0.1)",
    "max_peak_tf_bytes": "limit: TF allocator peak on any device",
    "max_peak_rss_bytes": "limit: process RSS high-water mark",
    "max_peak_device_bytes": "limit: GPU memory used (NVML)",
    "min_throughput": "limit: items per second",
    "max_traces": "limit: tf.function traces in the steady state",
    "max_input_bound_fraction": "limit: fraction of each step spent waiting for input",
    "max_memory_growth_bytes_per_iteration": "limit: memory growth slope",
    "min_gpu_busy_fraction": "limit: share of the measured time the GPU ran a kernel (NVML, median round)",
    "gate": "compare with the stored baseline (default True)",
    "watchdog": "fail a stalled iteration instead of hanging (default True)",
    "stall_multiple": "deprecated, goes in the next release: stall deadline as a multiple of the typical iteration",
    "stall_floor_s": "shortest stall deadline",
    "stall_timeout_s": "longest an iteration may run before it fails as stalled (and the first call's deadline)",
    "check_finite": "fail at the first non-finite loss returned by the workload",
    "batch_size": "batch size of the workload, named in out-of-memory failures",
}


@dataclass(frozen=True, slots=True)
class MarkerOptions:
    """Per-test settings from ``@pytest.mark.tfperf(...)``; ``None`` means 'session default'."""

    budget_s: float | None = None
    rounds: int | None = None
    warmup_s: float | None = None
    tolerance: float | None = None
    max_peak_tf_bytes: int | None = None
    max_peak_rss_bytes: int | None = None
    max_peak_device_bytes: int | None = None
    min_throughput: float | None = None
    max_traces: int | None = None
    max_input_bound_fraction: float | None = None
    max_memory_growth_bytes_per_iteration: float | None = None
    min_gpu_busy_fraction: float | None = None
    gate: bool = True
    watchdog: bool | None = None
    stall_multiple: float | None = None
    stall_floor_s: float | None = None
    stall_ceiling_s: float | None = None
    check_finite: bool = False
    batch_size: int | None = None

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any], where: str) -> MarkerOptions:
        kwargs = _renamed_marker_arguments(kwargs, where)
        for name, why in RETIRING_MARKER_ARGUMENTS.items():
            if name in kwargs:
                warnings.warn(f"{where}: @pytest.mark.tfperf({name}=...) goes in the next release: {why}",
                              DeprecationWarning, stacklevel=3)
        unknown = sorted(set(kwargs) - set(MARKER_FIELDS))
        if unknown:
            known = ", ".join(sorted(MARKER_FIELDS))
            raise ValueError(f"{where}: unknown @pytest.mark.tfperf argument(s) {', '.join(unknown)}; known: {known}")
        values = dict(kwargs)
        for name, value in kwargs.items():
            if name == "tolerance" and isinstance(value, str):
                # One tolerance syntax everywhere: '10%' or 0.1, as on the command line and in the ini file.
                try:
                    values[name] = fraction(value)
                except argparse.ArgumentTypeError as exc:
                    raise ValueError(f"{where}: @pytest.mark.tfperf(tolerance=...): {exc}") from None
                continue
            _check_marker_value(name, value, where)
        # The stall setting keeps its internal name; the marker and the option both say "stall timeout".
        values["stall_ceiling_s"] = values.pop("stall_timeout_s", None)
        return cls(**values)


# Old marker spellings, accepted with a deprecation warning for one release (see CHANGELOG.md).
RENAMED_MARKER_ARGUMENTS = {"stall_ceiling_s": "stall_timeout_s"}
# Knobs nobody needs, still obeyed for one release with a deprecation warning (see CHANGELOG.md).
RETIRING_MARKER_ARGUMENTS = {
    "stall_multiple": "a stall is a call 100 times the typical one (at least stall_floor_s); for a fixed deadline "
                      "use stall_timeout_s",
}


def _renamed_marker_arguments(kwargs: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    if not set(kwargs) & set(RENAMED_MARKER_ARGUMENTS):
        return kwargs
    renamed: dict[str, Any] = {}
    for name, value in kwargs.items():
        new = RENAMED_MARKER_ARGUMENTS.get(name)
        if new is None:
            renamed[name] = value
            continue
        if new in kwargs:
            raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) and ({new}=...) are the same setting: "
                             f"keep {new}")
        warnings.warn(f"{where}: @pytest.mark.tfperf({name}=...) is renamed {new}=...; the old name goes in the "
                      "next release", DeprecationWarning, stacklevel=3)
        renamed[new] = value
    return renamed


def _check_marker_value(name: str, value: Any, where: str) -> None:
    if name in ("gate", "watchdog", "check_finite"):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be True or False, got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be a number, got {value!r}")
    if name in ("max_traces",):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be a whole number >= 0, got {value!r}")
        return
    if name in ("rounds", "batch_size") and (not isinstance(value, int) or value < 1):
        raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be a whole number >= 1, got {value!r}")
    if name in ("tolerance", "max_input_bound_fraction") and not 0 < value < 1:
        raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be a fraction between 0 and 1, got {value!r}")
    if name == "min_gpu_busy_fraction" and not 0 < value <= 1:
        raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be a fraction above 0 and at most 1, "
                         f"got {value!r}")
    if name == "stall_multiple" and value <= 1:
        raise ValueError(f"{where}: @pytest.mark.tfperf(stall_multiple=...) must be > 1, got {value!r}")
    if name == "warmup_s" and value < 0:
        raise ValueError(f"{where}: @pytest.mark.tfperf(warmup_s=...) must be >= 0, got {value!r}")
    if name not in ("warmup_s",) and value <= 0 and name != "max_memory_growth_bytes_per_iteration":
        raise ValueError(f"{where}: @pytest.mark.tfperf({name}=...) must be positive, got {value!r}")
