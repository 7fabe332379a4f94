"""The input-bound diagnosis on pipelines nobody tuned for, each with one slow stage: is the right stage named?

Run:   nice -n 15 .venv/bin/python benchmarks/input_diagnosis_cases.py --processes 3
Writes benchmarks/results/input_diagnosis_cases.json (every process's diagnoses) and .md (the table).

Each process is ``pytest --tfperf`` on the test file below (written to a temporary folder with the data it
reads: TFRecord files, text files, PNG images), with ``--tfperf-json``. Every case is a textbook pipeline
with one slow stage feeding a cheap training step; the step waits, the input-bound diagnosis fires, the
plugin profiles the pipeline (after the timed rounds) and names the stage that sets the pace. Per case the
table says whether, in each process, the diagnosis

* named the expected stage (``expect_stage``: a word of the stage as TensorFlow runs it),
* gave the expected remedy (``expect_advice``: words of it), and
* advised nothing TensorFlow already does (``forbid``: a prefetch where ``inject_prefetch`` adds one,
  ``num_parallel_calls`` for a map that already runs in parallel) and nothing for another stage.

A healthy pipeline (cached, parallel, prefetched, a step ten times its cost) must draw no warning.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CASES: dict[str, dict[str, Any]] = {
    "generator_source": {
        "what": "from_generator yielding parsed records one at a time (Python, 3 ms each) -> map -> batch(8)",
        "slow": "the sequential Python source",
        "expect_stage": "from_generator", "expect_advice": ["interleave"],
        "forbid": [r"\.prefetch\(", r"give its map num_parallel_calls"],
    },
    "text_lines_sequential_pyfunc_map": {
        "what": "TextLineDataset(4 files) -> map(py_function parse, 3 ms, sequential) -> batch(8)",
        "slow": "a sequential map (stateful py_function: TensorFlow cannot parallelise it)",
        "expect_stage": "map", "expect_advice": ["num_parallel_calls=tf.data.AUTOTUNE"],
        "forbid": [r"\.prefetch\(", r"interleave\("],
    },
    "text_lines_parallel_pyfunc_map": {
        "what": "the same map with num_parallel_calls=AUTOTUNE",
        "slow": "a parallel map, still the slowest stage",
        "expect_stage": "map", "expect_advice": ["already runs in parallel"],
        "forbid": [r"\.prefetch\(", r"give its map num_parallel_calls"],
    },
    "png_decode_no_cache": {
        "what": "list of 24 PNG files -> map(read_file + decode_png + resize + blur; no num_parallel_calls) "
                "-> batch(8), finite, epochs repeat",
        "slow": "decoding repeated every epoch (TensorFlow parallelises the stateless map itself)",
        "expect_stage": "map", "expect_advice": ["cache"],
        "forbid": [r"\.prefetch\(", r"give its map num_parallel_calls"],
    },
    "tfrecord_parse_no_cache": {
        "what": "TFRecordDataset(2 files) -> map(parse_example + py_function decode, 3 ms) -> batch(8), finite",
        "slow": "a sequential py_function decode redone every epoch",
        "expect_stage": "map", "expect_advice": ["num_parallel_calls=tf.data.AUTOTUNE", "cache"],
        "forbid": [r"\.prefetch\("],
    },
    "healthy_cached_parallel": {
        "what": "tensor slices -> cache -> shuffle -> repeat -> map(parallel) -> batch -> prefetch; "
                "a 20 ms training step",
        "slow": "nothing: the step sets the pace",
        "expect_stage": None, "expect_advice": [], "forbid": [], "healthy": True,
    },
}

TEST_FILE = r'''
import os, time
import numpy as np
import pytest
import tensorflow as tf

DATA = os.environ["INPUT_CASES_DATA"]
BATCH = 8

def _step():
    w = tf.Variable(tf.ones([64, 64]))
    @tf.function
    def step(x):
        return tf.reduce_sum(tf.linalg.matmul(w, w)) + tf.reduce_sum(tf.cast(x, tf.float32))
    return step

def _busy_python(ms):
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x

def _parse_line(line):
    time.sleep(0.003)  # a slow parser that waits (I/O, a service): releases the GIL
    return np.float32(len(line.numpy()))

def _py_parse(line):
    return tf.py_function(_parse_line, [line], tf.float32)

def _lines():
    return tf.data.TextLineDataset(sorted(tf.io.gfile.glob(os.path.join(DATA, "text-*.txt"))))

def test_generator_source(tfperf):
    def records():
        i = 0
        while True:
            time.sleep(0.003)  # reading and parsing one record in Python
            yield np.float32(i)
            i += 1
    ds = tf.data.Dataset.from_generator(records, output_signature=tf.TensorSpec([], tf.float32))
    tfperf.iterate(ds.map(lambda x: x * 2.0).batch(BATCH), step=_step())

def test_text_lines_sequential_pyfunc_map(tfperf):
    tfperf.iterate(_lines().repeat().map(_py_parse).batch(BATCH), step=_step())

def test_text_lines_parallel_pyfunc_map(tfperf):
    ds = _lines().repeat().map(_py_parse, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH)
    tfperf.iterate(ds, step=_step())

def test_png_decode_no_cache(tfperf):
    files = sorted(tf.io.gfile.glob(os.path.join(DATA, "image-*.png")))
    def decode(path):
        image = tf.image.decode_png(tf.io.read_file(path), channels=3)
        image = tf.image.resize(tf.cast(image, tf.float32), [256, 256])
        for _ in range(4):
            image = tf.nn.avg_pool2d(image[None], 3, 1, "SAME")[0]
        return image
    tfperf.iterate(tf.data.Dataset.from_tensor_slices(files).map(decode).batch(BATCH), step=_step())

def test_tfrecord_parse_no_cache(tfperf):
    files = sorted(tf.io.gfile.glob(os.path.join(DATA, "records-*.tfrecord")))
    spec = {"x": tf.io.FixedLenFeature([16], tf.float32)}
    def decode(x):
        time.sleep(0.003)
        return np.float32(x.numpy().sum())
    def parse(record):
        x = tf.io.parse_single_example(record, spec)["x"]
        return tf.py_function(decode, [x], tf.float32)
    tfperf.iterate(tf.data.TFRecordDataset(files).map(parse).batch(BATCH), step=_step())

def test_healthy_cached_parallel(tfperf):
    x = np.random.default_rng(0).random((256, 32), dtype=np.float32)
    ds = (tf.data.Dataset.from_tensor_slices(x).cache().shuffle(256).repeat()
          .map(lambda v: v * 2.0, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(tf.data.AUTOTUNE))
    def step(v):
        _busy_python(20)
        return tf.reduce_sum(v)
    tfperf.iterate(ds, step=step)
'''


def write_data(folder: Path) -> None:
    """The files the pipelines read: text lines, TFRecords, PNG images (deterministic)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for f in range(4):
        lines = [" ".join(str(v) for v in rng.integers(0, 1000, 20)) for _ in range(200)]
        (folder / f"text-{f}.txt").write_text("\n".join(lines) + "\n")
    for f in range(2):
        with tf.io.TFRecordWriter(str(folder / f"records-{f}.tfrecord")) as writer:
            for _ in range(48):
                feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(16).tolist()))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    for i in range(24):
        pixels = rng.integers(0, 255, (384, 384, 3), dtype=np.uint8)
        (folder / f"image-{i:02d}.png").write_bytes(tf.io.encode_png(pixels).numpy())


def run_process(index: int, data: Path, work: Path, budget: float) -> dict[str, Any]:
    test_file = work / "test_input_cases.py"
    test_file.write_text(TEST_FILE)
    results = work / f"results-{index}.json"
    env = dict(os.environ, INPUT_CASES_DATA=str(data), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "pytest", "--tfperf", "--tfperf-budget", str(budget), "--tfperf-json", str(results),
           str(test_file), "-p", "no:cacheprovider", "-q", "--rootdir", str(work)]
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    doc = json.loads(results.read_text()) if results.exists() else {"tests": []}
    rows = {}
    for test_id, entry in doc.get("tests", {}).items():
        m = entry.get("measurement") or {}
        name = test_id.rsplit("::", 1)[-1].removeprefix("test_")
        diagnoses = [d for d in m.get("diagnoses", []) if d["kind"] == "input_bound"]
        rows[name] = {"diagnosis": diagnoses[0] if diagnoses else None,
                      "input_bound_fraction": m.get("extra_metrics", {}).get("input_bound_fraction")}
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    return {"index": index, "returncode": proc.returncode, "wall_s": round(wall, 1), "pytest": tail,
            "load_avg_before": round(load_before, 2), "load_avg_after": round(os.getloadavg()[0], 2), "rows": rows}


def judge(case: dict[str, Any], row: dict[str, Any] | None) -> dict[str, Any]:
    d = (row or {}).get("diagnosis")
    if d is None:
        return {"ok": False, "why": "no input-bound diagnosis"}
    summary, figures = d["summary"], dict(d.get("figures", {}))
    if case.get("healthy"):
        ok = d["severity"] != "warning"
        return {"ok": ok, "why": "" if ok else "a warning on a healthy pipeline", "severity": d["severity"]}
    m = re.search(r"the stage that sets the pace is (.*?) \[([^\]]*)\]", summary)
    stage = m.group(1) if m else None
    named = stage is not None and case["expect_stage"] in stage
    advised = all(a in summary for a in case["expect_advice"])
    forbidden = [f for f in case["forbid"] if re.search(f, summary)]
    why = []
    if d["severity"] != "warning":
        why.append(f"severity {d['severity']}")
    if not named:
        why.append(f"stage named: {stage!r}")
    if not advised:
        why.append("expected advice missing")
    if forbidden:
        why.append(f"advised what TF does or another stage's remedy: {forbidden}")
    return {"ok": not why, "why": "; ".join(why), "stage": stage, "path": m.group(2) if m else None,
            "ms_per_element": figures.get("pace_stage_ms_per_element"),
            "ms_per_iteration": figures.get("pace_stage_ms_per_iteration"),
            "concurrency": figures.get("pace_stage_concurrency"), "share": figures.get("pace_stage_share_of_wait")}


def markdown(doc: dict[str, Any]) -> str:
    out = ["# The input-bound diagnosis on pipelines with one slow stage", "",
           f"Measured {doc['date']} on the shared 2-core VM (TF {doc['tensorflow']}), under `nice -n 15`; "
           f"load average {doc['load_min']:.1f}-{doc['load_max']:.1f} during the runs. "
           f"{len(doc['processes'])} fresh pytest processes, `--tfperf-budget {doc['budget']}`.", "",
           "Command: `nice -n 15 .venv/bin/python benchmarks/input_diagnosis_cases.py --processes "
           f"{len(doc['processes'])}`", "",
           "| case | the slow stage | right in | stage named (first process) | its time | advice checked |",
           "|---|---|---|---|---|---|"]
    for name, case in CASES.items():
        verdicts = [judge(case, p["rows"].get(name)) for p in doc["processes"]]
        good = sum(v["ok"] for v in verdicts)
        first = verdicts[0] if verdicts else {}
        if case.get("healthy"):
            stage, time_s = "no warning", ""
        else:
            stage = f"{first.get('stage')} `[{first.get('path')}]`"
            per_el = first.get("ms_per_element")
            conc = first.get("concurrency")
            time_s = (f"{per_el:.2f} ms/element" if per_el is not None else
                      f"{first.get('ms_per_iteration') or 0:.1f} ms/iteration")
            if conc is not None:
                time_s += f", {conc:.1f} threads busy"
            if first.get("share") is not None:
                time_s += f", {first['share']:.0%} of the wait"
        checks = (", ".join(f"`{a}`" for a in case["expect_advice"]) or "-") + (
            "; none of " + ", ".join(f"`{f}`" for f in case["forbid"]) if case["forbid"] else "")
        out.append(f"| `{name}`: {case['what']} | {case['slow']} | {good} of {len(verdicts)} | {stage} | {time_s} "
                   f"| {checks} |")
    misses = [(p["index"], name, judge(case, p["rows"].get(name))["why"]) for p in doc["processes"]
              for name, case in CASES.items() if not judge(case, p["rows"].get(name))["ok"]]
    costs = sorted(dict((row.get("diagnosis") or {}).get("figures", {})).get("stages_profiled_pass_s", -1.0)
                   for p in doc["processes"] for row in p["rows"].values())
    costs = [c for c in costs if c >= 0]
    if costs:
        out += ["", f"What the profiled pass cost (warm-up, 4 windows, stopping the profiler, reading the profile), "
                    f"over the {len(costs)} diagnoses that took one: median {costs[len(costs) // 2]:.1f} s, "
                    f"{costs[0]:.1f}-{costs[-1]:.1f} s; the measurement itself had a {doc['budget']} s budget "
                    "(plus the dataset-alone and step-alone phases)."]
    ratios = sorted(f["stages_profiled_pass_s"] / f["stages_profiled_rounds_s"] for p in doc["processes"]
                    for row in p["rows"].values()
                    for f in [dict((row.get("diagnosis") or {}).get("figures", {}))]
                    if f.get("stages_profiled_rounds_s"))
    if ratios:
        out += ["", f"The profiled pass against the timed rounds it follows (their iterations' times summed, the "
                    f"pass's budget): median {ratios[len(ratios) // 2]:.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f}; at "
                    f"most 1 in {sum(r <= 1.0 for r in ratios)} of {len(ratios)}."]
    out += ["", "Misses: " + ("none" if not misses else "; ".join(f"process {i} `{n}`: {w}" for i, n, w in misses)),
            "", "One diagnosis per case, as printed (first process):", ""]
    for name in CASES:
        row = doc["processes"][0]["rows"].get(name) if doc["processes"] else None
        d = (row or {}).get("diagnosis")
        out += [f"- `{name}` ({d['severity'] if d else '-'}): {d['summary'] if d else 'no diagnosis'}", ""]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--name", default="input_diagnosis_cases")
    parser.add_argument("--from-json", action="store_true", help="rebuild the .md from the .json")
    args = parser.parse_args()
    out_json = HERE / "results" / f"{args.name}.json"
    if args.from_json:
        doc = json.loads(out_json.read_text())
    else:
        import tensorflow as tf

        processes = []
        with tempfile.TemporaryDirectory() as tmp:
            data, work = Path(tmp) / "data", Path(tmp) / "work"
            data.mkdir()
            work.mkdir()
            write_data(data)
            for i in range(args.processes):
                p = run_process(i, data, work, args.budget)
                print(f"process {i}: {p['pytest']} in {p['wall_s']} s, load {p['load_avg_before']}", flush=True)
                processes.append(p)
        loads = [p[k] for p in processes for k in ("load_avg_before", "load_avg_after")]
        doc = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "tensorflow": tf.__version__,
               "budget": args.budget, "load_min": min(loads), "load_max": max(loads), "processes": processes}
        out_json.write_text(json.dumps(doc, indent=1) + "\n")
    (HERE / "results" / f"{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
