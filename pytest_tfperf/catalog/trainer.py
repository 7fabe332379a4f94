"""The oversized-batch scenario's model: a small Keras MLP with two ways to train on one effective batch.

One big step on the whole batch (the anti-pattern), or gradients accumulated
over micro-batches and applied once (the fix). It lives here, below both
:mod:`pytest_tfperf.catalog.scenarios.oversized_batch` (which measures the
two) and :mod:`pytest_tfperf.catalog.worker` (which runs the big step in a
process with a capped GPU), so that neither imports the other.

TensorFlow and Keras are imported when a ``Trainer`` is built, not on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FEATURES = 784
CLASSES = 10


@dataclass(frozen=True, slots=True)
class Sizes:
    effective_batch: int
    micro_batches: int
    hidden: int

    @property
    def micro_batch(self) -> int:
        return self.effective_batch // self.micro_batches


class Trainer:
    """A small Keras MLP with two ways to train on one effective batch."""

    def __init__(self, sizes: Sizes, seed: int = 0) -> None:
        import keras
        import tensorflow as tf

        keras.utils.set_random_seed(seed)
        self.sizes = sizes
        self.model = keras.Sequential([
            keras.Input((FEATURES,)),
            keras.layers.Dense(sizes.hidden, activation="relu"),
            keras.layers.Dense(sizes.hidden, activation="relu"),
            keras.layers.Dense(CLASSES),
        ])
        self.optimizer = keras.optimizers.SGD(0.01)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.accumulators = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.model.trainable_variables]
        signature = [tf.TensorSpec([None, FEATURES], tf.float32), tf.TensorSpec([None], tf.int32)]
        model, optimizer, accumulators = self.model, self.optimizer, self.accumulators

        @tf.function(input_signature=signature)
        def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        @tf.function(input_signature=[*signature, tf.TensorSpec([], tf.float32)])
        def accumulate(x: tf.Tensor, y: tf.Tensor, share: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True)) * share
            for acc, grad in zip(accumulators, tape.gradient(loss, model.trainable_variables)):
                acc.assign_add(grad)
            return loss

        @tf.function
        def apply_accumulated() -> None:
            optimizer.apply_gradients(zip([a.read_value() for a in accumulators], model.trainable_variables))
            for acc in accumulators:
                acc.assign(tf.zeros_like(acc))

        self.train_step = train_step
        self.accumulate = accumulate
        self.apply_accumulated = apply_accumulated

    def data(self, batch: int, seed: int = 3) -> tuple[Any, Any]:
        import tensorflow as tf

        x = tf.random.stateless_normal([batch, FEATURES], seed=[seed, 0])
        y = tf.random.stateless_uniform([batch], seed=[seed, 1], maxval=CLASSES, dtype=tf.int32)
        return x, y

    def one_big_step(self, x: Any, y: Any) -> Callable[[], float]:
        def step() -> float:
            return float(self.train_step(x, y))

        return step

    def accumulated_step(self, x: Any, y: Any) -> Callable[[], float]:
        import tensorflow as tf

        k = self.sizes.micro_batches
        m = self.sizes.micro_batch
        share = tf.constant(1.0 / k)

        def step() -> float:
            total = 0.0
            for i in range(k):
                total += float(self.accumulate(x[i * m:(i + 1) * m], y[i * m:(i + 1) * m], share))
            self.apply_accumulated()
            return total

        return step

    def step_at(self, batch: int, x: Any, y: Any) -> Callable[[], float]:
        """One plain training step on the first ``batch`` rows (the slice is part of the step's memory)."""

        def step() -> float:
            return float(self.train_step(x[:batch], y[:batch]))

        return step
