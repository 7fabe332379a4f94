"""Validation of the stored-baseline gate: false alarms (A/A) and catch rates, from real pytest --tfperf processes.

Two steps:

1. Collect. The two committed collections:

       # design data (52 processes, one at a time, pinned to one core while other jobs used the other)
       TF_CPU_ALLOCATOR_USE_BFC=true taskset -c 0 .venv/bin/python benchmarks/stored_gate/collect.py \\
           --processes 52 --streams 1 --out /tmp/stored-gate-runs
       # held-out data (50 processes, two at a time sharing both cores: about 1 minute a process)
       TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python benchmarks/stored_gate/collect.py \\
           --processes 50 --streams 2 --out /tmp/stored-gate-heldout

   Each process is ``pytest --tfperf --tfperf-json=...`` over ``benchmarks/stored_gate/suite.py``
   with the plugin's defaults (2 s of measurement in 5 rounds per test): 25 unchanged tests of real
   TensorFlow work (tf.function math, tf.data pipelines, Keras 3 models trained with train_on_batch,
   MobileNetV2 at 64 px among them), the same matmul work at 1.11x, 1.25x, 1.54x, 2x and three times
   3x the time per item, and a gather that allocates 10% more TF memory per call.

2. Judge (seconds):

       .venv/bin/python benchmarks/stored_gate_study.py --runs /tmp/stored-gate-runs
       .venv/bin/python benchmarks/stored_gate_study.py --runs /tmp/stored-gate-heldout \\
           --data stored_gate_runs_heldout.json --name stored_gate_heldout

   writes the compact figures of every process (what the gate reads) to ``benchmarks/results/`` under
   ``--data`` and the verdicts to ``--name``.json and .md. With ``--from-summary`` it judges a committed
   compact file again, without the raw runs; ``--history 5`` counts the 5 processes before each
   baseline as recorded runs, ``--baseline-runs N`` varies the refresh's run count.

How a verdict is made: process ``p``'s run of a test is judged by the plugin's own ``gates.stored.judge``
against a baseline of the ``BASELINE_RUNS`` processes before it (a refresh measured just before,
one run per process, as ``--tfperf-update`` records them), with no recorded history (the worst
case: the fewest degrees of freedom). When that first verdict asks for confirmation, process
``p + 1``'s run of the same test is the fresh process that confirms or clears it, as the plugin's
confirmation process would be. A changed variant (``test_work[x3-a]``) is judged against the
unchanged test's baseline (``test_work[x1]``), as a code change would be. Verdicts of one process
share its state, so the number of processes is given beside the number of verdicts.
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

from pytest_tfperf.gates.stored import judge
from pytest_tfperf.gates.verdict import Tolerances
from pytest_tfperf.config import DEFAULT_RUNS
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.gates.baseline_runs import BaselineRuns
from pytest_tfperf.storage.runs import RECORD, REFRESH, summarize  # noqa: E402
from pytest_tfperf.storage.fields import Field
from pytest_tfperf.storage.serialization import memory_peak_from_dict, memory_peak_to_dict
from validation.intervals import wilson_interval
from pytest_tfperf.gates.stored_rule import MachineFloor, log_spread, machine_floor

BASELINE_RUNS = DEFAULT_RUNS  # what --tfperf-update records by default (--baseline-runs to vary it)
RESULTS = HERE / "results"
PREFIX = "test_suite.py::"
CHANGED = {  # variant -> (the unchanged test it is judged against, nominal slowdown label)
    "test_work[x1.11]": ("test_work[x1]", "-10%"),
    "test_work[x1.25]": ("test_work[x1]", "-20%"),
    "test_work[x1.54]": ("test_work[x1]", "-35%"),
    "test_work[x2]": ("test_work[x1]", "2x"),
    "test_work[x3-a]": ("test_work[x1]", "3x"),
    "test_work[x3-b]": ("test_work[x1]", "3x"),
    "test_work[x3-c]": ("test_work[x1]", "3x"),
}
MEMORY_CHANGE = ("test_alloc[plus10]", "test_alloc[base]")
KERAS = ("keras", "mobilenet")


# -- compact figures of each process ------------------------------------------------------------


def compact(measurement: Measurement) -> dict[str, Any]:
    """What the gate reads of a run: throughput (from all samples), iterations, traces, memory peaks."""
    return {
        "throughput_per_s": measurement.throughput_per_s,
        "items_per_iteration": measurement.timings.items_per_iteration,
        "iterations": measurement.timings.iterations,
        "traces_steady": measurement.traces_steady,
        "memory": [memory_peak_to_dict(p) for p in measurement.memory],
    }


def rebuild(test_id: str, figures: dict[str, Any]) -> Measurement:
    """A measurement with the run's throughput, iteration count, traces and memory peaks."""
    items = float(figures["items_per_iteration"])
    ns = max(1, round(items * 1e9 / figures["throughput_per_s"]))
    iterations = int(figures["iterations"])
    where = Field("stored_gate_runs.json", test_id)
    return Measurement(
        test_id=test_id, mode="call",
        timings=Timings((ns,) * iterations if iterations <= 50 else (ns,) * 50, (min(iterations, 50),), items, ns),
        memory=tuple(memory_peak_from_dict(p, where) for p in figures["memory"]),
        traces_first_call=None, traces_steady=figures["traces_steady"], environment_id="",
    )


def collect_summary(runs_dir: Path) -> dict[str, Any]:
    from pytest_tfperf.storage.results_json import load_results

    records = [json.loads(line) for line in (runs_dir / "processes.jsonl").read_text().splitlines() if line]
    records.sort(key=lambda r: r["start"])
    processes = []
    for record in records:
        if not record.get("result"):
            continue
        document = load_results(runs_dir / record["result"])
        processes.append({
            "index": record["index"], "start": record["start"], "end": record["end"],
            "tests": {m.test_id.removeprefix(PREFIX): compact(m) for m in document.measurements},
        })
    return {"processes": processes, "baseline_runs": BASELINE_RUNS}


# -- judging ------------------------------------------------------------------------------------------


def _judge(test: str, current: dict[str, Any], confirmation: dict[str, Any] | None,
           baseline: list[dict[str, Any]], machine: MachineFloor,
           history: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    base_measurements = [rebuild(test, b) for b in baseline]
    recorded = tuple(summarize(rebuild(test, h), run_id=f"h{i}", recorded_at="", kind=RECORD)
                     for i, h in enumerate(history))
    runs = BaselineRuns(tuple(summarize(m, run_id=str(i), recorded_at="", kind=REFRESH)
                              for i, m in enumerate(base_measurements)), history=recorded, machine=machine)
    cur = rebuild(test, current)
    tol = Tolerances()
    verdict = judge(cur, base_measurements[-1], tol, runs=runs)
    confirmed = False
    if verdict.needs_confirmation and confirmation is not None:
        verdict = judge(cur, base_measurements[-1], tol, runs=runs, confirmation=rebuild(test, confirmation))
        confirmed = True
    throughput = verdict.metric("throughput")
    memory = {m.metric: str(m.status) for m in verdict.metrics if m.unit == "bytes"}
    return {
        "throughput": str(throughput.status) if throughput else None,
        "change": throughput.relative_change if throughput else None,
        "limit": throughput.minimum_detectable_change if throughput else None,
        "memory": memory,
        "confirmation_used": confirmed,
        "failed": verdict.failed,
    }


CALIBRATION = "test_work[x1]"  # the same computation as pytest_tfperf.measuring.calibration.workload()


def window_floor(window: Sequence[dict[str, Any]], suite: Sequence[str]) -> MachineFloor:
    """``stored_rule.machine_floor`` of a refresh window: the suite's tests' spreads and the calibration's runs."""
    spreads = []
    for t in suite:
        values = [w["tests"][t]["throughput_per_s"] for w in window if t in w["tests"]]
        spreads.append((log_spread(values), float(len(values) - 1)))
    return machine_floor(spreads, [w["tests"][CALIBRATION]["throughput_per_s"] for w in window
                                   if CALIBRATION in w["tests"]])


def judge_all(summary: dict[str, Any], history: int = 0) -> list[dict[str, Any]]:
    """Every verdict; with ``history``, the ``history`` processes before each baseline count as runs
    recorded by CI on main (``--tfperf-record``)."""
    processes = summary["processes"]
    n_base = summary["baseline_runs"]
    rows = []
    for p in range(n_base + history, len(processes) - 1):
        proc, after = processes[p], processes[p + 1]
        window = processes[p - n_base:p]
        # As the session does: the machine's floor from every test's baseline runs (here, the window's) and
        # the calibration workload's (the plugin's is the computation of test_work[x1], measured in each process).
        machine = window_floor(window, list(window[-1]["tests"]))
        for test, figures in proc["tests"].items():
            reference, label = CHANGED.get(test, (test, "A/A"))
            if test == MEMORY_CHANGE[0]:
                reference, label = MEMORY_CHANGE[1], "memory +10%"
            baseline = [w["tests"][reference] for w in window if reference in w["tests"]]
            if len(baseline) < n_base:
                continue
            recorded = [w["tests"][reference] for w in processes[p - n_base - history:p - n_base]
                        if reference in w["tests"]]
            row = _judge(PREFIX + reference, figures, after["tests"].get(test), baseline, machine, recorded)
            row.update(process=proc["index"], test=test, kind=label)
            rows.append(row)
    return rows


def realised(summary: dict[str, Any]) -> dict[str, float]:
    """Median over processes of each changed variant's throughput relative to x1 in the same process."""
    out = {}
    for test, (reference, _) in CHANGED.items():
        ratios = [p["tests"][test]["throughput_per_s"] / p["tests"][reference]["throughput_per_s"]
                  for p in summary["processes"] if test in p["tests"] and reference in p["tests"]]
        out[test] = statistics.median(ratios) - 1.0 if ratios else math.nan
    return out


def _rate(hits: int, n: int) -> dict[str, Any]:
    low, high = wilson_interval(hits, n) if n else (math.nan, math.nan)
    return {"hits": hits, "n": n, "rate": hits / n if n else math.nan, "ci95": [low, high]}


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    finite = sorted(v for v in values if v is not None and math.isfinite(v))
    if not finite:
        return {}

    def q(x: float) -> float:
        return finite[min(len(finite) - 1, round(x * (len(finite) - 1)))]

    return {"min": finite[0], "p05": q(0.05), "median": q(0.5), "p95": q(0.95), "max": finite[-1],
            "infinite": sum(1 for v in values if v is None or not math.isfinite(v))}


def summarise(rows: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    aa = [r for r in rows if r["kind"] == "A/A"]
    out: dict[str, Any] = {
        "processes_collected": len(summary["processes"]),
        "processes_judged": len({r["process"] for r in rows}),
        "aa_throughput_false_alarms": _rate(sum(r["throughput"] == "regressed" for r in aa), len(aa)),
        "aa_any_failure": _rate(sum(r["failed"] for r in aa), len(aa)),
        "aa_first_verdicts_needing_confirmation": sum(r["confirmation_used"] for r in aa),
        "aa_detection_limits": _quantiles([r["limit"] for r in aa]),
        "aa_changes": _quantiles([r["change"] for r in aa]),
        "realised_slowdowns": realised(summary),
    }
    for label in ("3x", "2x", "-35%", "-20%", "-10%"):
        hits = [r for r in rows if r["kind"] == label]
        out[f"caught_{label}"] = _rate(sum(r["throughput"] == "regressed" for r in hits), len(hits))
        out[f"limits_{label}"] = _quantiles([r["limit"] for r in hits])
    # The promise each verdict makes: a change at least as large as its stated limit is caught (95% power).
    changed = [r for r in rows if r["kind"] in ("3x", "2x", "-35%", "-20%", "-10%")
               and r["limit"] is not None and math.isfinite(r["limit"]) and -r["change"] >= r["limit"]]
    out["caught_beyond_stated_limit"] = _rate(sum(r["throughput"] == "regressed" for r in changed), len(changed))
    keras = [r for r in aa if any(k in r["test"] for k in KERAS)]
    mem_verdicts = [(r, metric, status) for r in keras for metric, status in r["memory"].items()]
    out["aa_memory_keras"] = _rate(sum(status == "regressed" for _, _, status in mem_verdicts), len(mem_verdicts))
    all_mem = [(r, s) for r in aa for s in r["memory"].values()]
    out["aa_memory_all"] = _rate(sum(s == "regressed" for _, s in all_mem), len(all_mem))
    plus = [r for r in rows if r["kind"] == "memory +10%"]
    out["caught_memory_plus10_tf_allocator"] = _rate(
        sum(r["memory"].get("peak_tf_allocator[CPU:0]") == "regressed" for r in plus), len(plus))
    return out


def _pct(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.1%}"


def _limit(x: float) -> str:
    from pytest_tfperf.gates.verdict import slowdown_text

    return "n/a" if x is None else slowdown_text(x)


def markdown(s: dict[str, Any]) -> str:
    def rate(r: dict[str, Any]) -> str:
        return f"{r['hits']} of {r['n']} ({_pct(r['rate'])}, 95% CI {_pct(r['ci95'][0])}-{_pct(r['ci95'][1])})"

    lim = s["aa_detection_limits"]
    real = s["realised_slowdowns"]
    lines = [
        "# Stored-baseline gate: validation through real pytest --tfperf processes",
        "",
        "Reproduce: see the docstring of `benchmarks/stored_gate_study.py` (collect, then judge).",
        f"Data: `benchmarks/results/{s['data']}`.",
        (f"{s['processes_collected']} processes collected, {s['processes_judged']} judged (each against a baseline "
         f"of the {s['baseline_runs']} processes before it, confirmed by the process after it"
         + (f"; the {s['history_runs']} processes before the baseline count as recorded runs" if s.get("history_runs")
            else "; no recorded history") + ")."),
        "",
        "| what | result |",
        "|---|---|",
        f"| A/A throughput false alarms | {rate(s['aa_throughput_false_alarms'])} |",
        f"| A/A tests failed for any reason | {rate(s['aa_any_failure'])} |",
        f"| A/A first verdicts that needed a fresh process | {s['aa_first_verdicts_needing_confirmation']} |",
        f"| 3x slowdown caught (realised {_pct(real.get('test_work[x3-a]', math.nan))}) | {rate(s['caught_3x'])} |",
        f"| 2x caught (realised {_pct(real.get('test_work[x2]', math.nan))}) | {rate(s['caught_2x'])} |",
        f"| -35% caught (realised {_pct(real.get('test_work[x1.54]', math.nan))}) | {rate(s['caught_-35%'])} |",
        f"| -20% caught (realised {_pct(real.get('test_work[x1.25]', math.nan))}) | {rate(s['caught_-20%'])} |",
        f"| -10% caught (realised {_pct(real.get('test_work[x1.11]', math.nan))}) | {rate(s['caught_-10%'])} |",
        f"| slowdowns at least as large as the limit their verdict stated, caught | "
        f"{rate(s['caught_beyond_stated_limit'])} |",
        f"| A/A memory verdicts of Keras models, false alarms | {rate(s['aa_memory_keras'])} |",
        f"| A/A memory verdicts of all tests, false alarms | {rate(s['aa_memory_all'])} |",
        f"| +10% TF-allocator memory caught | {rate(s['caught_memory_plus10_tf_allocator'])} |",
        "",
        "Stated detection limits of the A/A verdicts (the slowdown each verdict says it catches here): "
        + (f"min {_limit(lim['min'])}, 5th pct {_limit(lim['p05'])}, median {_limit(lim['median'])}, "
           f"95th pct {_limit(lim['p95'])}, max {_limit(lim['max'])}" if lim else "none")
        + (f"; {lim['infinite']} could not judge" if lim and lim.get("infinite") else "") + ".",
        "",
        "A/A changes (run against its baseline's level): "
        + (", ".join(f"{k} {_pct(v)}" for k, v in s["aa_changes"].items() if k != "infinite")
           if s["aa_changes"] else "none") + ".",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, help="directory written by benchmarks/stored_gate/collect.py")
    parser.add_argument("--from-summary", action="store_true", help="judge the committed compact file again")
    parser.add_argument("--name", default="stored_gate")
    parser.add_argument("--history", type=int, default=0,
                        help="also count the N processes before each baseline as recorded runs (--tfperf-record)")
    parser.add_argument("--baseline-runs", type=int, default=BASELINE_RUNS,
                        help=f"processes in each baseline (default {BASELINE_RUNS}, as --tfperf-update)")
    parser.add_argument("--data", default="stored_gate_runs.json",
                        help="the compact file of the collected processes, in benchmarks/results/")
    args = parser.parse_args()
    summary_path = RESULTS / args.data  # the collected processes; --name names the verdicts
    if args.from_summary:
        summary = json.loads(summary_path.read_text())
    elif args.runs is not None:
        summary = collect_summary(args.runs)
        summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    else:
        parser.error("give --runs DIR or --from-summary")
    summary["baseline_runs"] = args.baseline_runs
    rows = judge_all(summary, args.history)
    result = summarise(rows, summary)
    result["history_runs"] = args.history
    result["baseline_runs"] = args.baseline_runs
    result["data"] = args.data
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"summary": result, "verdicts": rows}, indent=1,
                                                          sort_keys=True, default=str) + "\n")
    text = markdown(result)
    (RESULTS / f"{args.name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
