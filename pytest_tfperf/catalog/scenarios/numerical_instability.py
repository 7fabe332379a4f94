"""9. Numerical instability: the "stall" that is really a NaN.

The mistake: a learning rate far too large, and no gradient clipping. The
first updates overshoot, the loss and the gradients grow, and within a few
steps they overflow to Inf and then NaN. From then on the loop keeps running
at full speed, but the weights are NaN and nothing is learned: training looks
stuck rather than broken. The fix is a sane learning rate and gradients
clipped by their global norm, so no single step can blow up.

The metric is the iteration at which the loss stops being finite: a few steps
for the mistake, never for the fix. A test that checks the loss every
iteration (``@pytest.mark.tfperf(check_finite=True)``) fails at that
iteration, with it in the message, instead of reporting a healthy throughput.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick

KEY = "numerical_instability"
TITLE = "Excessive learning rate without clipping (loss turns NaN) vs clipped gradients and a sane rate"
METRIC = Metric.FIRST_NON_FINITE
# The gate: the anti-pattern's loss is non-finite by this iteration, the fix's never.
COMPARISONS = (Comparison("anti", "fix", min_effect=10,
                          measured_here="NaN at iteration 3 in every run and at every size; the fix stays finite "
                                        "and its loss falls from about 3000 to 0.3 in 500 steps"),)

EXCESSIVE_LEARNING_RATE = 1.0
SANE_LEARNING_RATE = 0.01
CLIP_NORM = 10.0


class LossWatch:
    """Counts calls and remembers the first one whose loss was NaN or Inf (counting from 0)."""

    def __init__(self, step: Callable[[], float]) -> None:
        self._step = step
        self.iterations = 0
        self.first_non_finite: int | None = None

    def __call__(self) -> float:
        loss = self._step()
        if self.first_non_finite is None and not math.isfinite(loss):
            self.first_non_finite = self.iterations
        self.iterations += 1
        return loss

    def observe(self) -> float | None:
        return None if self.first_non_finite is None else float(self.first_non_finite)


def training_step(learning_rate: float, clip_norm: float | None, batch: int, seed: int = 0) -> Callable[[], float]:
    """One regression training step on a fixed batch, as a callable returning the loss."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    features = 32
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(learning_rate)
    x = tf.random.stateless_normal([batch, features], seed=[6, 0])
    # Targets on a scale of tens: large gradients at the start, as real data often has.
    y = tf.reduce_sum(x, axis=1, keepdims=True) * 10.0

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        if clip_norm is not None:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def run() -> float:
        return float(step())

    run.traced = step  # type: ignore[attr-defined]
    return run


def build(size: CatalogSize) -> Scenario:
    batch = pick(size, small=64, default=256, large=4096)
    anti = LossWatch(training_step(EXCESSIVE_LEARNING_RATE, None, batch))
    fix = LossWatch(training_step(SANE_LEARNING_RATE, CLIP_NORM, batch))
    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=batch,
        variants=(
            Variant("anti", anti, f"SGD learning rate {EXCESSIVE_LEARNING_RATE}, no gradient clipping",
                    observe=anti.observe),
            Variant("fix", fix, f"SGD learning rate {SANE_LEARNING_RATE}, gradients clipped to global norm "
                                f"{CLIP_NORM}", observe=fix.observe),
        ),
        comparisons=COMPARISONS,
        sizes=(("batch", batch),),
    )
