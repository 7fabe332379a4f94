"""The stored gate's trace verdict on real recorded trace counts: the exact path, the rate path, confirmed.

The stored-gate collections (``benchmarks/results/stored_gate_runs*.json``) hold no steady-state trace
(4,092 measurements, every ``traces_steady`` 0), so they exercise neither path. The retrace validation
(``benchmarks/retrace_validation.py``, ``benchmarks/results/retrace_validation.json``) recorded real Keras
and ``tf.function`` workloads in 10 fresh processes: healthy loops (0 steady traces) and anti-patterns that
retrace on every call. Its counts are judged here through the shipped ``gates.stored.judge``:

* A/A exact: each healthy test's process ``i`` as the baseline (0 traces), every other process ``j`` as the run
  and ``j + 1`` (cyclically) as the fresh process that confirms it;
* A/A rate: the same for each anti-pattern against its own earlier process (a baseline that retraced too;
  processes ran different iteration and round counts);
* planted: a code change that starts retracing, each anti-pattern's process ``j`` (confirmed by ``j + 1``)
  against each healthy test's process ``i`` (0 traces), renamed to the healthy test's id.

    .venv/bin/python benchmarks/stored_gate_traces.py

Writes ``benchmarks/results/stored_gate_traces.json`` and prints a Markdown table.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_tfperf.gates.stored import judge  # noqa: E402
from pytest_tfperf.gates.verdict import Tolerances  # noqa: E402
from pytest_tfperf.model import Measurement, Timings  # noqa: E402

RESULTS = HERE / "results"


def rebuild(test_id: str, figures: dict[str, Any]) -> Measurement:
    """A measurement with the recorded iterations, rounds, steady traces and trace counting (timings flat)."""
    iterations, rounds = int(figures["iterations"]), max(1, int(figures["rounds"]))
    sizes = [iterations // rounds + (1 if r < iterations % rounds else 0) for r in range(rounds)]
    sizes = [s for s in sizes if s > 0]
    return Measurement(test_id=test_id, mode="call",
                       timings=Timings((1_000_000,) * sum(sizes), tuple(sizes), 1.0, 1_000_000), memory=(),
                       traces_first_call=figures["traces_first_call"], traces_steady=figures["traces_steady"],
                       environment_id="", trace_counting=figures["trace_counting"])


def verdict(test_id: str, current: dict[str, Any], confirmation: dict[str, Any],
            baseline: dict[str, Any]) -> dict[str, Any]:
    base = rebuild(test_id, baseline)
    first = judge(rebuild(test_id, current), base, Tolerances())
    traces = first.metric("traces_steady")
    asked = first.needs_confirmation and traces is not None and str(traces.status) == "regressed"
    if first.needs_confirmation:
        final = judge(rebuild(test_id, current), base, Tolerances(), confirmation=rebuild(test_id, confirmation))
        traces = final.metric("traces_steady")
    assert traces is not None
    return {"first": "regressed" if asked else str(first.metric("traces_steady").status),  # type: ignore[union-attr]
            "final": str(traces.status), "message": traces.message}


def main() -> int:
    data = json.loads((RESULTS / "retrace_validation.json").read_text())
    processes = [p["tests"] for p in data["processes"] if p.get("tests")]
    n = len(processes)
    tests = sorted(processes[0])
    healthy = [t for t in tests if all(p[t]["traces_steady"] == 0 for p in processes if t in p)]
    anti = [t for t in tests if t not in healthy]
    rows: list[dict[str, Any]] = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            k = (j + 1) % n if (j + 1) % n != i else (j + 2) % n
            for t in tests:
                if not all(t in processes[x] for x in (i, j, k)):
                    continue
                kind = "A/A exact" if t in healthy else "A/A rate"
                rows.append({"kind": kind, "test": t, "baseline": i, "run": j, "confirmation": k,
                             **verdict(t, processes[j][t], processes[k][t], processes[i][t])})
            for h in healthy:
                for a in anti:
                    if all(h in processes[x] for x in (i,)) and all(a in processes[x] for x in (j, k)):
                        rows.append({"kind": "planted retrace", "test": f"{a} vs {h}", "baseline": i, "run": j,
                                     "confirmation": k,
                                     **verdict(h, processes[j][a], processes[k][a], processes[i][h])})
    summary: dict[str, Any] = {"processes": n, "healthy": healthy, "anti_patterns": anti}
    for kind in ("A/A exact", "A/A rate", "planted retrace"):
        of = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"verdicts": len(of), "first_regressed": sum(r["first"] == "regressed" for r in of),
                         "final": dict(Counter(r["final"] for r in of)),
                         "example": of[0]["message"] if of else ""}
    for r in rows:
        del r["message"]  # one example per kind above: the file stays small
    (RESULTS / "stored_gate_traces.json").write_text(json.dumps({"summary": summary, "verdicts": rows}, indent=1,
                                                                sort_keys=True) + "\n")
    print(f"Trace verdicts of the stored gate on `retrace_validation.json` ({n} processes; "
          f"{len(healthy)} healthy tests, {len(anti)} anti-patterns)\n")
    print("| pairs | verdicts | first process regressed | after the fresh process: regressed | unchanged | improved |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in ("A/A exact", "A/A rate", "planted retrace"):
        s = summary[kind]
        f = s["final"]
        print(f"| {kind} | {s['verdicts']} | {s['first_regressed']} | {f.get('regressed', 0)} | "
              f"{f.get('unchanged', 0)} | {f.get('improved', 0)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
