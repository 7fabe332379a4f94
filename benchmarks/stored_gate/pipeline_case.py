"""The real-pipeline case of the stored gate, end to end with the plugin's defaults.

    .venv/bin/python benchmarks/stored_gate/pipeline_case.py [--tries 10] [--aa 3]

A Keras image pipeline as users write it: JPEG decode, random crop and flip, batches of 16 feeding
MobileNetV2 (64 px, weights=None) through ``tfperf.iterate(ds, step=model.train_on_batch)``, tuned with
``map(num_parallel_calls=AUTOTUNE)`` and ``prefetch(AUTOTUNE)``. In a scratch directory:

1. ``pytest --tfperf --tfperf-update`` (the default 7 runs, each in its own process);
2. ``--aa`` runs of ``pytest --tfperf`` on the unchanged pipeline: each must pass;
3. ``--tries`` runs with the pipeline made sequential and unprefetched (``TFPERF_PIPELINE=sequential``):
   each either fails exactly its test, or passes with a verdict whose stated detection limit is wider
   than the change it measured.

Writes benchmarks/results/pipeline_case.json and .md. Every verdict is the real gate's, read back from
``--tfperf-json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ.get("TFPERF_CODE", HERE.parent.parent))
RESULTS = HERE.parent / "results"
sys.path.insert(0, str(REPO))
from pytest_tfperf.config import DEFAULT_RUNS  # noqa: E402 - the runs the refresh below measures

TEST = '''
import os

import keras
import numpy as np
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


def _augment(jpeg):
    img = tf.io.decode_jpeg(jpeg, channels=3)
    img = tf.image.random_crop(img, (64, 64, 3))
    img = tf.image.random_flip_left_right(img)
    return tf.cast(img, tf.float32) / 255.0


def test_image_pipeline(tfperf):
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(64, 64, 3), weights=None, classes=10, alpha=0.35)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(1)
    jpegs = tf.stack([tf.io.encode_jpeg(img) for img in rng.integers(0, 255, (64, 96, 96, 3), dtype=np.uint8)])
    labels = tf.constant(rng.integers(0, 10, 64))
    ds = tf.data.Dataset.from_tensor_slices((jpegs, labels)).repeat()
    if os.environ.get("TFPERF_PIPELINE", "tuned") == "tuned":
        ds = ds.map(lambda j, y: (_augment(j), y), num_parallel_calls=AUTOTUNE).batch(16).prefetch(AUTOTUNE)
    else:
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.map_parallelization = False
        ds = ds.map(lambda j, y: (_augment(j), y)).batch(16).with_options(options)
    tfperf.iterate(ds, items=16, step=lambda batch: model.train_on_batch(*batch), functions=[model])

'''


def pytest_run(work: Path, *args: str, pipeline: str = "tuned") -> dict:
    out = work / "results.json"
    if out.exists():
        out.unlink()
    env = dict(os.environ, PYTHONPATH=str(REPO), TFPERF_PIPELINE=pipeline, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tfperf",
                           f"--tfperf-json={out}", *args, "test_pipeline.py"], cwd=work, env=env,
                          capture_output=True, text=True, check=False)
    tests = {}
    if out.exists():
        doc = json.loads(out.read_text())
        for test_id, entry in doc["tests"].items():
            verdict = entry.get("verdict") or {}
            throughput = next((m for m in verdict.get("metrics", []) if m["metric"] == "throughput"), {})
            tests[test_id.split("::")[-1]] = {
                "status": verdict.get("status"), "change": throughput.get("relative_change"),
                "limit": throughput.get("minimum_detectable_change"), "throughput_status": throughput.get("status"),
                "confirmed": verdict.get("confirmed"),
            }
    failed = [line.split("::")[-1].split(" ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED")]
    return {"returncode": done.returncode, "failed": failed, "tests": tests, "seconds": time.monotonic() - start,
            "tail": done.stdout.splitlines()[-15:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--aa", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfperf-pipeline-case-"))
    (work / "test_pipeline.py").write_text(TEST)
    record: dict = {"refresh": pytest_run(work, "--tfperf-update"), "aa": [], "sequential": []}
    print("refresh:", record["refresh"]["returncode"], f"{record['refresh']['seconds']:.0f} s", flush=True)
    if record["refresh"]["returncode"] != 0:
        print("\n".join(record["refresh"]["tail"]), flush=True)
    for _ in range(args.aa):
        record["aa"].append(pytest_run(work))
        print("A/A:", record["aa"][-1]["returncode"], record["aa"][-1]["tests"], flush=True)
        report(record)
    for _ in range(args.tries):
        record["sequential"].append(pytest_run(work, pipeline="sequential"))
        print("sequential:", record["sequential"][-1]["failed"], record["sequential"][-1]["tests"], flush=True)
        report(record)
    shutil.rmtree(work, ignore_errors=True)
    print(report(record))
    return 0


def report(record: dict) -> str:
    """Write what has been measured so far (a long study stopped early still leaves its figures)."""
    aa_pass = sum(r["returncode"] == 0 for r in record["aa"])
    exact = sum(r["failed"] == ["test_image_pipeline"] for r in record["sequential"])
    wide = sum(r["returncode"] == 0 and (r["tests"].get("test_image_pipeline", {}).get("limit") or 0)
               > -(r["tests"].get("test_image_pipeline", {}).get("change") or 0) for r in record["sequential"])
    other = len(record["sequential"]) - exact - wide
    changes = [r["tests"].get("test_image_pipeline", {}).get("change") for r in record["sequential"]]
    limits = [r["tests"].get("test_image_pipeline", {}).get("limit") for r in record["sequential"]]
    lines = [
        "# The real-pipeline case, end to end (`benchmarks/stored_gate/pipeline_case.py`)",
        "",
        f"- refresh (`pytest --tfperf --tfperf-update`, {DEFAULT_RUNS} runs): exit {record['refresh']['returncode']}, "
        f"{record['refresh']['seconds']:.0f} s",
        f"- A/A runs of the unchanged pipeline passing: {aa_pass} of {len(record['aa'])}",
        f"- sequential, unprefetched pipeline: failed exactly its test {exact} of {len(record['sequential'])}; "
        f"passed with a stated detection limit wider than the change it saw {wide}; other {other}",
        "- changes measured: " + ", ".join("n/a" if c is None else f"{c:+.1%}" for c in changes),
        "- stated limits: " + ", ".join("n/a" if v is None else f"{v:.0%}" for v in limits),
    ]
    (RESULTS / "pipeline_case.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    (RESULTS / "pipeline_case.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
