"""The stored-baseline gate's validation suite: 25 unchanged tests of real TensorFlow work, plus changed variants.

Not collected by ``pytest benchmarks/`` (no ``test_`` prefix): ``benchmarks/stored_gate_study.py`` copies it
into a scratch directory as ``test_suite.py`` and runs it in fresh ``pytest --tfperf`` processes with the
plugin's defaults. Every test is a workload a TensorFlow user writes: ``tf.function`` math, ``tf.data``
pipelines, Keras 3 models trained with ``train_on_batch`` (MobileNetV2 at 64 px among them), a text model, a
Transformer block in a ``GradientTape`` loop, and a JPEG-decoding image pipeline feeding MobileNetV2.

The changed variants are judged against the unchanged test's baseline by the study:
``test_work[x1.11]`` ... ``test_work[x3-c]`` do 1.11x to 3x the matmul work of ``test_work[x1]`` per item
(throughput -10% to -67%; three copies of 3x, so that 3x gets as many verdicts as the A/A tests of three
processes); ``test_alloc[plus10]`` allocates 10% more TF memory per call than ``test_alloc[base]``.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


# -- tf.function math ------------------------------------------------------------------------------


def _chain(width: int, layers: int):
    weights = [tf.random.stateless_normal((width, width), seed=(7, i)) / width ** 0.5 for i in range(layers)]
    x0 = tf.random.stateless_normal((256, width), seed=(1, 1))

    @tf.function
    def step(x):
        for w in weights:
            x = tf.tanh(tf.matmul(x, w))
        return tf.reduce_sum(x)

    return step, x0


@pytest.mark.parametrize("width", [128, 256, 384, 512, 768])
def test_matmul_chain(tfperf, width):
    step, x0 = _chain(width, 4)
    tfperf(step, x0, items=256)


# Loop trips per call: x1 is the reference; the others are the same code doing more work for the same items.
# A call costs about 1.16 ms + 0.126 ms per trip here, so these give 1.11x ... 3x the time of x1.
FACTORS = {"x1": 30, "x1.11": 34, "x1.25": 40, "x1.54": 51, "x2": 69, "x3-a": 108, "x3-b": 108, "x3-c": 108}


@pytest.mark.parametrize("factor", list(FACTORS))
def test_work(tfperf, factor):
    w = tf.random.stateless_normal((192, 192), seed=(2, 2)) / 192 ** 0.5
    x0 = tf.random.stateless_normal((128, 192), seed=(3, 3))
    units = tf.constant(FACTORS[factor])

    @tf.function
    def step(x, n):
        i = tf.constant(0)

        def body(i, x):
            return i + 1, tf.tanh(tf.matmul(x, w))

        _, x = tf.while_loop(lambda i, x: i < n, body, (i, x))
        return tf.reduce_sum(x)

    tfperf(step, x0, units, items=128)


ALLOC_ROWS = {"base": 4096, "plus10": 4506}  # rows gathered per call: 4096 x 1024 float32 = 16 MiB; +10%


@pytest.mark.parametrize("size", list(ALLOC_ROWS))
def test_alloc(tfperf, size):
    table = tf.random.stateless_uniform((8192, 1024), seed=(5, 5))
    ids = tf.range(ALLOC_ROWS[size]) * 7 % 8192

    @tf.function
    def step(t, i):
        return tf.reduce_sum(tf.gather(t, i))  # the gathered rows are one tensor: its size is the change

    tfperf(step, table, ids, items=1)


@pytest.mark.parametrize("size", [64, 128])
def test_conv_forward(tfperf, size):
    kernel = tf.random.stateless_normal((3, 3, 16, 32), seed=(4, 4)) * 0.1
    images = tf.random.stateless_normal((8, size, size, 16), seed=(5, 5))

    @tf.function
    def step(x):
        return tf.reduce_mean(tf.nn.relu(tf.nn.conv2d(x, kernel, 1, "SAME")))

    tfperf(step, images, items=8)


def test_eager_ops(tfperf):
    a = tf.random.stateless_normal((128, 128), seed=(6, 6))

    def step():
        return tf.reduce_sum(tf.nn.softmax(tf.matmul(a, a)))

    tfperf(step, items=1)


def test_sort_topk(tfperf):
    values = tf.random.stateless_uniform((64, 4096), seed=(8, 8))

    @tf.function
    def step(v):
        return tf.math.top_k(v, k=32).values, tf.sort(v, axis=-1)

    tfperf(step, values, items=64)


def test_segment_sum(tfperf):
    data = tf.random.stateless_normal((100_000, 16), seed=(9, 9))
    ids = tf.sort(tf.random.stateless_uniform((100_000,), seed=(9, 1), maxval=1000, dtype=tf.int32))

    @tf.function
    def step(d, i):
        return tf.math.segment_sum(d, i)

    tfperf(step, data, ids, items=100_000)


def test_reduce_large(tfperf):
    values = tf.random.stateless_uniform((4096, 1024), seed=(13, 1))

    @tf.function
    def step(v):
        return tf.reduce_logsumexp(v, axis=1)

    tfperf(step, values, items=4096)


def test_fft(tfperf):
    signal = tf.complex(tf.random.stateless_normal((64, 4096), seed=(10, 1)), 0.0)

    @tf.function
    def step(s):
        return tf.abs(tf.signal.ifft(tf.signal.fft(s) * 0.5))

    tfperf(step, signal, items=64)


def test_embedding_bag(tfperf):
    table = tf.random.stateless_normal((20_000, 128), seed=(11, 1))
    ids = tf.random.stateless_uniform((512, 16), seed=(11, 2), maxval=20_000, dtype=tf.int32)

    @tf.function
    def step(t, i):
        return tf.reduce_sum(tf.reduce_mean(tf.gather(t, i), axis=1))

    tfperf(step, table, ids, items=512)


# -- tf.data ----------------------------------------------------------------------------------------


def test_data_map_batch(tfperf):
    ds = (tf.data.Dataset.range(1_000_000).map(lambda i: tf.cast(i, tf.float32) * 2.0 + 1.0,
                                               num_parallel_calls=AUTOTUNE)
          .batch(256).prefetch(AUTOTUNE))
    tfperf.iterate(ds, items=256)


def test_data_text(tfperf):
    lines = tf.constant([f"the quick brown fox {i} jumps over the lazy dog {i % 7}" for i in range(2048)])
    ds = (tf.data.Dataset.from_tensor_slices(lines).repeat()
          .map(lambda s: tf.strings.to_hash_bucket_fast(tf.strings.split(s), 10_000), num_parallel_calls=AUTOTUNE)
          .ragged_batch(64).prefetch(AUTOTUNE))
    tfperf.iterate(ds, items=64)


def test_data_feeds_step(tfperf):
    images = np.random.default_rng(0).random((512, 32, 32, 3), dtype=np.float32)
    ds = (tf.data.Dataset.from_tensor_slices(images).cache().repeat().shuffle(256)
          .map(lambda x: tf.image.random_flip_left_right(x), num_parallel_calls=AUTOTUNE)
          .batch(32).prefetch(AUTOTUNE))
    kernel = tf.random.stateless_normal((3, 3, 3, 16), seed=(12, 1)) * 0.1

    @tf.function
    def step(x):
        return tf.reduce_mean(tf.nn.conv2d(x, kernel, 1, "SAME"))

    tfperf.iterate(ds, items=32, step=step)


# -- Keras 3 --------------------------------------------------------------------------------------


def _fit_ready(model: keras.Model, x: np.ndarray, y: np.ndarray, loss: str):
    model.compile(optimizer="adam", loss=loss)
    return lambda: model.train_on_batch(x, y)


@pytest.mark.parametrize("batch", [32, 128])
def test_keras_mlp_train(tfperf, batch):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    rng = np.random.default_rng(0)
    step = _fit_ready(model, rng.random((batch, 64), dtype=np.float32), rng.integers(0, 10, batch),
                      "sparse_categorical_crossentropy")
    tfperf(step, items=batch, functions=[model])


def test_keras_cnn_train(tfperf):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    rng = np.random.default_rng(0)
    step = _fit_ready(model, rng.random((32, 32, 32, 3), dtype=np.float32), rng.integers(0, 10, 32),
                      "sparse_categorical_crossentropy")
    tfperf(step, items=32, functions=[model])


def test_keras_cnn_predict(tfperf):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    x = np.random.default_rng(0).random((64, 32, 32, 3), dtype=np.float32)
    tfperf(lambda: model.predict_on_batch(x), items=64, functions=[model])


def test_keras_text_lstm_train(tfperf):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((40,), dtype="int32"), keras.layers.Embedding(5000, 32),
                              keras.layers.LSTM(32), keras.layers.Dense(1)])
    rng = np.random.default_rng(0)
    step = _fit_ready(model, rng.integers(0, 5000, (32, 40)).astype("int32"), rng.random((32, 1)), "mse")
    tfperf(step, items=32, functions=[model])


def test_keras_transformer_tape(tfperf):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 64))
    x = inputs
    for _ in range(2):
        attn = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(x, x)
        x = keras.layers.LayerNormalization()(x + attn)
        ff = keras.layers.Dense(64)(keras.layers.Dense(128, activation="relu")(x))
        x = keras.layers.LayerNormalization()(x + ff)
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(x)))
    optimizer = keras.optimizers.Adam()
    rng = np.random.default_rng(0)
    xb = tf.constant(rng.random((16, 32, 64), dtype=np.float32))
    yb = tf.constant(rng.random((16, 1), dtype=np.float32))

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    tfperf(step, xb, yb, items=16)


def test_mobilenet_train(tfperf):
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(input_shape=(64, 64, 3), weights=None, classes=10, alpha=0.5)
    rng = np.random.default_rng(0)
    step = _fit_ready(model, rng.random((8, 64, 64, 3), dtype=np.float32), rng.integers(0, 10, 8),
                      "sparse_categorical_crossentropy")
    tfperf(step, items=8, functions=[model])
