"""Collect real ``pytest --tfperf`` processes of the stored-gate validation suite (raw results documents).

    .venv/bin/python benchmarks/stored_gate/collect.py --processes 46 --streams 2 --out /tmp/stored-gate-runs

Each process runs ``suite.py`` (copied as ``test_suite.py`` into a scratch directory) with the plugin's
defaults and ``--tfperf-json``; nothing else. ``--streams 2`` runs two processes at a time (each test's
measurement budget is wall-clock time, so two streams collect twice as fast, at the price of the two
processes sharing the 2 cores: noisier, which makes the A/A test harder, not easier). The verdicts are made
afterwards by ``benchmarks/stored_gate_study.py`` with the plugin's own decision code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ.get("TFPERF_CODE", HERE.parent.parent))


def run_one(index: int, out: Path, scratch: Path) -> dict[str, object]:
    work = scratch / f"p{index:03d}"
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "suite.py", work / "test_suite.py")
    result = out / f"run-{index:03d}.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "pytest", "--tfperf", "-p", "no:cacheprovider", "-q",
                           "test_suite.py", f"--tfperf-json={result}"], cwd=work, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    end = time.time()
    (out / f"run-{index:03d}.log").write_text(done.stdout[-20000:])
    shutil.rmtree(work, ignore_errors=True)
    return {"index": index, "start": start, "end": end, "returncode": done.returncode,
            "load_end": os.getloadavg()[0], "result": result.name if result.exists() else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=46)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--first", type=int, default=0, help="index of the first process (to extend a collection)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = args.out / "scratch"
    indices = list(range(args.first, args.first + args.processes))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not indices:
                    return
                index = indices.pop(0)
            record = run_one(index, args.out, scratch)
            with lock:
                with open(args.out / "processes.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(record) + "\n")
                print(json.dumps(record), flush=True)

    threads = [threading.Thread(target=worker) for _ in range(args.streams)]
    for t in threads:
        t.start()
        time.sleep(20)  # stagger the streams: their slow first calls do not coincide
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
