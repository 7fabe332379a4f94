"""Retracing on real Keras and tf.function workloads over fresh processes: every retrace seen, none invented.

Run:   .venv/bin/python benchmarks/retrace_validation.py --processes 10
Writes benchmarks/results/retrace_validation.json and .md.

Each process is ``pytest --tfperf`` on the cases below (written to a temporary
directory), with ``--tfperf-json``. Over all processes:

* healthy loops (``model.fit`` on NumPy arrays and on a ``tf.data`` dataset,
  ``train_on_batch`` on a dense model and on a text model, ``reduce_retracing``
  over varying batch shapes) must count 0 steady traces and draw no
  ``retracing`` diagnosis;
* the anti-patterns (a ``tf.function`` built in the step, ``model.compile()``
  in the step, ``make_train_function(force=True)`` in the step, a Python float
  argument, a new batch shape every call) must count one steady trace per
  measured call, and their diagnosis must name the function and the cause.

Then, in one more process, what the trace recorder costs a call that does not
trace: a cached ``tf.function`` call timed with the recorder installed and
without, interleaved.
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

CASES = '''
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 16)).astype("float32")
y = rng.normal(size=(64, 1)).astype("float32")
tokens = rng.integers(0, 500, size=(32, 20))
labels = rng.integers(0, 2, size=(32, 1)).astype("float32")


def dense():
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    return m


def test_healthy_fit_numpy(tfperf):
    m = dense()
    tfperf(lambda: m.fit(x, y, batch_size=16, epochs=1, verbose=0), items=64)


def test_healthy_fit_dataset(tfperf):
    m = dense()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).prefetch(2)
    tfperf(lambda: m.fit(ds, epochs=1, verbose=0), items=64)


def test_healthy_train_on_batch(tfperf):
    m = dense()
    tfperf(lambda: m.train_on_batch(x[:16], y[:16]), items=16)


def test_healthy_text_train_on_batch(tfperf):
    m = keras.Sequential([keras.Input((20,), dtype="int32"), keras.layers.Embedding(500, 16),
                          keras.layers.LSTM(16), keras.layers.Dense(1, activation="sigmoid")])
    m.compile(optimizer="adam", loss="binary_crossentropy")
    tfperf(lambda: m.train_on_batch(tokens, labels), items=32)


def test_healthy_reduce_retracing_shapes(tfperf):
    @tf.function(reduce_retracing=True)
    def total(v):
        return tf.reduce_sum(v * 2.0)

    sizes = itertools.cycle(range(1, 50))
    tfperf(lambda: total(tf.ones([next(sizes), 3])))


@pytest.mark.tfperf(rounds=2, budget_s=0.6)
def test_new_tf_function_in_step(tfperf):
    def body(v):
        return tf.reduce_sum(v * 2.0)

    tfperf(lambda: tf.function(body)(tf.ones([8])))


@pytest.mark.tfperf(rounds=2, budget_s=3.0)  # a recompiled step takes 0.2-0.8 s here: several a round
def test_compile_in_step(tfperf):
    m = dense()

    def step():
        m.compile(optimizer="adam", loss="mse")
        return m.train_on_batch(x[:16], y[:16])

    tfperf(step, items=16)


@pytest.mark.tfperf(rounds=2, budget_s=3.0)
def test_make_train_function_force_in_step(tfperf):
    m = dense()
    m.train_on_batch(x[:16], y[:16])

    def step():
        m.make_train_function(force=True)
        return m.train_on_batch(x[:16], y[:16])

    tfperf(step, items=16)


@pytest.mark.tfperf(rounds=2, budget_s=0.6)
def test_python_float_argument(tfperf):
    @tf.function
    def scaled(v, lr):
        return v * lr

    rates = itertools.count()
    tfperf(lambda: scaled(tf.ones([4]), float(next(rates)) / 10))


@pytest.mark.tfperf(rounds=2, budget_s=0.6)
def test_new_batch_shape_every_call(tfperf):
    @tf.function
    def total(v):
        return tf.reduce_sum(v * 2.0)

    sizes = itertools.count(1)
    tfperf(lambda: total(tf.ones([next(sizes), 3])))
'''

HEALTHY = ("test_healthy_fit_numpy", "test_healthy_fit_dataset", "test_healthy_train_on_batch",
           "test_healthy_text_train_on_batch", "test_healthy_reduce_retracing_shapes")
# What each anti-pattern's diagnosis must say: the function's name and the cause's words.
EXPECTED = {
    "test_new_tf_function_in_step": ("<locals>.body`", "a new tf.function object around the same Python function"),
    "test_compile_in_step": ("one_step_on_data`", "compile once, outside the loop"),
    "test_make_train_function_force_in_step": ("one_step_on_data`", "compile once, outside the loop"),
    "test_python_float_argument": ("<locals>.scaled`", "(lr: Python value "),
    "test_new_batch_shape_every_call": ("<locals>.total`", "(v: shape ("),
}


def one_process(directory: Path, index: int) -> dict[str, Any]:
    out = directory / f"results_{index}.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tfperf", "--tfperf-budget=0.3",
         "--tfperf-rounds=3", f"--tfperf-json={out}", "-W", "ignore::DeprecationWarning", "test_retrace_cases.py"],
        cwd=directory, env=env, capture_output=True, text=True, timeout=900)
    if not out.exists():
        raise SystemExit(f"process {index} wrote no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    doc = json.loads(out.read_text())
    rows = {}
    for test_id, entry in doc["tests"].items():
        m = entry["measurement"]
        rows[test_id.split("::")[1]] = {
            "traces_first_call": m.get("traces_first_call"),
            "traces_steady": m.get("traces_steady"),
            "iterations": m["summary"]["iterations"],
            "rounds": m["summary"]["rounds"],
            "trace_counting": m.get("trace_counting", "between_rounds"),
            "retracing": [d["summary"] for d in m.get("diagnoses", []) if d["kind"] == "retracing"],
        }
    return {"process": index, "seconds": round(time.monotonic() - t0, 1), "returncode": proc.returncode,
            "tests": rows}


NON_TRACING = r'''
import json, statistics, time
import tensorflow as tf
from pytest_tfperf.measuring.trace_recorder import TraceRecorder

@tf.function
def f(v):
    return v + 1.0

v = tf.ones([4])
f(v)
N, REPS = 20000, 9
recorder = TraceRecorder()
calls = []  # every call TensorFlow makes to its tracing callbacks while the cached calls run
from tensorflow.python.eager.polymorphic_function import transform
transform.CONCRETE_FUNCTION_CALLBACKS.append(calls.append)

def timed():
    t0 = time.perf_counter_ns()
    for _ in range(N):
        f(v)
    return (time.perf_counter_ns() - t0) / N

timed()
without, with_ = [], []
for _ in range(REPS):
    without.append(timed())
    recorder.install()
    with_.append(timed())
    recorder.uninstall()
assert recorder.total() == 0
transform.CONCRETE_FUNCTION_CALLBACKS.remove(calls.append)
diffs = [b - a for a, b in zip(without, with_)]
print(json.dumps({"calls_per_rep": N, "reps": REPS, "without_ns_per_call": statistics.median(without),
                  "with_ns_per_call": statistics.median(with_), "difference_ns_per_call_median": statistics.median(diffs),
                  "difference_ns_per_call_min_max": [min(diffs), max(diffs)], "traces_seen": recorder.total(),
                  "callback_invocations": len(calls), "calls_timed": 2 * N * REPS}))
'''


def non_tracing_cost() -> dict[str, Any]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", NON_TRACING], env=env, capture_output=True, text=True, timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(processes: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for test in HEALTHY:
        runs = [p["tests"][test] for p in processes]
        out[test] = {"kind": "healthy", "steady_traces": [r["traces_steady"] for r in runs],
                     "retracing_warnings": sum(bool(r["retracing"]) for r in runs),
                     "ok": all(r["traces_steady"] == 0 and not r["retracing"] for r in runs)}
    for test, (function, words) in EXPECTED.items():
        runs = [p["tests"][test] for p in processes]
        per_call = [r["traces_steady"] / r["iterations"] for r in runs]
        named = [any(function in line and words in line for line in r["retracing"]) for r in runs]
        out[test] = {"kind": "anti-pattern", "steady_traces_per_call": per_call,
                     "more_calls_than_rounds": sum(r["iterations"] > r["rounds"] for r in runs),
                     "diagnosis_names_function_and_cause": sum(named),
                     "example": runs[0]["retracing"][0] if runs[0]["retracing"] else "",
                     "ok": all(pc == 1.0 for pc in per_call) and all(named)}
    return out


def markdown(doc: dict[str, Any]) -> str:
    n = len(doc["processes"])
    lines = [f"# Retracing over {n} fresh processes", "",
             f"Written by `benchmarks/retrace_validation.py --processes {n}` on {doc['written_at']} "
             f"(load average at start {doc['load_average_start']}, at end {doc['load_average_end']}; "
             "2 cores, run under `nice -n 15`).", "",
             "| test | kind | figure | result |", "|---|---|---|---|"]
    for test, s in doc["summary"].items():
        if s["kind"] == "healthy":
            fig = f"steady traces {sorted(set(s['steady_traces']))}, retracing warnings {s['retracing_warnings']} of {n}"
        else:
            pcs = s["steady_traces_per_call"]
            fig = (f"steady traces per call {min(pcs):.2f}..{max(pcs):.2f}; more calls than rounds in "
                   f"{s['more_calls_than_rounds']} of {n}; diagnosis names function and cause in "
                   f"{s['diagnosis_names_function_and_cause']} of {n}")
        lines.append(f"| `{test}` | {s['kind']} | {fig} | {'ok' if s['ok'] else '**FAIL**'} |")
    c = doc["non_tracing_cost"]
    lines += ["", "Example diagnoses (process 0):", ""]
    lines += [f"- `{t}`: {s['example']}" for t, s in doc["summary"].items() if s.get("example")]
    lines += ["", "A call that does not trace, with the recorder installed and without "
              f"({c['reps']} interleaved repetitions of {c['calls_per_rep']} cached `tf.function` calls): "
              f"{c['without_ns_per_call']:.0f} ns without, {c['with_ns_per_call']:.0f} ns with, difference "
              f"{c['difference_ns_per_call_median']:+.0f} ns a call (min {c['difference_ns_per_call_min_max'][0]:+.0f}, "
              f"max {c['difference_ns_per_call_min_max'][1]:+.0f}). TensorFlow called its tracing callbacks "
              f"{c['callback_invocations']} times in those {c['calls_timed']} calls: the recorder runs only "
              "when TensorFlow traces, so the difference is the machine's noise.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--name", default="retrace_validation")
    args = parser.parse_args()
    load_start = os.getloadavg()
    processes = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "test_retrace_cases.py").write_text(CASES)
        for i in range(args.processes):
            processes.append(one_process(directory, i))
            print(f"process {i}: {processes[-1]['seconds']} s, exit {processes[-1]['returncode']}", flush=True)
    doc = {"written_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "load_average_start": [round(v, 1) for v in load_start],
           "non_tracing_cost": non_tracing_cost(),
           "processes": processes}
    doc["load_average_end"] = [round(v, 1) for v in os.getloadavg()]
    doc["summary"] = summarise(processes)
    results = HERE / "results"
    (results / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (results / f"{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))
    if not all(s["ok"] for s in doc["summary"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
