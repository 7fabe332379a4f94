"""--tfperf-explain of a TF-allocator peak with real TensorFlow: a compare() variant that holds a planted 4 MiB
tensor at its peak is explained from the profile's allocation events (TF_CPU_ALLOCATOR_USE_BFC=true, as the
project sets it for TF-allocator peaks). Runs pytest in a subprocess: the profiler is process-global.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")

PLANTED = """
import os
os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
import tensorflow as tf

x = tf.random.uniform((64, 64))

@tf.function
def base(x):
    with tf.name_scope("body"):
        return tf.reduce_sum(tf.matmul(x, x))

@tf.function
def hungrier(x):
    with tf.name_scope("body"):
        y = tf.reduce_sum(tf.matmul(x, x))
    with tf.name_scope("planted"):
        big = tf.tile(x, [16, 16])  # 1024 x 1024 float32: 4 MiB live at the step's peak
        y += tf.reduce_sum(big * 2.0)
    return y

def test_pair(tfperf):
    tfperf.compare({"main": lambda: base(x), "hungry": lambda: hungrier(x)}, reference="main")
"""


def test_a_planted_allocation_is_named_in_the_message_the_json_and_the_markdown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-explain", "--tfperf-budget=0.3",
                                           "--tfperf-json=out.json", "--tfperf-markdown=summary.md",
                                           "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "peak_tf_allocator[CPU:0]" in text and "more memory than the baseline" in text
    result.stdout.fnmatch_lines(["*where the memory went: +*MiB added peak measured (profiled windows +*MiB, "
                                 "allocator bfc_cpu_allocator_for_gpu)",
                                 "*planted (Tile family) appeared +4.00 MiB at the peak ±*"])
    entry = json.loads((pytester.path / "out.json").read_text())["tests"]["test_planted.py::test_pair[hungry]"]
    memory = entry["explanation"]["memory"]
    assert memory["causes"][0]["key"] == "layer:planted"
    assert memory["causes"][0]["delta_bytes"] >= 4 * 2**20
    parts = sum(c["delta_bytes"] for c in memory["causes"]) + memory["remainder_bytes"]
    assert abs(parts - memory["measured_bytes"]) <= 2  # rounding of each part to a byte
    assert "planted" in (pytester.path / "summary.md").read_text()
