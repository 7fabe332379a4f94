"""The real-model suite over fresh processes: false warnings, the leak's reading, input-bound spread, trace counts.

Run:   .venv/bin/python benchmarks/real_models.py --processes 10            (full size: several minutes a process)
       .venv/bin/python benchmarks/real_models.py --processes 3 --size small --name real_models_small
Writes benchmarks/results/<name>.json and .md (default name: real_models).

Each process is ``pytest --tfperf benchmarks/test_real_models.py`` (the workloads
of ``validation/real_workloads.py``) with
``TFPERF_REAL_MODELS_OUT`` set, so every test appends its figures as a JSON
line. From them, over all processes:

* false warnings: memory-growth and input-bound warnings on the healthy
  workloads (must be 0);
* the kept-outputs leak's ``memory_growth_bytes_per_iteration`` against 256
  KiB per iteration (must be within 5% in every process);
* the finite pipeline's ``input_bound_fraction`` (epoch restarts reported
  apart) across processes: its spread must stay within +-5 points;
* Keras trace counts: the plugin's warm-up + steady count against the step
  functions' own ``experimental_get_tracing_count()`` and against the number
  of times the model's Python step ran (once per trace of
  ``one_step_on_data``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LEAK_BYTES = 256 * 1024
HEALTHY_FALSE_KINDS = ("memory_growth", "input_bound")


def run_process(index: int, size: str, out_dir: Path, budget: float | None) -> dict[str, Any]:
    out = out_dir / f"process-{index}.jsonl"
    out.unlink(missing_ok=True)
    env = dict(os.environ, TFPERF_REAL_MODELS_OUT=str(out), TFPERF_REAL_MODELS_SIZE=size, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "pytest", "--tfperf", str(HERE / "test_real_models.py"), "-p", "no:cacheprovider",
           "-q", "-rfE"]
    if budget is not None:
        cmd += ["--tfperf-budget", str(budget)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {"index": index, "returncode": proc.returncode, "wall_s": round(wall, 1), "pytest": tail,
            "failures": [line for line in proc.stdout.splitlines() if line.startswith("FAILED")], "rows": rows,
            "load_avg_after": os.getloadavg()[0]}


def summarise(processes: list[dict[str, Any]]) -> dict[str, Any]:
    healthy = [(p["index"], r) for p in processes for r in p["rows"] if r["kind"] == "healthy"]
    false = {k: [{"process": i, "workload": r["workload"], "summary": w["summary"]} for i, r in healthy
                 for w in r["warnings"] if w["kind"] == k] for k in HEALTHY_FALSE_KINDS}
    other = [{"process": i, "workload": r["workload"], "kind": w["kind"], "summary": w["summary"]} for i, r in healthy
             for w in r["warnings"] if w["kind"] not in HEALTHY_FALSE_KINDS]
    leak = [r["extra_metrics"].get("memory_growth_bytes_per_iteration", 0.0) for p in processes for r in p["rows"]
            if r["workload"] == "kept_outputs_leak"]
    finite = [r["extra_metrics"].get("input_bound_fraction") for _, r in healthy
              if r["workload"] == "pipeline_finite_cnn_step"]
    finite = [f for f in finite if f is not None]
    restart = [r["extra_metrics"].get("epoch_restart_fraction") for _, r in healthy
               if r["workload"] == "pipeline_finite_cnn_step"]
    tp_input = [bool([w for w in r["warnings"] if w["kind"] == "input_bound"]) for p in processes for r in p["rows"]
                if r["workload"] == "unprefetched_pipeline"]
    tp_retrace = [(r["traces_steady"] or 0, r["iterations"]) for p in processes for r in p["rows"]
                  if r["workload"] == "keras_recompile_retracing"]
    # Waits of 5% or more on a prefetching pipeline far faster than its step,
    # told apart as contention (info): without that rule they would have warned.
    contention = [{"process": i, "workload": r["workload"],
                   "input_bound_fraction": r["extra_metrics"].get("input_bound_fraction")}
                  for i, r in healthy for d in r["diagnoses"]
                  if d["kind"] == "input_bound" and d["summary"].startswith("waits for data, but not input-bound")]
    traces = []
    for i, r in healthy:
        if not r.get("step_runs"):
            continue
        plugin = (r["traces_first_call"] or 0) + (r["traces_steady"] or 0)
        own = sum(r["own_trace_counts"].values())
        traces.append({"process": i, "workload": r["workload"], "plugin": plugin, "own": own,
                       "one_step_on_data": r["own_trace_counts"].get("one_step_on_data", 0),
                       "python_step_runs": sum(r["step_runs"].values()), "equal": plugin == own})
    return {
        "processes": len(processes),
        "healthy_measurements": len(healthy),
        "false_memory_growth_warnings": len(false["memory_growth"]),
        "false_input_bound_warnings": len(false["input_bound"]),
        "false_warnings_detail": false,
        "other_warnings_on_healthy": other,
        "leak_bytes_per_iteration": leak,
        "leak_within_5_percent": all(abs(v - LEAK_BYTES) <= 0.05 * LEAK_BYTES for v in leak) and bool(leak),
        "finite_pipeline_input_bound_fraction": finite,
        "finite_pipeline_spread_points": (100 * (max(finite) - min(finite))) if finite else None,
        "finite_pipeline_within_5_points_of_median": (all(abs(f - statistics.median(finite)) <= 0.05 for f in finite)
                                                       if finite else None),
        "finite_pipeline_epoch_restart_fraction": restart,
        "contention_not_warned": contention,
        "unprefetched_pipeline_warned": tp_input,
        "keras_recompile_steady_traces_per_iteration": [t / n if n else None for t, n in tp_retrace],
        "keras_traces": traces,
        "keras_traces_all_equal": all(t["equal"] for t in traces) and bool(traces),
        "failed_tests": [f for p in processes for f in p["failures"]],
        "wall_s": [p["wall_s"] for p in processes],
    }


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    s = summary
    kib = [f"{v / 1024:.1f}" for v in s["leak_bytes_per_iteration"]]
    finite = [f"{100 * f:.1f}" for f in s["finite_pipeline_input_bound_fraction"]]
    told_apart = s.get("contention_not_warned", [])
    contention = f"{len(told_apart)}" + (": " + ", ".join(
        f"{100 * c['input_bound_fraction']:.1f}% ({c['workload']}, process {c['process']})" for c in told_apart)
        if told_apart else "")
    lines = [
        f"# Real-model suite over {s['processes']} fresh processes ({meta['size']} size)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; machine: {meta['machine']}; load average before/after: {meta['load']}",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| healthy measurements | {s['healthy_measurements']} | |",
        f"| false memory-growth warnings | {s['false_memory_growth_warnings']} | 0 |",
        f"| false input-bound warnings | {s['false_input_bound_warnings']} | 0 |",
        f"| other warnings on healthy workloads | {len(s['other_warnings_on_healthy'])} | 0 |",
        f"| kept-outputs leak, KiB/iteration | {', '.join(kib)} | 256 +-5% "
        f"({'all within' if s['leak_within_5_percent'] else 'NOT all within'}) |",
        f"| finite pipeline input-bound %, restarts apart | {', '.join(finite)} | within +-5 points of the median "
        f"({'yes' if s['finite_pipeline_within_5_points_of_median'] else 'NO'}; max - min "
        f"{s['finite_pipeline_spread_points'] or 0:.1f} points) |",
        f"| pipeline waits >= 5% told apart as contention (info, not warned) | {contention} | |",
        f"| unprefetched pipeline warned input-bound | {sum(s['unprefetched_pipeline_warned'])} of "
        f"{len(s['unprefetched_pipeline_warned'])} | all |",
        f"| Keras recompile: steady traces per iteration | "
        f"{', '.join(f'{v:.2f}' for v in s['keras_recompile_steady_traces_per_iteration'] if v is not None)} | >= 1 |",
        f"| Keras trace counts equal to the step functions' own | "
        f"{sum(t['equal'] for t in s['keras_traces'])} of {len(s['keras_traces'])} | all |",
        f"| failed tests | {len(s['failed_tests'])} | 0 |",
        f"| wall time per process, s | {', '.join(str(w) for w in s['wall_s'])} | |",
        "",
        "## Keras trace counts (plugin warm-up+steady / step functions' own count / one_step_on_data / Python step runs)",
        "",
    ]
    seen: dict[str, set[str]] = {}
    for t in s["keras_traces"]:
        seen.setdefault(t["workload"], set()).add(
            f"{t['plugin']} / {t['own']} / {t['one_step_on_data']} / {t['python_step_runs']}")
    lines += [f"- {w}: {', '.join(sorted(v))}" for w, v in seen.items()]
    if s["other_warnings_on_healthy"] or s["false_warnings_detail"]["memory_growth"] or \
            s["false_warnings_detail"]["input_bound"]:
        lines += ["", "## Warnings on healthy workloads", ""]
        for k, items in s["false_warnings_detail"].items():
            lines += [f"- process {x['process']}, {x['workload']} ({k}): {x['summary']}" for x in items]
        lines += [f"- process {x['process']}, {x['workload']} ({x['kind']}): {x['summary']}"
                  for x in s["other_warnings_on_healthy"]]
    if s["failed_tests"]:
        lines += ["", "## Failed tests", ""] + [f"- {f}" for f in s["failed_tests"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--budget", type=float, default=None, help="--tfperf-budget for every test (default: the plugin's)")
    ap.add_argument("--name", default="real_models")
    ap.add_argument("--from-json", action="store_true",
                    help="rebuild <name>.md (and the summary) from <name>.json, measuring nothing")
    args = ap.parse_args()
    results = HERE / "results"
    if args.from_json:
        data = json.loads((results / f"{args.name}.json").read_text())
        data["summary"] = summarise(data["processes"])
        (results / f"{args.name}.json").write_text(json.dumps(data, indent=1) + "\n")
        (results / f"{args.name}.md").write_text(markdown(data["summary"], data["meta"]))
        print((results / f"{args.name}.md").read_text())
        return 0
    work = Path(tempfile.mkdtemp(prefix=f"{args.name}-"))
    load_before = os.getloadavg()[0]
    processes = []
    for i in range(args.processes):
        p = run_process(i, args.size, work, args.budget)
        processes.append(p)
        print(f"process {i}: {p['pytest']} ({p['wall_s']} s, load {p['load_avg_after']:.1f})", flush=True)
        # Written after every process, so that a run cut short still leaves its figures.
        summary = summarise(processes)
        meta = {"size": args.size, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": f"{os.cpu_count()} CPUs", "load": f"{load_before:.1f}/{os.getloadavg()[0]:.1f}",
                "command": "python benchmarks/real_models.py " + " ".join(sys.argv[1:])}
        (results / f"{args.name}.json").write_text(json.dumps({"meta": meta, "summary": summary,
                                                               "processes": processes}, indent=1) + "\n")
        (results / f"{args.name}.md").write_text(markdown(summary, meta))
    print((results / f"{args.name}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
