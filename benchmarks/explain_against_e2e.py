"""``--tfperf-against --tfperf-explain`` end to end on a small Keras model, and what the explanation costs.

    PYTHONPATH=$PWD nice -n 15 .venv/bin/python benchmarks/explain_against_e2e.py [--pairs 3]

Builds a throwaway git repository: revision A trains a 4-layer Keras MLP
(Dense 256, ``planted_dense`` 64, Dense 128, Dense 10; a ``tf.function`` SGD step
on a 256 x 128 batch); revision B widens ``planted_dense`` to 2048. It then runs
``pytest --tfperf --tfperf-against=HEAD~1`` on B, alternately with and without
``--tfperf-explain``, ``--pairs`` times, under TF_CPU_ALLOCATOR_USE_BFC=true.
A conftest in both revisions times ``explain.orchestrate.explain_outcomes`` (the partner's
profiled pass, this side's, reading and attributing both), printed as
``TFPERF_EXPLAIN_SECONDS``. Writes each run's wall time, that figure and the
explanation's lines to ``benchmarks/results/explain_against_e2e.json``.
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

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = '''
import os, sys, time
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import pytest_tfperf.explain.orchestrate as _o

_orig = _o.explain_outcomes  # the session imports it when it calls it: the timed one is the one called

def _timed(*a, **k):
    t = time.perf_counter()
    try:
        return _orig(*a, **k)
    finally:
        print(f"TFPERF_EXPLAIN_SECONDS {time.perf_counter() - t:.2f}", file=sys.__stderr__)

_o.explain_outcomes = _timed
'''

TEST = '''
import tensorflow as tf
import keras
from model_def import WIDTH

def build():
    inp = keras.Input((128,))
    x = keras.layers.Dense(256, activation="relu", name="encoder")(inp)
    x = keras.layers.Dense(WIDTH, activation="relu", name="planted_dense")(x)
    x = keras.layers.Dense(128, activation="relu", name="decoder")(x)
    return keras.Model(inp, keras.layers.Dense(10, name="head")(x))

def test_train_step(tfperf):
    model = build()
    opt = keras.optimizers.SGD(0.01)
    xs = tf.random.normal((256, 128))
    ys = tf.random.normal((256, 10))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xs, training=True) - ys) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    tfperf(step, items=256)
'''


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example", *args], cwd=repo, check=True,
                   capture_output=True)


def make_repo(repo: Path) -> None:
    git(repo, "init", "-q")
    (repo / "conftest.py").write_text(CONFTEST)
    (repo / "test_model.py").write_text(TEST)
    (repo / "model_def.py").write_text("WIDTH = 64\n")
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / ".gitignore").write_text(".tfperf/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "A")
    (repo / "model_def.py").write_text("WIDTH = 2048\n")
    git(repo, "commit", "-qam", "B: planted_dense widened")


def run(repo: Path, explain: bool) -> dict[str, object]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf", "--tfperf-against=HEAD~1"]
    # explanations are on by default: the arm without them says so
    command.append("--tfperf-explain" if explain else "--no-tfperf-explain")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    text = proc.stdout + proc.stderr
    seconds = re.findall(r"TFPERF_EXPLAIN_SECONDS ([0-9.]+)", text)
    lines = [line.strip() for line in proc.stdout.splitlines()
             if re.match(r"\s+(where the|no explanation|remainder|raw profiles|\S.* (appeared|vanished|grew|shrank) )",
                         line)]
    return {"explain": explain, "returncode": proc.returncode, "wall_s": round(wall, 2),
            "explain_s": float(seconds[0]) if seconds else None, "lines": lines}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "explain_against_e2e.json")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="tfperf-e2e-") as tmp:
        repo = Path(tmp)
        make_repo(repo)
        for pair in range(args.pairs):
            for explain in (True, False):
                result = run(repo, explain)
                print(json.dumps(result, indent=1), flush=True)
                runs.append({"pair": pair, **result})
    report = {"command": "PYTHONPATH=$PWD nice -n 15 .venv/bin/python benchmarks/explain_against_e2e.py",
              "runs": runs, "load_average_1min": round(os.getloadavg()[0], 2), "cores": os.cpu_count(),
              "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
