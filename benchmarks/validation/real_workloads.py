"""Healthy real workloads: what users measure, none of which should draw a warning.

The diagnostics were first tried on synthetic loops; these are the workloads a
new user brings (issue #10): keras.applications models at 64 px with
``weights=None``, an Embedding+LSTM text model, a small Transformer trained in
a ``tf.GradientTape`` loop, ``cache -> shuffle -> map(AUTOTUNE) -> batch ->
prefetch`` pipelines feeding a CNN step, and ``model.fit``. Each builder
returns a ``RealWorkload``; ``benchmarks/test_real_models.py`` measures them with the
``tfperf`` fixture and asserts that none draws a warning-level diagnosis,
beside the true positives that must still fire.

``small`` sizes run in CI in well under a minute together; the ``HEAVY``
ones (first call 10-20 s of tracing on 2 cores) only at full size, from
``benchmarks/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SIZE_ENV_VAR = "TFPERF_REAL_MODELS_SIZE"  # "small" (CI) or "full" (benchmarks)


@dataclass(frozen=True)
class RealWorkload:
    """One workload: ``call()`` per iteration, or ``dataset`` pulled and fed to ``step``."""

    name: str
    items: float
    call: Callable[[], object] | None = None
    dataset: Any = None
    step: Callable[[object], object] | None = None
    functions: tuple[object, ...] = ()
    # Keras models whose compiled step functions the plugin must find, with
    # the number of times their Python train/test/predict_step ran (once per
    # trace of one_step_on_data): the ground truth for trace counts.
    models: tuple[Any, ...] = ()
    step_runs: dict[str, int] = field(default_factory=dict)


def _count_step_runs(model: Any, runs: dict[str, int]) -> None:
    """Count how often the model's Python train/test/predict_step runs: once per trace of one_step_on_data."""
    for attr in ("train_step", "test_step", "predict_step"):
        original = getattr(model, attr)

        def counted(data: Any, _original: Any = original, _attr: str = attr) -> Any:
            runs[_attr] = runs.get(_attr, 0) + 1  # Python code inside a tf.function runs only while tracing
            return _original(data)

        object.__setattr__(model, attr, counted)


def _images(n: int, side: int, seed: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, 255, size=(n, side, side, 3), dtype=np.uint8), rng.integers(0, 10, size=(n,))


def _compile(model: Any) -> Any:
    import keras

    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _application(name: str, full: bool, mode: str) -> RealWorkload:
    import keras
    import numpy as np

    builders = {"mobilenet_v2": keras.applications.MobileNetV2, "efficientnet_b0": keras.applications.EfficientNetB0,
                "resnet50": keras.applications.ResNet50}
    batch = 16 if full else 4
    model = builders[name](input_shape=(64, 64, 3), weights=None, classes=10,
                           **({"classifier_activation": None} if name != "resnet50" else {}))
    runs: dict[str, int] = {}
    _count_step_runs(model, runs)
    x, y = _images(batch, 64, seed=1)
    x = x.astype(np.float32)
    if mode == "predict":
        return RealWorkload(f"{name}_predict_on_batch", batch, call=lambda: model.predict_on_batch(x),
                            models=(model,), step_runs=runs)
    _compile(model)
    return RealWorkload(f"{name}_train_on_batch", batch, call=lambda: model.train_on_batch(x, y),
                        models=(model,), step_runs=runs)


def mobilenet_v2(full: bool) -> RealWorkload:
    return _application("mobilenet_v2", full, "train")


def efficientnet_b0(full: bool) -> RealWorkload:
    return _application("efficientnet_b0", full, "train")


def resnet50_predict(full: bool) -> RealWorkload:
    return _application("resnet50", full, "predict")


def _small_cnn(side: int) -> Any:
    import keras

    return keras.Sequential([
        keras.Input((side, side, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])


def cnn_train_on_batch(full: bool) -> RealWorkload:
    import numpy as np

    side, batch = (64, 32) if full else (32, 8)
    model = _compile(_small_cnn(side))
    runs: dict[str, int] = {}
    _count_step_runs(model, runs)
    x, y = _images(batch, side, seed=2)
    x = x.astype(np.float32)
    return RealWorkload("cnn_train_on_batch", batch, call=lambda: model.train_on_batch(x, y), models=(model,),
                        step_runs=runs)


def lstm_text(full: bool) -> RealWorkload:
    import keras
    import numpy as np

    vocab, length, width, batch = (10_000, 100, 64, 32) if full else (2_000, 40, 32, 16)
    model = _compile(keras.Sequential([
        keras.Input((length,), dtype="int32"),
        keras.layers.Embedding(vocab, width),
        keras.layers.LSTM(width),
        keras.layers.Dense(10),
    ]))
    runs: dict[str, int] = {}
    _count_step_runs(model, runs)
    rng = np.random.default_rng(3)
    x = rng.integers(0, vocab, size=(batch, length), dtype=np.int32)
    y = rng.integers(0, 10, size=(batch,))
    return RealWorkload("lstm_text_train_on_batch", batch, call=lambda: model.train_on_batch(x, y),
                        models=(model,), step_runs=runs)


def transformer_tape(full: bool) -> RealWorkload:
    import keras
    import tensorflow as tf

    blocks, width, heads, length, batch, vocab = (2, 64, 4, 64, 16, 5_000) if full else (1, 32, 2, 32, 8, 1_000)
    inputs = keras.Input((length,), dtype="int32")
    h = keras.layers.Embedding(vocab, width)(inputs)
    for _ in range(blocks):
        a = keras.layers.MultiHeadAttention(heads, width // heads)(h, h)
        h = keras.layers.LayerNormalization()(h + a)
        f = keras.layers.Dense(width * 2, activation="relu")(h)
        h = keras.layers.LayerNormalization()(h + keras.layers.Dense(width)(f))
    outputs = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model(inputs, outputs)
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.stateless_uniform((batch, length), seed=[4, 0], maxval=vocab, dtype=tf.int32)
    y = tf.random.stateless_uniform((batch,), seed=[4, 1], maxval=10, dtype=tf.int32)

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return RealWorkload("transformer_gradient_tape", batch, call=lambda: train_step(x, y), functions=(train_step,))


def _image_pipeline(full: bool, repeat: bool) -> tuple[Any, int, int]:
    import tensorflow as tf

    # The same image size at both sizes: the step must stay well slower than the
    # pipeline (a healthy pipeline), which a 32 px step on 2 busy cores is not.
    # The finite dataset is 4 batches, so that epochs restart within the
    # measured rounds of even a slow step, as they do in a real epoch loop.
    n, side, batch = (1024, 64, 32) if full else (512, 64, 32)
    if not repeat:
        n = 4 * batch
    images, labels = _images(n, side, seed=5)

    def augment(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.image.random_flip_left_right(tf.cast(image, tf.float32))
        return tf.image.random_brightness(image, 10.0), label

    ds = tf.data.Dataset.from_tensor_slices((images, labels)).cache().shuffle(n)
    if repeat:
        ds = ds.repeat()
    ds = ds.map(augment, num_parallel_calls=tf.data.AUTOTUNE).batch(batch).prefetch(tf.data.AUTOTUNE)
    return ds, side, batch


def _pipeline(full: bool, repeat: bool) -> RealWorkload:
    ds, side, batch = _image_pipeline(full, repeat)
    model = _compile(_small_cnn(side))
    runs: dict[str, int] = {}
    _count_step_runs(model, runs)

    def step(element: Any) -> object:
        x, y = element
        return model.train_on_batch(x, y)

    name = "pipeline_repeat_cnn_step" if repeat else "pipeline_finite_cnn_step"
    return RealWorkload(name, batch, dataset=ds, step=step, models=(model,), step_runs=runs)


def pipeline_repeat(full: bool) -> RealWorkload:
    return _pipeline(full, repeat=True)


def pipeline_finite(full: bool) -> RealWorkload:
    return _pipeline(full, repeat=False)


def fit_steps_per_epoch(full: bool) -> RealWorkload:
    ds, side, batch = _image_pipeline(full, repeat=True)
    model = _compile(_small_cnn(side))
    runs: dict[str, int] = {}
    _count_step_runs(model, runs)
    steps = 20
    return RealWorkload("fit_steps_per_epoch", steps * batch,
                        call=lambda: model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False),
                        models=(model,), step_runs=runs)


def evaluate_and_predict(full: bool) -> RealWorkload:
    import tensorflow as tf

    ds, side, batch = _image_pipeline(full, repeat=True)
    model = _compile(_small_cnn(side))
    runs: dict[str, int] = {}
    _count_step_runs(model, runs)
    images = ds.map(lambda x, y: x)
    steps = 10

    def both() -> object:
        model.evaluate(ds, steps=steps, verbose=0)
        return model.predict(images, steps=steps, verbose=0)

    del tf
    return RealWorkload("evaluate_and_predict", 2 * steps * batch, call=both, models=(model,), step_runs=runs)


# Name -> builder(full). Order: cheap first. HEAVY ones trace for 10-20 s on
# 2 cores and run only at full size (benchmarks/).
WORKLOADS: dict[str, Callable[[bool], RealWorkload]] = {
    "cnn_train_on_batch": cnn_train_on_batch,
    "lstm_text_train_on_batch": lstm_text,
    "transformer_gradient_tape": transformer_tape,
    "pipeline_repeat_cnn_step": pipeline_repeat,
    "pipeline_finite_cnn_step": pipeline_finite,
    "fit_steps_per_epoch": fit_steps_per_epoch,
    "evaluate_and_predict": evaluate_and_predict,
    "mobilenet_v2_train_on_batch": mobilenet_v2,
    "efficientnet_b0_train_on_batch": efficientnet_b0,
    "resnet50_predict_on_batch": resnet50_predict,
}
HEAVY = frozenset({"mobilenet_v2_train_on_batch", "efficientnet_b0_train_on_batch", "resnet50_predict_on_batch"})
# Also left to full size, to keep the CI run under a minute: the Transformer's
# first call traces for 7-13 s on 2 busy cores, and fit/evaluate/predict take
# 0.2-0.6 s a call; tests/plugin/test_real_models.py counts the traces of
# fit/evaluate/predict on a tiny model instead.
FULL_SIZE_ONLY = HEAVY | {"transformer_gradient_tape", "fit_steps_per_epoch", "evaluate_and_predict"}
