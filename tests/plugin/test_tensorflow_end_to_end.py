"""Real TensorFlow through the whole plugin: one subprocess session, several promises checked.

- a known allocation (a 64 MiB float32 tensor) is reported by the TF allocator within 1%;
- tf.function traces are counted, warm-up apart from the steady state;
- retracing in the steady state crosses a max_traces budget and fails that test alone;
- a dataset feeding a step is measured and reported as input-bound or not.
"""

from __future__ import annotations

import os

import pytest

from pytest_tfperf.model import MemorySource
from pytest_tfperf.storage.results_json import load_results
from tests.fakes.growth_confirmation import SHORT_GROWTH_CONFIRMATION

MODULE = """
import pytest
import tensorflow as tf

ELEMENTS = 16 * 1024 * 1024  # 64 MiB of float32

def test_known_allocation(tfperf):
    tfperf(lambda: tf.zeros([ELEMENTS]))

@tf.function
def matmul(x):
    return tf.reduce_sum(tf.matmul(x, x))

def test_traces_once(tfperf):
    tfperf(matmul, tf.ones([64, 64]))

@tf.function
def scaled(x, k):
    return x * k

@pytest.mark.tfperf(max_traces=0)
def test_retraces(tfperf):
    counter = iter(range(10**9))
    tfperf(lambda: scaled(tf.ones([4]), float(next(counter))))  # a new Python float: a new trace each call

def test_pipeline(tfperf):
    ds = tf.data.Dataset.range(10**6).map(lambda i: tf.cast(i, tf.float32)).batch(64)
    tfperf.iterate(ds, items=64, step=lambda b: tf.reduce_sum(b))
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[pytest.RunResult, object]:
    pytester_dir = tmp_path_factory.mktemp("tf_e2e")
    (pytester_dir / "test_tf.py").write_text(MODULE)
    (pytester_dir / "conftest.py").write_text(SHORT_GROWTH_CONFIRMATION)  # test_retraces grows; nothing asserts growth
    out = pytester_dir / "results.json"
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf", "--tfperf-budget=0.5",
         f"--tfperf-json={out}", "-W", "ignore::DeprecationWarning", "test_tf.py"],
        cwd=pytester_dir, env=env, capture_output=True, text=True, timeout=300,
    )
    return proc, load_results(out)


def test_only_the_retracing_test_fails_and_says_why(session) -> None:  # type: ignore[no-untyped-def]
    proc, _ = session
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 failed, 3 passed" in proc.stdout
    assert "FAILED test_tf.py::test_retraces" in proc.stdout
    assert "traces" in proc.stdout.split("test_retraces: limit crossed", 1)[1].split("\n", 2)[1]


def test_known_allocation_is_reported_within_one_percent(session) -> None:  # type: ignore[no-untyped-def]
    _, doc = session
    m = doc.measurement("test_tf.py::test_known_allocation")
    peak = m.memory_peak(MemorySource.TF_ALLOCATOR, "CPU:0")
    assert peak is not None and peak.available, peak
    added = peak.peak_bytes - (peak.baseline_bytes or 0)
    assert added == pytest.approx(64 * 2**20, rel=0.01)


def test_trace_counts_split_warm_up_and_steady_state(session) -> None:  # type: ignore[no-untyped-def]
    _, doc = session
    steady = doc.measurement("test_tf.py::test_traces_once")
    assert (steady.traces_first_call, steady.traces_steady) == (1, 0)
    retrace = doc.measurement("test_tf.py::test_retraces")
    assert retrace.traces_steady is not None and retrace.traces_steady >= retrace.timings.iterations


def test_pipeline_gets_an_input_bound_figure(session) -> None:  # type: ignore[no-untyped-def]
    proc, doc = session
    m = doc.measurement("test_tf.py::test_pipeline")
    fraction = m.extra("input_bound_fraction")
    assert fraction is not None and 0.0 <= fraction <= 1.0
    assert "input-bound" in proc.stdout


ONE_TEST = """
import tensorflow as tf

@tf.function
def step(x):
    return tf.reduce_sum(tf.tanh(tf.matmul(x, x)))

def test_only(tfperf):
    tfperf(step, tf.ones([64, 64]), items=64)
"""


def test_a_refresh_of_a_one_test_suite_measures_the_calibration_in_every_process_and_floors_the_gate(
        tmp_path: os.PathLike) -> None:
    """A suite of one test has no other tests to learn the machine's spread from: each refresh process
    measures the calibration workload too, it is stored as a baseline of its own, and the gate judges the
    test with the machine's floor (its verdict names its source and degrees of freedom when it applies)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from pytest_tfperf.storage.baseline_store import BaselineStore
    from pytest_tfperf.storage.runs import CALIBRATION_ID

    root = Path(tmp_path)
    (root / "test_one.py").write_text(ONE_TEST)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    common = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf", "--tfperf-budget=0.3",
              "--no-tfperf-explain",  # the calibration is the subject; a refresh would also profile each test
              "-W", "ignore::DeprecationWarning", "test_one.py"]
    refresh = subprocess.run([*common, "--tfperf-update", "--tfperf-runs=2"], cwd=root, env=env,
                             capture_output=True, text=True, timeout=600)
    assert refresh.returncode == 0, refresh.stdout[-3000:]
    assert "the machine's calibration workload measured in 2 process(es)" in refresh.stdout
    store = BaselineStore(root / "benchmarks" / "baselines")
    (entry,) = json.loads(store.path_for(CALIBRATION_ID).read_text())["entries"].values()
    assert len(entry["runs"]) == 2 and all(r["throughput_per_s"] > 0 for r in entry["runs"])
    assert "1 test(s)" in refresh.stdout  # the calibration is not counted as a test
    # The gated run reads the floor; the history holds tests only.
    out = root / "results.json"
    gated = subprocess.run([*common, f"--tfperf-json={out}"], cwd=root, env=env, capture_output=True, text=True,
                           timeout=600)
    assert gated.returncode == 0, gated.stdout[-3000:]
    assert CALIBRATION_ID not in (root / "benchmarks" / "baselines" / "history.csv").read_text()
    assert load_results(out).calibration is None  # a gated run measures no calibration
