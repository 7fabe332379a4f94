"""The stored gate re-judged with a refresh taken at any moment: every window of consecutive processes.

``stored_gate_validation.py`` takes non-overlapping blocks of 7 processes as refreshes; where the blocks fall
decides what a refresh saw. Here every window of ``n`` consecutive processes of a collection is a refresh
(``judge_fixed(step=1)``), and every process after it is judged against it with a confirmation, through the
plugin's own ``gates.stored.judge`` (``stored_gate_study._judge``), in these schemes:

* ``calibration, earlier refreshes kept``: the calibration baseline holds this refresh's runs and the newest
  of the processes before it, 30 in all, as ``BaselineStore.save`` keeps the calibration's runs of earlier
  refreshes (``storage.runs.CALIBRATION_RUNS_KEPT``);
* ``calibration, this refresh only``: the first refresh on a machine (no earlier runs kept);
* ``no calibration, suite of N``: baselines without a calibration (older than it, or never committed):
  suites of 1-4 tests get the assumed floor (``stored_rule.ASSUMED_FLOOR_SD``), 5 or more the suite's.

With a calibration, a suite's size does not change any verdict (the calibration is the floor whatever the
suite), so those schemes are judged as suites of one test. The rule is built for a joint false-alarm rate of
1e-4 per verdict (a run and its confirmation both below the bound, ``stored_rule.bound_factor``); each row
gives the count that rate predicts and the Poisson probability of seeing at least the observed count.
Overlapping windows share processes, so verdicts are not independent: the probability is a guide.

    nice -n 10 .venv/bin/python benchmarks/stored_gate_sliding.py

Writes ``benchmarks/results/stored_gate_sliding_<collection>.json`` and ``stored_gate_sliding.md``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from stored_gate_validation import PLANTED, judge_fixed, realised  # noqa: E402

from pytest_tfperf.storage.runs import CALIBRATION_RUNS_KEPT  # noqa: E402

RESULTS = HERE / "results"
COLLECTIONS = {"design": "stored_gate_runs.json", "held out": "stored_gate_runs_heldout.json",
               "alone": "stored_gate_runs_alone.json"}
DESIGN_RATE = 1e-4  # joint false alarms per verdict the rule is built for
# (name, runs per refresh, suite size, calibrated, calibration runs kept, step between refreshes: 1 sliding)
SCHEMES: list[tuple[str, int, int, bool, int, int]] = [
    ("calibration, earlier refreshes kept", 7, 1, True, CALIBRATION_RUNS_KEPT, 1),
    ("calibration, this refresh only", 7, 1, True, 0, 1),
    ("calibration, earlier refreshes kept", 5, 1, True, CALIBRATION_RUNS_KEPT, 1),
    ("calibration, this refresh only", 5, 1, True, 0, 1),
    # Without a calibration the blocks of stored_gate_validation.py (where the holes were found): the floor
    # depends on the suite's size only.
    *[("no calibration, fixed blocks", 7, size, False, 0, 7) for size in (1, 2, 3, 4, 5, 25)],
]
FIVE_RUN_COLLECTIONS = ("alone",)  # 5-run refreshes: the bimodal collection (the others take minutes each)


def poisson_at_least(k: int, mean: float) -> float:
    return 1.0 - math.fsum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k))


def judge_scheme(summary: dict[str, Any], n: int, size: int, calibrated: bool, kept: int,
                 step: int) -> dict[str, Any]:
    rows = judge_fixed(summary, size, n, step=step, calibrated=calibrated, calibration_kept=kept)
    aa = [r for r in rows if r["kind"] == "A/A"]
    alarms = [{"refresh": r["refresh"], "process": r["process"], "test": r["test"], "change": r["change"]}
              for r in aa if r["throughput"] == "regressed"]
    expected = DESIGN_RATE * len(aa)
    real = realised(summary)
    out: dict[str, Any] = {
        "verdicts": len(aa), "false_alarms": len(alarms), "alarms": alarms,
        "refreshes": len({r["refresh"] for r in rows}),
        "refreshes_with_alarms": len({a["refresh"] for a in alarms}),
        "expected_at_design_rate": expected,
        "p_at_least_observed": poisson_at_least(len(alarms), expected),
        "first_runs_crossing": sum(r["confirmation_used"] for r in aa),
        "median_stated_limit": statistics.median([r["limit"] for r in aa if r["limit"] is not None
                                                  and math.isfinite(r["limit"])] or [math.inf]),
        "floors": sorted({r["floor"] for r in aa}),
    }
    for test, label in PLANTED.items():
        hits = [r for r in rows if r["test"] == test]
        out[f"caught_{label}"] = [sum(r["throughput"] == "regressed" for r in hits), len(hits)]
        out[f"realised_{label}"] = real[test]
    return out


def markdown(results: dict[str, Any], load: tuple[float, ...], seconds: float) -> str:
    lines = ["# Stored gate: every window of consecutive processes as a refresh", "",
             "`nice -n 10 .venv/bin/python benchmarks/stored_gate_sliding.py` (re-judges committed data; "
             f"highest load average at a start {load[0]:.1f}, {seconds:.0f} s of judging). Design rate: 1e-4 joint false alarms per "
             "verdict. Planted: the real `test_work[x1.54/x2/x3-a]` variants against `test_work[x1]`'s baseline, "
             "one verdict per window and later process.", "",
             "| collection | scheme | runs | suite | A/A false alarms / verdicts | at 1e-4 expected (P of at least "
             "as many) | refreshes with an alarm | median stated limit | 1.5x / 2x / 3x caught |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    from pytest_tfperf.gates.verdict import slowdown_text

    def order(key: str) -> tuple[int, int, int, int]:
        collection, scheme, n, size = key.split(" | ")
        return (list(COLLECTIONS).index(collection), [x[0] for x in SCHEMES].index(scheme), -int(n), int(size))

    for key in sorted(results, key=order):
        r = results[key]
        collection, scheme, n, size = key.split(" | ")
        caught = " / ".join(f"{r[f'caught_{lab}'][0]}/{r[f'caught_{lab}'][1]}" for lab in ("1.5x", "2x", "3x"))
        lines.append(f"| {collection} | {scheme} | {n} | {size} | {r['false_alarms']} / {r['verdicts']:,} | "
                     f"{r['expected_at_design_rate']:.2f} ({r['p_at_least_observed']:.2f}) | "
                     f"{r['refreshes_with_alarms']} of {r['refreshes']} | {slowdown_text(r['median_stated_limit'])}"
                     f" | {caught} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collection", choices=list(COLLECTIONS), action="append",
                        help="judge only these (several runs of the script can share the cores); then --merge")
    parser.add_argument("--merge", action="store_true", help="only write the tables from the per-collection files")
    args = parser.parse_args()
    for collection in ([] if args.merge else args.collection or list(COLLECTIONS)):
        start, load = time.monotonic(), os.getloadavg()
        summary = json.loads((RESULTS / COLLECTIONS[collection]).read_text())
        results: dict[str, Any] = {}
        for scheme, n, size, calibrated, kept, step in SCHEMES:
            if n != 7 and collection not in FIVE_RUN_COLLECTIONS:
                continue
            key = f"{collection} | {scheme} | {n} | {size}"
            results[key] = judge_scheme(summary, n, size, calibrated, kept, step)
            r = results[key]
            print(f"{key}: {r['false_alarms']}/{r['verdicts']} (expected {r['expected_at_design_rate']:.2f})",
                  flush=True)
        (RESULTS / f"stored_gate_sliding_{collection.replace(' ', '_')}.json").write_text(json.dumps(
            {"design_rate": DESIGN_RATE, "load_average_start": load, "seconds": time.monotonic() - start,
             "results": results}, indent=1, sort_keys=True, default=str) + "\n")
    results, loads, seconds = {}, [], 0.0
    for collection in COLLECTIONS:
        path = RESULTS / f"stored_gate_sliding_{collection.replace(' ', '_')}.json"
        if path.exists():
            part = json.loads(path.read_text())
            results.update(part["results"])
            loads.append(part["load_average_start"][0])
            seconds += part["seconds"]
    text = markdown(results, (max(loads or [0.0]),), seconds)
    (RESULTS / "stored_gate_sliding.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
