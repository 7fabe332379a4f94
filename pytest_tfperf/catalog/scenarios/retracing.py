"""8. ``tf.function`` retracing on every call.

The mistake: calling a ``tf.function`` with a Python number that changes
(a step counter, a learning rate as a float) or with tensors whose shape
changes from call to call. Each new Python value or shape is a new signature,
so TensorFlow traces the function again, building and optimising a new graph
for what should be a cheap call. TensorFlow warns about it only twice per
function, so it goes unnoticed. The fix passes tensors and declares the
shapes that vary: ``input_signature`` with ``None`` dimensions (or
``reduce_retracing=True``), so one trace serves every call.

The gated metric is the number of traces in the steady state: about one per
call for the mistakes, none for the fixes.
"""

from __future__ import annotations

import itertools

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, compute_device, pick

KEY = "retracing"
TITLE = "tf.function retraced by Python scalars or varying shapes vs a stable input_signature"
METRIC = Metric.TRACES
COMPARISONS = (
    Comparison("anti", "fix", min_effect=0.9,
               measured_here="1 trace per call vs 0 in every run; calls 42-59x faster (best rounds)"),
    Comparison("anti_shapes", "fix_shapes", min_effect=0.9,
               measured_here="1 trace per call vs 0 in every run; calls 33-39x faster (best rounds)"),
)


def build(size: CatalogSize) -> Scenario:
    import tensorflow as tf

    length = pick(size, small=1000, default=10_000, large=1_000_000)
    device = compute_device()

    def body(x: tf.Tensor, scale: tf.Tensor | float) -> tf.Tensor:
        y = tf.sin(x) * scale
        for _ in range(6):
            y = tf.tanh(y) + tf.cos(y)
        return tf.reduce_sum(y)

    plain = tf.function(body)
    signed = tf.function(body, input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.float32)])
    relaxed = tf.function(body, reduce_retracing=True)
    with tf.device(device):
        x = tf.random.stateless_normal([length], seed=[5, 0])
    counter = itertools.count(1)

    # Each variant's calls are distinct (a counter), as a training step's are.
    def python_scalar_every_call() -> float:
        # A new Python float each call: a new signature, a new trace.
        return float(plain(x, 1.0 + next(counter) * 1e-6))

    def new_shape_every_call() -> float:
        n = length + next(counter)
        with tf.device(device):
            return float(plain(tf.ones([n]), tf.constant(1.0)))

    def tensors_and_a_signature() -> float:
        return float(signed(x, tf.constant(1.0 + next(counter) * 1e-6)))

    def shapes_and_reduce_retracing() -> float:
        with tf.device(device):
            return float(relaxed(tf.ones([length + next(counter)]), tf.constant(1.0)))

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=1,
        variants=(
            Variant("anti", python_scalar_every_call, "a changing Python float passed to a plain tf.function"),
            Variant("anti_shapes", new_shape_every_call, "a tensor of a new length each call, plain tf.function"),
            Variant("fix", tensors_and_a_signature, "tensors only, input_signature with a None dimension"),
            Variant("fix_shapes", shapes_and_reduce_retracing, "a new length each call, reduce_retracing=True"),
        ),
        comparisons=COMPARISONS,
        functions=(plain, signed, relaxed),
        sizes=(("vector length", length),),
    )
