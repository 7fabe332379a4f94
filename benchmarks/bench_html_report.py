"""How long ``tfperf-report`` takes, and how big its page is, for the whole catalog with a long history.

    PYTHONPATH=$PWD python benchmarks/bench_html_report.py [--results CATALOG.json] [--repeat 3]

The input is the catalog's results (a ``--tfperf-json`` file of
``pytest --tfperf benchmarks/``, or, without ``--results``, 25 synthetic tests
shaped like it: 5 rounds, TF allocator and RSS peaks, 12 comparisons), a
baseline for every test and a history of 50 runs per test (each run's figures
the measured ones times log-normal noise of 3%, a 25% slowdown from run 30 on
for every fifth test, the baseline refreshed at run 40). It then times the
real command, ``python -m pytest_tfperf.cli.report_cli``, in fresh processes
(interpreter, imports, reading, drawing and writing), and writes the wall and
CPU times and the page's size to ``benchmarks/results/html_report.json``.
Every fifth test also carries a ``--tfperf-explain`` explanation (5 causes, the
common factor, the remainder, both tensorboard commands), as a failed run does.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_tfperf.storage.baseline_store import BaselineStore
from pytest_tfperf.storage.history_csv import COLUMNS, HISTORY_FILE_NAME, history_rows
from pytest_tfperf.model import (
    Environment,
    Measurement,
    MemoryPeak,
    MemorySource,
    Timings,
)
from pytest_tfperf.storage.results_json import load_results, results_to_dict, write_results

RUNS = 50
SLOW_FROM = 30
REFRESH_AT = 40
START = datetime(2026, 9, 1, 6, 0, tzinfo=timezone.utc)
ENV = Environment(hard=(("cpu_model", "synthetic 2-core"), ("tensorflow", "2.21.0"), ("python", "cpython 3.11")))


def synthetic_catalog(rng: random.Random) -> tuple[Environment, list[Measurement], list[dict[str, object]]]:
    scenarios = ["allocation_in_loop", "host_to_device", "input_pipeline", "vectorised_preprocessing",
                 "session_churn", "oversized_batch", "numerical_instability", "thread_starvation", "retracing",
                 "eager_memory_growth", "mixed_precision", "device_placement"]
    measurements, effects = [], []
    for n, scenario in enumerate(scenarios):
        variants = ["anti", "fix", "anti_default"] if n == 2 else ["anti", "fix"]
        for variant in variants:
            test_id = f"benchmarks/test_catalog.py::test_fix_beats_anti_pattern[{scenario}-{variant}]"
            speed = rng.uniform(10, 5000) * (3 if variant == "fix" else 1)
            rounds = tuple(tuple(max(1, int(rng.gauss(1e9 / speed, 1e8 / speed))) for _ in range(20))
                           for _ in range(5))
            tf_peaks = tuple(int(rng.uniform(20, 30) * 2**20) for _ in range(5))
            rss = tuple(int(rng.uniform(700, 760) * 2**20) for _ in range(5))
            measurements.append(Measurement(
                test_id=test_id, mode="call",
                timings=Timings(tuple(s for r in rounds for s in r), (20,) * 5, 32.0, int(rng.uniform(1e8, 1e9))),
                memory=(MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", max(tf_peaks), 0, tf_peaks),
                        MemoryPeak(MemorySource.RSS_HWM, "host", max(rss), rss[0], rss)),
                traces_first_call=1, traces_steady=0, environment_id=ENV.fingerprint))
        effects.append({"scenario": scenario, "anti": "anti", "fix": "fix", "metric": "throughput",
                        "value": rng.uniform(1.1, 80), "spread": [1.0, 90.0], "min_effect": 1.2, "gated": True,
                        "passed": True, "anti_test": measurements[-2].test_id, "fix_test": measurements[-1].test_id})
    return ENV, measurements, effects


def write_history(directory: Path, measurements: list[Measurement], environment: Environment,
                  rng: random.Random) -> None:
    rows = []
    for run in range(RUNS):
        when = (START + timedelta(days=run)).strftime("%Y-%m-%dT%H:%M:%SZ")
        commit = f"{rng.getrandbits(160):040x}"
        for row in history_rows(measurements, environment, f"run-{run:03d}", recorded_at=when, git_commit=commit,
                                version="0.1.0"):
            slow = 1.25 if run >= SLOW_FROM and hash(row.test_id) % 5 == 0 else 1.0
            factor = rng.lognormvariate(0, 0.03)
            value = row.value / slow * factor if row.metric == "throughput_per_s" else row.value * factor
            rows.append(row.as_tuple()[:4] + (repr(value),) + row.as_tuple()[5:])
    with open(directory / HISTORY_FILE_NAME, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(rows)


def explanation(n: int) -> dict[str, object]:
    """An explanation as ``attribution_dict`` writes it: five causes, the common factor and the remainder."""
    causes = [{"key": f"layer:block_{n}_{i}", "kind": "layer", "label": f"block_{n}_{i} (Conv2D family)",
               "how": "grew" if i else "appeared", "delta_ms": 4.0 / (i + 1), "noise_ms": 0.3} for i in range(5)]
    listed = sum(float(c["delta_ms"]) for c in causes)  # type: ignore[arg-type]
    return {"measured_ms": 12.0, "profiled_ms": 13.0, "profiled_noise_ms": 1.5, "common_factor": 1.05,
            "common_factor_ms": 1.0, "causes": causes, "unlisted": [], "remainder_ms": 12.0 - listed - 1.0,
            "within_noise": 40, "input_wait": None, "paced_by": None, "pipeline": [],
            "base_logdir": f".tfperf/profiles/test_{n}/partner", "current_logdir": f".tfperf/profiles/test_{n}/this",
            "lines": [f"where the time went: +12.0 ms/iteration measured (line {i})" for i in range(8)]}


def with_explanations(results: Path, out: Path) -> Path:
    document = json.loads(results.read_text(encoding="utf-8"))
    for n, test_id in enumerate(sorted(document["tests"])):
        if n % 5 == 0:
            document["tests"][test_id]["explanation"] = explanation(n)
    out.write_text(json.dumps(document), encoding="utf-8")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, help="a --tfperf-json file of the catalog (default: synthetic)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "html_report.json")
    parser.add_argument("--keep", type=Path, help="also copy the page here")
    args = parser.parse_args()
    rng = random.Random(12)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.results:
            doc = load_results(args.results)
            environment, measurements = doc.environment, list(doc.measurements)
            results = args.results
        else:
            environment, measurements, effects = synthetic_catalog(rng)
            results = write_results(work / "results.json", results_to_dict(environment, measurements, effects=effects))
        results = with_explanations(Path(results), work / "results-explained.json")
        baselines = work / "baselines"
        BaselineStore(baselines).save(measurements, environment,
                                      recorded_at=START + timedelta(days=REFRESH_AT, seconds=20))
        write_history(baselines, measurements, environment, rng)
        page = work / "report.html"
        command = [sys.executable, "-m", "pytest_tfperf.cli.report_cli", str(results), "--baseline-dir",
                   str(baselines), "-o", str(page)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        walls, cpus = [], []
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        size = page.stat().st_size
        text = page.read_text(encoding="utf-8")
        if args.keep:
            args.keep.write_text(text, encoding="utf-8")
        report = {
            "command": " ".join(["python", "-m", "pytest_tfperf.cli.report_cli", "RESULTS", "--baseline-dir", "DIR",
                                 "-o", "report.html"]),
            "input": str(args.results) if args.results else "synthetic catalog",
            "tests": len(measurements), "history_runs_per_test": RUNS,
            "charts": text.count("<svg"), "explained_tests": text.count('data-explain="time"'), "page_bytes": size,
            "wall_s": [round(w, 3) for w in walls], "wall_s_median": round(statistics.median(walls), 3),
            "cpu_s": [round(c, 3) for c in cpus], "cpu_s_median": round(statistics.median(cpus), 3),
            "load_average_1min": round(os.getloadavg()[0], 2), "cores": os.cpu_count(),
            "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
