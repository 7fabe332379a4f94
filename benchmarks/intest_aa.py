"""In-test pairs on unchanged code: false alarms and false notices of a cost on a few iterations.

    .venv/bin/python benchmarks/intest_aa.py [--sessions 20]

``tfperf.compare({"main": f, "pr": g}, reference="main")`` where ``f`` and ``g`` are two identical copies of
a workload users write (each with its own ``tf.data`` pipeline, model or function), as a pull request that
changed nothing would compare them: a cached spectrogram pipeline (an epoch ends every eighth batch), an
augmenting image pipeline, a shuffled one, Keras ``train_on_batch`` and ``fit``, a ``tf.function`` step.
Every "regressed" verdict is a false alarm, and every notice "but the mean time per item is ... slower"
(``gates.paired.periodic_cost``) a false notice. Writes ``benchmarks/results/intest_aa.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import numpy as np
import tensorflow as tf
import keras

AUTOTUNE = tf.data.AUTOTUNE


@tf.function
def small_step(x):
    return tf.reduce_mean(tf.nn.relu(tf.reduce_mean(x, axis=[1, 2])))


def pulling(ds):
    it = iter(ds)
    return lambda: small_step(next(it))


def spectrogram():
    def spectro(x):
        s = tf.signal.stft(x, frame_length=256, frame_step=128)
        return tf.math.log(tf.abs(s) + 1e-6)
    ds = tf.data.Dataset.from_tensor_slices(np.random.rand(64, 8000).astype("float32"))
    return pulling(ds.map(spectro).cache().repeat().batch(8).prefetch(AUTOTUNE))


def image_map():
    def augment(x):
        x = tf.image.random_flip_left_right(x)
        x = tf.image.random_brightness(x, 0.1)
        return tf.image.resize(x, (40, 40))
    ds = tf.data.Dataset.from_tensor_slices(np.random.rand(512, 32, 32, 3).astype("float32")).repeat()
    return pulling(ds.batch(64).map(augment).prefetch(AUTOTUNE))


def shuffled():
    ds = tf.data.Dataset.from_tensor_slices(np.random.rand(1024, 24, 24, 3).astype("float32")).repeat()
    ds = ds.shuffle(256).map(lambda x: tf.image.random_flip_up_down(x) * 1.1, num_parallel_calls=AUTOTUNE)
    return pulling(ds.batch(32).prefetch(AUTOTUNE))


def _model():
    m = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def train_on_batch():
    m = _model()
    x = np.random.rand(32, 16, 16, 3).astype("float32")
    y = np.random.randint(0, 10, 32)
    return lambda: m.train_on_batch(x, y)


def fit():
    m = _model()
    ds = tf.data.Dataset.from_tensor_slices((np.random.rand(256, 16, 16, 3).astype("float32"),
                                             np.random.randint(0, 10, 256))).batch(32).prefetch(AUTOTUNE)
    return lambda: m.fit(ds, epochs=1, verbose=0)


def step():
    w = tf.random.normal([256, 256])

    @tf.function
    def mm(x):
        for _ in range(4):
            x = tf.tanh(tf.matmul(x, w))
        return x
    x = tf.random.normal([64, 256])
    return lambda: mm(x)


def test_spectrogram(tfperf):
    tfperf.compare({"main": spectrogram(), "pr": spectrogram()}, reference="main", items=8)


def test_image_map(tfperf):
    tfperf.compare({"main": image_map(), "pr": image_map()}, reference="main", items=64)


def test_shuffled(tfperf):
    tfperf.compare({"main": shuffled(), "pr": shuffled()}, reference="main", items=32)


def test_train_on_batch(tfperf):
    tfperf.compare({"main": train_on_batch(), "pr": train_on_batch()}, reference="main", items=32)


def test_fit(tfperf):
    tfperf.compare({"main": fit(), "pr": fit()}, reference="main", items=256)


def test_step(tfperf):
    tfperf.compare({"main": step(), "pr": step()}, reference="main", items=64)
'''


def session(tmp: Path, index: int) -> list[dict[str, Any]]:
    out = tmp / f"run-{index}.json"
    subprocess.run([sys.executable, "-m", "pytest", "--tfperf", "-p", "no:cacheprovider", "-q",
                    "--no-tfperf-explain", "--tfperf-json", str(out), "test_intest.py"], cwd=tmp,
                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                        "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=1200)
    rows = []
    for test_id, entry in json.loads(out.read_text())["tests"].items():
        if not test_id.endswith("[pr]"):
            continue
        metric = next((m for m in (entry.get("verdict") or {}).get("metrics") or []
                       if m.get("metric") == "throughput"), {})
        message = str(metric.get("message", ""))
        rows.append({"session": index, "test": test_id.split("::")[-1], "status": metric.get("status"),
                     "notice": "mean time per item" in message, "message": message,
                     "load": round(os.getloadavg()[0], 2)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "intest_aa")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tfperf-intest-aa-") as name:
        tmp = Path(name)
        (tmp / "test_intest.py").write_text(SUITE)
        (tmp / "pytest.ini").write_text("[pytest]\nfilterwarnings = ignore\n")
        for i in range(args.sessions):
            mine = session(tmp, i)
            rows += mine
            print(f"session {i}: {[(r['test'], r['status'], r['notice']) for r in mine]}", flush=True)
            finished = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            summary = {"verdicts": len(rows), "regressed": sum(r["status"] == "regressed" for r in rows),
                       "noisy": sum(r["status"] == "noisy" for r in rows),
                       "notices": sum(r["notice"] for r in rows)}
            Path(str(args.out) + ".json").write_text(json.dumps(
                {"commit": commit, "started": started, "finished": finished, "summary": summary, "rows": rows},
                indent=1) + "\n")
            tests = sorted({r["test"] for r in rows})
            md = [f"# In-test pairs on unchanged code (commit {commit}, {started} to {finished})", "",
                  f"`.venv/bin/python benchmarks/intest_aa.py --sessions {args.sessions}` ({i + 1} sessions done)",
                  "", f"- {summary['regressed']} false alarms and {summary['notices']} false notices of a cost on "
                  f"a few iterations in {summary['verdicts']} verdicts; noisy {summary['noisy']}", "",
                  "| test | verdicts | false alarms | noisy | false notices |", "|---|---|---|---|---|"]
            for t in tests:
                mine_t = [r for r in rows if r["test"] == t]
                md.append(f"| {t} | {len(mine_t)} | {sum(r['status'] == 'regressed' for r in mine_t)} | "
                          f"{sum(r['status'] == 'noisy' for r in mine_t)} | {sum(r['notice'] for r in mine_t)} |")
            Path(str(args.out) + ".md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
