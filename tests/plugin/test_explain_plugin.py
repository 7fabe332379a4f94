"""--tfperf-explain end to end with real TensorFlow: a compare() variant with a planted matmul is explained.

Runs pytest in a subprocess: the profiler is process-global, and TensorFlow stays out of this process.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")

PLANTED = """
import tensorflow as tf

x = tf.random.uniform((64, 64))
big = tf.random.uniform((384, 384))

@tf.function
def base(x):
    with tf.name_scope("body"):
        return tf.reduce_sum(tf.matmul(x, x))

@tf.function
def slower(x):
    with tf.name_scope("body"):
        y = tf.reduce_sum(tf.matmul(x, x))
    with tf.name_scope("planted"):
        y += tf.reduce_sum(tf.matmul(tf.matmul(big, big), big))
    return y

def test_pair(tfperf):
    tfperf.compare({"main": lambda: base(x), "slow": lambda: slower(x)}, reference="main")
"""


def test_a_planted_matmul_is_named_with_the_tensorboard_command_and_kept_in_the_json(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_planted=PLANTED)
    # no option: explanations are on by default
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-budget=0.3",
                                           "--tfperf-json=out.json", "--tfperf-markdown=summary.md", "-p", "no:cacheprovider",
                                           timeout=300)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "test_pair[slow]: performance regressed against variant 'main'" in text
    result.stdout.fnmatch_lines(["*where the time went: +*/iteration measured*",
                                 "*planted*(MatMul family)*appeared*",
                                 "*raw profile (both sides, alternating windows): tensorboard --logdir "
                                 "*.tfperf/profiles/*test_pair_slow/pair"])
    entry = json.loads((pytester.path / "out.json").read_text())["tests"]["test_planted.py::test_pair[slow]"]
    explanation = entry["explanation"]
    assert explanation["causes"][0]["key"] == "layer:planted"
    assert explanation["lines"][0].startswith("where the time went:")
    assert "explanation" not in json.loads((pytester.path / "out.json").read_text())["tests"][
        "test_planted.py::test_pair[main]"]
    profiles = pytester.path / ".tfperf" / "profiles"
    # one profiler session for both sides: one raw profile, its windows marked with their side
    assert len(list(profiles.glob("*test_pair_slow*/pair/plugins/profile/*/*.xplane.pb"))) == 1
    assert "planted" in (pytester.path / "summary.md").read_text()


def test_nothing_is_profiled_with_explanations_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest_subprocess("--tfperf", "--no-tfperf-explain", "--tfperf-budget=0.3", "-p",
                                           "no:cacheprovider", timeout=300)
    result.assert_outcomes(failed=1)
    assert "where the time went" not in result.stdout.str()
    assert not (pytester.path / ".tfperf").exists()
