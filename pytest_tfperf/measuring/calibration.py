"""The calibration workload: one fixed TensorFlow computation that every process of a refresh measures.

Why: the stored gate bounds a new run by the spread of the baseline's runs, and a test's own 7 runs
(6 degrees of freedom) sometimes agree by chance, leaving a bound too narrow for the next slow process.
A suite of many tests floors each test's spread with the suite's typical one (``stored_rule.machine_floor``),
but a suite of one to four tests, a new user's first step, has nothing to floor it with. So each refresh
process also measures this workload, stored as a baseline of its own (``storage.runs.CALIBRATION_ID``), and its
spread over the refresh's processes is the machine's floor whatever the suite's size.

What it is: a ``tf.function`` of 30 ``matmul`` + ``tanh`` steps in a ``tf.while_loop`` on a 128 x 192
batch, the same computation as ``test_work[x1]`` of ``benchmarks/stored_gate/suite.py``, so the committed
validation collections hold its runs in every process (``benchmarks/stored_gate_study.py`` judges
suites of one and three tests with it). It takes the plugin's default settings: about 2.5 s a process.
"""

from __future__ import annotations

from pytest_tfperf.measuring.workload import Workload
from pytest_tfperf.storage.runs import CALIBRATION_ID

ITEMS = 128
_WIDTH = 192
_TRIPS = 30

__all__ = ["CALIBRATION_ID", "ITEMS", "workload"]


def workload() -> Workload:
    """The calibration workload, built (imports TensorFlow; call only where TensorFlow is loaded)."""
    import tensorflow as tf

    w = tf.random.stateless_normal((_WIDTH, _WIDTH), seed=(2, 2)) / _WIDTH ** 0.5
    x0 = tf.random.stateless_normal((ITEMS, _WIDTH), seed=(3, 3))
    trips = tf.constant(_TRIPS)

    @tf.function
    def step(x: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
        i = tf.constant(0)

        def body(i: tf.Tensor, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            return i + 1, tf.tanh(tf.matmul(x, w))

        _, x = tf.while_loop(lambda i, x: i < n, body, (i, x))
        return tf.reduce_sum(x)

    return Workload(call=lambda: step(x0, trips), items_per_iteration=float(ITEMS))
