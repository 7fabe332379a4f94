"""Diagnoses as a user meets them: real TensorFlow stalls, OOMs, input-bound pipelines, leaks and NaNs.

One TensorFlow session holds every case, each flagged one next to a healthy one that must pass, so the
TensorFlow import is paid once. ``TF_ENABLE_ONEDNN_OPTS=0`` makes an out-of-memory error raise in
milliseconds instead of after the allocator's 10 s retry (research Q3d); the request is 1 TiB, above the
physical memory of any machine this runs on, so nothing is ever really allocated.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.filterwarnings("default")

TF_CASES = """
import threading
import time

import pytest
import tensorflow as tf

NEVER = threading.Event()


def _blocks_at_30(x):
    if int(x) == 30:
        NEVER.wait()  # a py_function that never returns: get_next blocks inside TensorFlow's C++
    return x


@pytest.mark.tfperf(stall_timeout_s=2.0, stall_floor_s=1.0, budget_s=0.5)
def test_stalls(tfperf):
    ds = tf.data.Dataset.range(1000).map(lambda x: tf.py_function(_blocks_at_30, [x], tf.int64))
    tfperf.iterate(ds)


@pytest.mark.tfperf(budget_s=0.3)
def test_after_the_stall(tfperf):
    ds = tf.data.Dataset.range(1000).map(lambda x: tf.py_function(lambda v: v, [x], tf.int64))
    tfperf.iterate(ds)


def _slow_element(x):
    time.sleep(0.004)
    return x


def _busy_step(element):
    # Long against what a pull costs after a busy Python step: 0.4 ms here, up to 1.5 ms when other
    # processes keep both cores busy (thread wake-ups), so the healthy case stays well under 10%.
    end = time.perf_counter() + 0.025
    while time.perf_counter() < end:
        pass
    return element


@pytest.mark.tfperf(budget_s=0.6, max_input_bound_fraction=0.1)
def test_input_bound(tfperf):
    ds = tf.data.Dataset.range(10**6).map(lambda x: tf.py_function(_slow_element, [x], tf.int64))
    tfperf.iterate(ds, step=lambda e: e + 1)


@pytest.mark.tfperf(budget_s=0.6, max_input_bound_fraction=0.1)
def test_not_input_bound(tfperf):
    ds = tf.data.Dataset.from_tensors(tf.ones([8])).repeat().prefetch(2)
    tfperf.iterate(ds, step=_busy_step)


@pytest.mark.tfperf(budget_s=0.3, max_memory_growth_bytes_per_iteration=128 * 1024)
def test_leaks(tfperf):
    kept = []
    x = tf.ones([256, 256])
    tfperf(lambda: kept.append(x * 2.0))  # 256 KiB kept per iteration


@pytest.mark.tfperf(budget_s=0.3, max_memory_growth_bytes_per_iteration=128 * 1024)
def test_flat(tfperf):
    x = tf.ones([256, 256])
    tfperf(lambda: float(tf.reduce_sum(x * 2.0)))


@pytest.mark.tfperf(batch_size=4096)
def test_oom(tfperf):
    tfperf(lambda: tf.zeros([2**38]))  # 1 TiB


@pytest.mark.tfperf(budget_s=0.2)
def test_after_the_oom(tfperf):
    tfperf(lambda: tf.zeros([1024]))


@pytest.mark.tfperf(check_finite=True, budget_s=0.2)
def test_nan(tfperf):
    n = [0]

    def step():
        n[0] += 1
        return {"loss": tf.constant(float("nan") if n[0] > 39 else 1.0)}

    tfperf(step)


@pytest.mark.tfperf(check_finite=True, budget_s=0.2)
def test_finite(tfperf):
    tfperf(lambda: {"loss": tf.constant(1.0)})
"""


def _overcommits_everything() -> bool:
    try:
        with open("/proc/sys/vm/overcommit_memory") as fh:
            return fh.read().strip() == "1"
    except OSError:
        return False


def test_each_diagnosis_fails_its_own_test_and_lets_the_healthy_ones_pass(pytester: pytest.Pytester,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if _overcommits_everything():
        # A 1 TiB request would then succeed on paper and be filled page by page until the OOM killer came.
        pytest.skip("vm.overcommit_memory=1: a real out-of-memory error cannot be provoked safely here")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    pytester.makepyfile(test_cases=TF_CASES)
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-json=results.json", "-p", "no:cacheprovider",
                                           timeout=240)
    result.assert_outcomes(failed=5, passed=5)
    out = result.stdout.str()
    # failed: each with its diagnosis in plain words first
    result.stdout.fnmatch_lines([
        "*test_cases.py::test_stalls: stalled in the *: the iteration has run * s, past its deadline of 1.0 s*",
        "Stacks of every Python thread at the stall:",
        "*<- the stalled workload",
        "Resources at the stall:",
        "*process RSS: *",
    ])
    result.stdout.fnmatch_lines([
        "*test_input_bound: limit crossed",
        "*input_bound_fraction: measured *%, limit 10.0%",
        "*diagnosis: highly input-bound: *% of each step waits for data beyond the * ms it takes to hand over an "
        "element already made (*% with it); the dataset alone delivers * elements/s, the step alone *",
    ])
    result.stdout.fnmatch_lines([
        "*test_leaks: limit crossed",
        "*diagnosis: memory grows by 2??.? KiB per iteration (95% CI *) over * iterations, in * of * rounds "
        "(process RSS)*",
    ])
    result.stdout.fnmatch_lines([
        "*test_oom: out of memory on CPU:0 in the first call (ResourceExhaustedError): a float tensor of shape "
        "[[]274877906944[]] (1.0 TiB) could not be allocated.",
        "  Peak reached: *process RSS high-water * since measuring began.",
        "  Machine: * available of *",
        "  Batch size: 4,096 (from @pytest.mark.tfperf(batch_size=...)).",
        "  TensorFlow said: *OOM when allocating tensor*",
        "  Try: check the shape first*halve the batch size (4,096 now)*",
    ])
    result.stdout.fnmatch_lines(["*test_nan: non-finite value at iteration 39 (counting the first call as 0): "
                                 "output[[]'loss'[]] = nan*"])
    assert "During handling of the above exception" not in out  # each failure is told once
    # the terminal summary repeats the diagnoses (the input-bound one even when healthy) and every failure
    result.stdout.fnmatch_lines([
        "*test_cases.py::test_not_input_bound: *input-bound: *% of each step waits for data beyond the *; the "
        "dataset alone*",
        "*test_cases.py::test_leaks: memory grows by *",
        "*test_cases.py::test_stalls: FAILED (stall): stalled in the *",
        "*test_cases.py::test_oom: FAILED (oom): out of memory on CPU:0*; batch size 4,096",
        "*test_cases.py::test_nan: FAILED (non_finite): non-finite value at iteration 39*",
        "1 measuring thread(s) abandoned after a stall are still blocked:",
    ])
    doc = json.loads((pytester.path / "results.json").read_text())["tests"]

    def entry(name: str) -> dict:  # type: ignore[type-arg]
        return doc[f"test_cases.py::{name}"]  # type: ignore[no-any-return]

    stall = entry("test_stalls")["verdict"]
    assert stall["status"] == "failed" and stall["kind"] == "stall"
    figures = stall["diagnoses"][0]["figures"]
    assert figures["deadline_s"] == 1.0
    assert figures["deadline_s"] <= figures["waited_s"] < figures["deadline_s"] + 1.0  # caught within its deadline
    assert entry("test_oom")["verdict"]["diagnoses"][0]["figures"]["batch_size"] == 4096
    assert entry("test_nan")["verdict"]["diagnoses"][0]["figures"]["iteration"] == 39
    for name in ("test_after_the_stall", "test_after_the_oom", "test_finite"):
        assert entry(name)["measurement"] is not None and entry(name)["verdict"] is None
    bound = entry("test_input_bound")["measurement"]
    assert bound["extra_metrics"]["input_bound_fraction"] > 0.5
    assert bound["extra_metrics"]["dataset_alone_elements_per_s"] < bound["extra_metrics"]["step_alone_elements_per_s"]
    assert [d["kind"] for d in bound["diagnoses"]] == ["input_bound", "memory_growth"]
    assert entry("test_not_input_bound")["measurement"]["extra_metrics"]["input_bound_fraction"] < 0.1
    leak = entry("test_leaks")["measurement"]["extra_metrics"]["memory_growth_bytes_per_iteration"]
    assert 240 * 1024 < leak < 300 * 1024
    flat = entry("test_flat")["measurement"]
    assert flat["extra_metrics"]["memory_growth_bytes_per_iteration"] < 16 * 1024
    (growth,) = flat["diagnoses"]
    assert growth["severity"] == "info" and growth["summary"].startswith("no steady memory growth: process RSS ")


def test_smoke_mode_does_not_hang_on_a_stall_either(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import threading
        import pytest

        NEVER = threading.Event()

        class Blocking:
            def __iter__(self):
                NEVER.wait()
                yield 1

        @pytest.mark.tfperf(stall_timeout_s=0.5)
        def test_blocks(tfperf):
            tfperf.iterate(Blocking())

        def test_next(tfperf):
            tfperf(lambda: None)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "*test_blocks: stalled in the smoke run (without --tfperf): the iteration has run * s, past its deadline "
        "of 0.5 s (no iteration had completed yet, so the ceiling applies; 0 iterations done)*",
    ])
    result.stdout.fnmatch_lines([
        "*test_blocks: FAILED (stall): stalled in the smoke run*",
        "1 measuring thread(s) abandoned after a stall are still blocked:",
        "  tfperf-measure (*): stalled in the smoke run (without --tfperf)",
    ])
