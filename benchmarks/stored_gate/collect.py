"""Collect real ``pytest --tfperf`` processes of the stored-gate validation suite (raw results documents).

    .venv/bin/python benchmarks/stored_gate/collect.py --processes 46 --streams 2 --out /tmp/stored-gate-runs

Each process runs ``suite.py`` (copied as ``test_suite.py`` into a scratch directory) with the plugin's
defaults and ``--tfperf-json``; nothing else. ``--streams 2`` runs two processes at a time (each test's
measurement budget is wall-clock time, so two streams collect twice as fast, at the price of the two
processes sharing the 2 cores: noisier, which makes the A/A test harder, not easier). The verdicts are made
afterwards by ``benchmarks/stored_gate_study.py`` with the plugin's own decision code.

``--alone`` follows every suite process, at once, with fresh processes that each measure a few tests
alone, as the plugin's confirmation does (a fresh ``pytest`` process of the same tree started right after
the first verdict): ``alone-NNN-K.json``. The study reads them as the confirmation of that process's
verdicts and measures how far the two runs are correlated (``--confirm alone``).
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


# What the --alone processes measure, each group in one fresh process: the matmul work with its planted
# slowdowns (one test's variants measured together, as a tfperf.compare() test is confirmed), and three
# unchanged tests of other kinds (Keras training, a tf.data pipeline, a Keras CNN).
ALONE_GROUPS = (
    ["test_suite.py::test_work"],
    ["test_suite.py::test_keras_mlp_train[32]", "test_suite.py::test_data_map_batch",
     "test_suite.py::test_keras_cnn_train"],
)


def _pytest(work: Path, args: list[str], result: Path, log: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "pytest", "--tfperf", "-p", "no:cacheprovider", "-q",
                           *args, f"--tfperf-json={result}"], cwd=work, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    log.write_text(done.stdout[-20000:])
    return done.returncode


def run_one(index: int, out: Path, scratch: Path, alone: bool = False) -> dict[str, object]:
    work = scratch / f"p{index:03d}"
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "suite.py", work / "test_suite.py")
    result = out / f"run-{index:03d}.json"
    start = time.time()
    returncode = _pytest(work, ["test_suite.py"], result, out / f"run-{index:03d}.log")
    end = time.time()
    record: dict[str, object] = {"index": index, "start": start, "end": end, "returncode": returncode,
                                 "load_end": os.getloadavg()[0], "result": result.name if result.exists() else None}
    if alone:
        done = []
        for k, group in enumerate(ALONE_GROUPS):
            path = out / f"alone-{index:03d}-{k}.json"
            t0 = time.time()
            rc = _pytest(work, group, path, out / f"alone-{index:03d}-{k}.log")
            done.append({"group": k, "start": t0, "end": time.time(), "returncode": rc,
                         "result": path.name if path.exists() else None})
        record["alone"] = done
    shutil.rmtree(work, ignore_errors=True)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=46)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--first", type=int, default=0, help="index of the first process (to extend a collection)")
    parser.add_argument("--alone", action="store_true",
                        help="follow each suite process with fresh processes measuring a few tests alone")
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
            record = run_one(index, args.out, scratch, args.alone)
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
