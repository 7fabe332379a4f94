"""The stored gate as users run it: a baseline refreshed once, judged by every later process, suites of 1, 3 and 25.

What users do: refresh once (``pytest --tfperf --tfperf-update``, 7 processes) and let CI judge against that
baseline for weeks. So each block of 7 consecutive processes of a collection is taken as one refresh, and
every process collected after it is judged against it, through the plugin's own ``gates.stored.judge``. The
calibration baseline keeps the runs of earlier refreshes (``--calibration-kept``, 30 by default, as
``BaselineStore.save`` keeps them): here, the newest of the processes before the refresh.

* ``--suite 1``: each test judged as if it were the whole suite: the machine's floor is the calibration
  workload's alone (``pytest_tfperf.measuring.calibration``, the computation of ``test_work[x1]``, measured in every
  process of the collections), since a suite of fewer than 5 tests has no suite floor;
* ``--suite 3``: consecutive triples of the suite's tests, floored by the calibration and the triple;
* ``--suite 25``: the whole suite, floored by the calibration and the suite's typical spread.

The confirmation is what the plugin does: a fresh process started right after the first. In a collection made
with ``collect.py --alone`` the tests that were measured alone after each suite process are confirmed by that
process (the plugin's own mechanism: one test, a fresh process, at once); others by the next suite process.

Planted slowdowns (``test_work[x1.11]`` ... ``test_work[x3-a]``: the same computation doing 1.1x to 3x the
work per item) are judged against ``test_work[x1]``'s baseline, one outcome per process and slowdown
(``x3-b``, ``x3-c`` are the same workload in the same process: not counted again). The calibration row is
the promise each verdict prints: among planted verdicts whose stated limit is at most the planted slowdown,
the share caught.

The correlation between a run and its confirmation (``--confirm alone`` data only) is measured on the
unchanged tests that were measured alone: each pair's log deviations from the refresh's level, standardised
by the test's spread over the whole collection, pooled over tests.

    .venv/bin/python benchmarks/stored_gate_validation.py --data stored_gate_runs.json --suite 1
    .venv/bin/python benchmarks/stored_gate_validation.py --runs /tmp/coll --data stored_gate_runs_alone.json
        (writes the compact data of a new collection first)

Writes ``benchmarks/results/stored_gate_validation_<data>_<suite>.json`` and prints the Markdown tables
(all three collections: ``benchmarks/results/stored_gate_validation.md``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from stored_gate_study import (  # noqa: E402
    CALIBRATION,
    CHANGED,
    MEMORY_CHANGE,
    PREFIX,
    _judge,
    collect_summary,
    compact,
)

from pytest_tfperf.config import DEFAULT_RUNS  # noqa: E402
from pytest_tfperf.storage.runs import CALIBRATION_RUNS_KEPT  # noqa: E402
from validation.intervals import wilson_interval  # noqa: E402
from pytest_tfperf.gates.stored_rule import log_spread, machine_floor  # noqa: E402

RESULTS = HERE / "results"
PLANTED = {"test_work[x1.11]": "1.1x", "test_work[x1.54]": "1.5x", "test_work[x2]": "2x", "test_work[x3-a]": "3x"}
SKIPPED = {"test_work[x1.25]", "test_work[x3-b]", "test_work[x3-c]", MEMORY_CHANGE[0]}


def collect(runs_dir: Path) -> dict[str, Any]:
    """Compact figures of a ``collect.py`` directory (``stored_gate_study.collect_summary``), with each
    process's ``--alone`` measurements added under ``alone``."""
    from pytest_tfperf.storage.results_json import load_results

    summary = collect_summary(runs_dir)
    records = {json.loads(line)["index"]: json.loads(line)
               for line in (runs_dir / "processes.jsonl").read_text().splitlines() if line}
    for process in summary["processes"]:
        alone: dict[str, Any] = {}
        for group in records[process["index"]].get("alone", []):
            if group.get("result"):
                for m in load_results(runs_dir / group["result"]).measurements:
                    alone[m.test_id.removeprefix(PREFIX)] = compact(m)
        process["alone"] = alone
    return summary


def _suites(tests: Sequence[str], size: int) -> list[list[str]]:
    # The calibration's test first: the triple holding it also judges the planted slowdowns.
    unchanged = sorted((t for t in tests if t not in CHANGED and t not in SKIPPED), key=lambda t: t != CALIBRATION)
    if size >= len(unchanged):
        return [unchanged]
    if size == 1:
        return [[t] for t in unchanged]
    return [unchanged[i:i + size] for i in range(0, len(unchanged) - size + 1, size)]


def judge_fixed(summary: dict[str, Any], suite_size: int, n_base: int = DEFAULT_RUNS, *, step: int | None = None,
                calibrated: bool = True, calibration_kept: int = 0) -> list[dict[str, Any]]:
    """Every verdict of refreshes of ``n_base`` consecutive processes, each judged by every later process.

    ``step``: how far apart refreshes start (``n_base``, the default: non-overlapping blocks; 1: every window
    of ``n_base`` consecutive processes, a refresh taken at any moment). ``calibrated=False`` judges as if no
    calibration baseline existed (baselines older than it, a suite that never loads TensorFlow).
    ``calibration_kept``: the calibration baseline keeps that many runs in all, this refresh's and the newest of
    the processes before it (earlier refreshes' runs, as ``BaselineStore.save`` keeps them).
    """
    processes = summary["processes"]
    rows = []
    for start in range(0, len(processes) - n_base, step or n_base):
        window = processes[start:start + n_base]
        earlier = processes[max(0, start - max(0, calibration_kept - n_base)):start] if calibration_kept else []
        calibration = [w["tests"][CALIBRATION]["throughput_per_s"] for w in [*earlier, *window]
                       if CALIBRATION in w["tests"] and calibrated]
        for suite in _suites(list(window[-1]["tests"]), suite_size):
            spreads = [(log_spread([w["tests"][t]["throughput_per_s"] for w in window if t in w["tests"]]),
                        float(n_base - 1)) for t in suite]
            # Earlier processes stand for earlier refreshes of the calibration (as BaselineStore.save keeps them).
            floor = machine_floor(spreads, calibration, refreshes=1 + bool(earlier))
            judged = list(suite) + ([*PLANTED] if CALIBRATION in suite or suite_size >= 25 else [])
            for p in range(start + n_base, len(processes)):
                proc = processes[p]
                after = processes[p + 1] if p + 1 < len(processes) else None
                for test in judged:
                    if test not in proc["tests"]:
                        continue
                    reference = CHANGED.get(test, (test, ""))[0]
                    baseline = [w["tests"][reference] for w in window if reference in w["tests"]]
                    if len(baseline) < n_base:
                        continue
                    confirmation, how = None, "none"
                    if test in proc.get("alone", {}):
                        confirmation, how = proc["alone"][test], "alone"
                    elif after is not None and test in after["tests"]:
                        confirmation, how = after["tests"][test], "next suite process"
                    row = _judge(PREFIX + reference, proc["tests"][test], confirmation, baseline, floor)
                    row.update(refresh=start, process=proc["index"], test=test, kind=PLANTED.get(test, "A/A"),
                               confirmed_by=how, floor=floor.source)
                    rows.append(row)
    return rows


def realised(summary: dict[str, Any]) -> dict[str, float]:
    out = {}
    for test in PLANTED:
        ratios = [p["tests"][test]["throughput_per_s"] / p["tests"][CALIBRATION]["throughput_per_s"]
                  for p in summary["processes"] if test in p["tests"] and CALIBRATION in p["tests"]]
        out[test] = 1.0 - statistics.median(ratios) if ratios else math.nan
    return out


def correlation(summary: dict[str, Any], n_base: int = DEFAULT_RUNS) -> dict[str, Any]:
    """Correlation of a run's and its alone-confirmation's deviations from the refresh's level, and their
    mean difference (alone minus in-suite, in log throughput)."""
    processes = summary["processes"]
    tests = sorted({t for p in processes for t in p.get("alone", {}) if t not in CHANGED and t not in SKIPPED})
    pairs: list[tuple[float, float]] = []
    shifts: list[float] = []
    for t in tests:
        series = [math.log(p["tests"][t]["throughput_per_s"]) for p in processes if t in p["tests"]]
        sd = statistics.stdev(series) if len(series) > 2 else math.nan
        if not (sd > 0):
            continue
        for start in range(0, len(processes) - n_base, n_base):
            window = processes[start:start + n_base]
            level = statistics.fmean(math.log(w["tests"][t]["throughput_per_s"]) for w in window)
            for p in processes[start + n_base:]:
                if t in p["tests"] and t in p.get("alone", {}):
                    a = math.log(p["tests"][t]["throughput_per_s"]) - level
                    b = math.log(p["alone"][t]["throughput_per_s"]) - level
                    pairs.append((a / sd, b / sd))
                    shifts.append(b - a)
    if len(pairs) < 3:
        return {"pairs": len(pairs)}
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    r = statistics.correlation(xs, ys)
    # Fisher's z interval (pairs of one refresh share its level, so this interval is optimistic).
    z, se = math.atanh(r), 1.0 / math.sqrt(len(pairs) - 3)
    return {"pairs": len(pairs), "tests": tests, "r": r, "r_ci95": [math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)],
            "alone_minus_suite_log_mean": statistics.fmean(shifts), "alone_minus_suite_log_sd": statistics.stdev(shifts)}


def _rate(hits: int, n: int) -> dict[str, Any]:
    low, high = wilson_interval(hits, n) if n else (math.nan, math.nan)
    return {"hits": hits, "n": n, "rate": hits / n if n else math.nan, "ci95": [low, high]}


def summarise(rows: list[dict[str, Any]], summary: dict[str, Any], suite_size: int) -> dict[str, Any]:
    aa = [r for r in rows if r["kind"] == "A/A"]
    real = realised(summary)
    out: dict[str, Any] = {
        "suite_size": suite_size,
        "processes": len(summary["processes"]),
        "refreshes": len({r["refresh"] for r in rows}),
        "aa_false_alarms": _rate(sum(r["throughput"] == "regressed" for r in aa), len(aa)),
        "aa_any_failure": _rate(sum(r["failed"] for r in aa), len(aa)),
        "aa_confirmed_by": {how: sum(r["confirmed_by"] == how for r in aa if r["confirmation_used"])
                            for how in ("alone", "next suite process", "none")},
        "aa_limits": _quantiles([r["limit"] for r in aa]),
        "realised": real,
    }
    for test, label in PLANTED.items():
        # One outcome per process and slowdown: the suite-25 rows; suites of 1 and 3 judge x1's
        # planted versions once per process too (only the suite holding the calibration test does).
        hits = [r for r in rows if r["test"] == test]
        out[f"caught_{label}"] = _rate(sum(r["throughput"] == "regressed" for r in hits), len(hits))
        promised = [r for r in hits if r["limit"] is not None and math.isfinite(r["limit"])
                    and r["limit"] <= real[test]]
        out[f"promised_{label}"] = _rate(sum(r["throughput"] == "regressed" for r in promised), len(promised))
    promised = [r for r in rows if r["kind"] != "A/A" and r["limit"] is not None and math.isfinite(r["limit"])
                and r["limit"] <= real[r["test"]]]
    out["promise_kept"] = _rate(sum(r["throughput"] == "regressed" for r in promised), len(promised))
    mem = [s for r in aa for s in r["memory"].values()]
    out["aa_memory_false_alarms"] = _rate(sum(s == "regressed" for s in mem), len(mem))
    return out


def _quantiles(values: Sequence[float | None]) -> dict[str, float]:
    finite = sorted(v for v in values if v is not None and math.isfinite(v))
    if not finite:
        return {}
    q = lambda x: finite[min(len(finite) - 1, round(x * (len(finite) - 1)))]  # noqa: E731
    return {"p05": q(0.05), "median": q(0.5), "p95": q(0.95)}


def markdown(s: dict[str, Any], data: str, corr: dict[str, Any]) -> str:
    def rate(r: dict[str, Any]) -> str:
        if not r["n"]:
            return "none"
        return f"{r['hits']} of {r['n']} ({r['rate']:.1%}, 95% CI {r['ci95'][0]:.1%}-{r['ci95'][1]:.1%})"

    from pytest_tfperf.gates.verdict import slowdown_text

    lim = s["aa_limits"]
    lines = [f"### `{data}`, suites of {s['suite_size']} test(s)", "",
             f"{s['processes']} processes; {s['refreshes']} refreshes of 7 processes, each judged by every later "
             f"process; the calibration's runs: {s.get('calibration_kept', 7)} at most (this refresh's and the "
             "processes' before it); confirmations: " + ", ".join(f"{v} by {k}" for k, v in s["aa_confirmed_by"].items() if v)
             + ".", "", "| what | result |", "|---|---|",
             f"| A/A throughput false alarms | {rate(s['aa_false_alarms'])} |",
             f"| A/A tests failed for any reason | {rate(s['aa_any_failure'])} |",
             f"| A/A memory false alarms | {rate(s['aa_memory_false_alarms'])} |"]
    for test, label in PLANTED.items():
        lines.append(f"| {label} planted (realised -{s['realised'][test]:.0%}) caught, per process | "
                     f"{rate(s[f'caught_{label}'])}; where the stated limit was at most the slowdown: "
                     f"{rate(s[f'promised_{label}'])} |")
    lines.append(f"| promise kept: planted slowdowns at least as large as the verdict's stated limit, caught | "
                 f"{rate(s['promise_kept'])} |")
    if lim:
        lines.append(f"| stated limits of A/A verdicts, 5th pct / median / 95th pct | {slowdown_text(lim['p05'])} / "
                     f"{slowdown_text(lim['median'])} / {slowdown_text(lim['p95'])} |")
    if corr.get("pairs", 0) >= 3:
        lines.append(f"| correlation of a run and its alone confirmation ({corr['pairs']} pairs) | r = {corr['r']:.2f} "
                     f"(95% CI {corr['r_ci95'][0]:.2f} to {corr['r_ci95'][1]:.2f}); alone minus in-suite "
                     f"{math.expm1(corr['alone_minus_suite_log_mean']):+.1%} (sd {corr['alone_minus_suite_log_sd']:.1%}) |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, help="a collect.py directory: write its compact data to --data first")
    parser.add_argument("--data", default="stored_gate_runs.json", help="compact data in benchmarks/results/")
    parser.add_argument("--suite", type=int, nargs="+", default=[1, 3, 25])
    parser.add_argument("--calibration-kept", type=int, default=CALIBRATION_RUNS_KEPT,
                        help="runs the calibration baseline keeps, this refresh's and the processes' before it "
                             f"(default {CALIBRATION_RUNS_KEPT}, as BaselineStore.save keeps earlier refreshes'; "
                             "7: this refresh's only, the first refresh on a machine)")
    args = parser.parse_args()
    path = RESULTS / args.data
    if args.runs is not None:
        path.write_text(json.dumps(collect(args.runs), indent=1, sort_keys=True) + "\n")
    summary = json.loads(path.read_text())
    corr = correlation(summary)
    for size in args.suite:
        rows = judge_fixed(summary, size, calibration_kept=args.calibration_kept)
        result = summarise(rows, summary, size)
        result["correlation"] = corr
        result["calibration_kept"] = args.calibration_kept
        name = f"stored_gate_validation_{Path(args.data).stem}_{size}"
        (RESULTS / f"{name}.json").write_text(json.dumps({"summary": result}, indent=1, sort_keys=True,
                                                         default=str) + "\n")
        print(markdown(result, args.data, corr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
