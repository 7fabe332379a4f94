"""6. An oversized batch, and gradient accumulation as the fix.

The mistake: choosing the batch size without regard to memory. Activations
and their gradients grow linearly with the batch, so a batch too large for the
device fails with an out-of-memory error, or, on a host, pushes the machine
into swap until it freezes. The fix reaches the same effective batch by
accumulating gradients over several micro-batches and applying them once:
the same update, at a fraction of the peak memory, for some speed.

Three helpers make the mistake measurable (``batch_budget``): the peak of one
step against the batch size (a straight line), a memory budget that fails a
step with its batch size, peak, budget and device instead of crashing the
session, and a search for the largest batch that fits a budget.

The peak compared is the transient one: what a step allocates above the
memory already in use when it starts (the weights, the input batch, and the
fix's gradient accumulators, which are state like the weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_tfperf.catalog.batch_budget import MemoryBudgetExceeded
from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick

KEY = "oversized_batch"
TITLE = "One oversized batch vs gradient accumulation over micro-batches"
METRIC = Metric.TF_PEAK
COMPARISONS = (Comparison("anti", "fix", min_effect=2.0,
                          measured_here="3.2-3.7x in 3 runs on the quiet 2-core machine, 2.8-3.7x in 8 busy "
                                        "ones (default size: about 60-88 vs 19-23 MiB); 4.3x at the small size"),)

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


def sizes_for(size: CatalogSize) -> Sizes:
    return pick(size,
                small=Sizes(effective_batch=4096, micro_batches=16, hidden=512),
                default=Sizes(effective_batch=4096, micro_batches=8, hidden=1024),
                large=Sizes(effective_batch=32768, micro_batches=8, hidden=4096))


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


def build(size: CatalogSize) -> Scenario:
    sizes = sizes_for(size)
    big, small = Trainer(sizes, seed=0), Trainer(sizes, seed=0)
    x, y = big.data(sizes.effective_batch)
    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=sizes.effective_batch,
        variants=(
            Variant("anti", big.one_big_step(x, y), f"one step on a batch of {sizes.effective_batch}"),
            Variant("fix", small.accumulated_step(x, y),
                    f"gradients of {sizes.micro_batches} micro-batches of {sizes.micro_batch} summed, applied once"),
        ),
        comparisons=COMPARISONS,
        functions=(big.train_step, small.accumulate, small.apply_accumulated),
        sizes=(("effective batch", sizes.effective_batch), ("micro-batches", sizes.micro_batches),
               ("hidden units", sizes.hidden)),
    )


def step_under_gpu_cap(batch_size: int, cap_mb: int) -> None:
    """One training step at ``batch_size`` in a process whose GPU memory is capped at ``cap_mb``.

    The cap must be set before TensorFlow touches the GPU, hence the worker
    process. A real ``ResourceExhaustedError`` there becomes the same clear
    ``MemoryBudgetExceeded`` as the CPU budget raises.
    """
    from pytest_tfperf.catalog.worker import ConfiguredProcess, OutOfDeviceMemory

    process = ConfiguredProcess("capped", workload="gpu_train_step", size=batch_size, gpu_memory_limit_mb=cap_mb)
    try:
        process.wait_ready()
        process.run()
    except OutOfDeviceMemory as exc:
        raise MemoryBudgetExceeded(batch_size=batch_size, peak_bytes=None, budget_bytes=cap_mb * 2**20,
                                   device="GPU:0", cause=str(exc)) from exc
    finally:
        process.close()
