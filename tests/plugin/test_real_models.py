"""Real workloads through the plugin: no false warnings at CI sizes, and Keras 3 traces counted.

The first test runs the real-model suite (``benchmarks/test_real_models.py``)
at small size: the healthy workloads must draw no warning, the true positives
(kept outputs, an unprefetched pipeline, a recompiling Keras loop) must fire.
Full sizes, keras.applications models included, run from ``benchmarks/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.growth_confirmation import short_growth_confirmation_for

# Validation code, not the product: it lives with the benchmarks.
SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "test_real_models.py"

pytestmark = pytest.mark.filterwarnings("default")


def test_healthy_real_workloads_draw_no_warning_and_true_positives_fire(pytester: pytest.Pytester,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFPERF_REAL_MODELS_SIZE", "small")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    # The recompiling model's trace cache grows on every call, and confirming that growth took 30 of this
    # test's 55 s; that test asserts traces, so it confirms within its budget. The healthy workloads keep the
    # default confirmation: "no warning" is asserted on them.
    recompiling = "test_true_positive_keras_recompile_retraces"
    pytester.makepyfile(short_confirmation=short_growth_confirmation_for(recompiling))
    # Its own baseline directory: the main job's full-size baselines of the same test ids are not for CI sizes.
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-budget", "0.3", str(SUITE), "-p", "no:cacheprovider",
                                           "-p", "short_confirmation",
                                           f"--tfperf-baseline-dir={pytester.path / 'baselines'}", "-rs", timeout=300)
    assert result.parseoutcomes().get("failed", 0) == 0, result.stdout.str()[-6000:]
    # 4 healthy workloads and 3 true positives at CI size; the other 6 workloads only at full size
    result.assert_outcomes(passed=7, skipped=6)


KERAS_CASES = """
import numpy as np
import keras
import pytest
import tensorflow as tf


def _model():
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    return m


def _data(n):
    return np.ones((n, 16), "float32"), np.ones((n, 1), "float32")


# warmup_s=0: the first call and one warm-up call see batch 8; every later call a new batch size.
@pytest.mark.tfperf(warmup_s=0, budget_s=0.3, max_traces=0)
def test_changing_batch_shapes(tfperf):
    model = _model()
    calls = [0]

    def step():
        calls[0] += 1
        n = 8 if calls[0] <= 2 else 8 + calls[0] % 7 + 1
        return model.train_on_batch(*_data(n))

    tfperf(step)


@pytest.mark.tfperf(warmup_s=0, budget_s=0.3, max_traces=0)
def test_one_batch_shape(tfperf):
    model = _model()
    x, y = _data(8)
    tfperf(lambda: model.train_on_batch(x, y))


@pytest.mark.tfperf(budget_s=0.2, max_traces=0)
def test_test_on_batch(tfperf):
    model = _model()
    x, y = _data(8)
    tfperf(lambda: model.test_on_batch(x, y))


@pytest.mark.tfperf(budget_s=0.2, max_traces=0)
def test_predict_on_batch(tfperf):
    model = _model()
    x, _ = _data(8)
    tfperf(lambda: model.predict_on_batch(x))


def _dataset():
    return tf.data.Dataset.from_tensor_slices(_data(64)).batch(8).repeat()


@pytest.mark.tfperf(budget_s=0.3, max_traces=0)
def test_fit(tfperf):
    model = _model()
    ds = _dataset()
    tfperf(lambda: model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0, shuffle=False))


@pytest.mark.tfperf(budget_s=0.3, max_traces=0)
def test_evaluate(tfperf):
    model = _model()
    ds = _dataset()
    tfperf(lambda: model.evaluate(ds, steps=4, verbose=0))


@pytest.mark.tfperf(budget_s=0.3, max_traces=0)
def test_predict(tfperf):
    model = _model()
    ds = _dataset().map(lambda x, y: x)
    tfperf(lambda: model.predict(ds, steps=4, verbose=0))
"""


def test_keras_3_traces_are_counted_and_steady_retraces_fail_max_traces(pytester: pytest.Pytester,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    pytester.makepyfile(test_keras=KERAS_CASES)
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-json=results.json", "-p", "no:cacheprovider",
                                           timeout=240)
    result.assert_outcomes(failed=1, passed=6)
    result.stdout.fnmatch_lines(["*test_changing_batch_shapes: limit crossed*", "*traces_steady: measured *, limit 0*"])
    data = json.loads((pytester.path / "results.json").read_text())
    traces = {test_id.rsplit("::", 1)[-1]: entry["measurement"] for test_id, entry in data["tests"].items()}
    # every Keras entry point's compiled step function is found: it traced on the first call
    for name in ("test_one_batch_shape", "test_test_on_batch", "test_predict_on_batch", "test_fit",
                 "test_evaluate", "test_predict"):
        assert traces[name]["traces_first_call"] >= 1, (name, traces[name])
        assert traces[name]["traces_steady"] == 0, (name, traces[name])
    assert traces["test_changing_batch_shapes"]["traces_steady"] >= 1
