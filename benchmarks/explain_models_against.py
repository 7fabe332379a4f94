"""Model regressions explained on the user's own path: ``pytest --tfperf --tfperf-against``, held out.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/explain_models_against.py [--sessions 3]

Issue 26, item 7: held-out cases written after every rule and constant of the
explanation was frozen (commit 2525c3f, the code this file was written on),
and run once; their figures are published whatever they are. Unlike
``explain_heldout.py`` (three arms in one process, in its own harness), each
case runs as a user meets it, like ``explain_pipelines_against.py`` does for
pipelines: a throwaway git repository, revision A healthy, revision B the
regression, ``pytest --tfperf --tfperf-against=HEAD~1`` on B in a fresh pair
of processes per session, explanations on by default for a red verdict.

The cases are Keras 3 models and training steps a user writes (a
keras.applications model with ``weights=None``, a text model under
``model.fit`` on a tf.data dataset with TensorFlow's default options, a
custom ``GradientTape`` step, a small transformer block, a convolutional
net, a step with a new group of short ops), each plant sized for about
20-40% slower steps: a 10% change is beyond what this 2-core VM lets the gate
see in Keras tests (it states 11-17% there).

The judge was written with the cases, before any run: the report's headline
(``reports.explain_headline``'s order, as ``explain_pipelines_against.named_first``
reads it) must name the planted group, recognised from its key. Two judges looked for Keras's numbered
names (``planted_conv_``, ``planted_bn_``) where the profile groups a layer under its name without the
number (``layer:sequential/planted_conv``) and counted every hit as a miss; they match the grouped name
since 2026-11-27, after the committed runs, whose ``planted_first`` keeps what was judged then (the
evidence gives both counts).
``--plain CASE ...`` times each case's two steps in one process, taking turns,
without the plugin: how much slower the plant is where nothing else runs.
Writes ``benchmarks/results/explain_models_against.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from explain_heldout10_cases import HELDOUT10  # noqa: E402
from explain_pipelines_against import find_explanation, git, named_first, said_nothing_moved  # noqa: E402

# Each case's module defines build() -> (a no-argument step, items per call). PLANTED is False in revision A and
# True in revision B; nothing else differs.
CASES: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "mobilenetv2_conv_head": (
        "MobileNetV2 (weights=None, alpha 0.35, 64x64) inference: a 3x3 Conv2D(256) head added on the backbone",
        '''
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.MobileNetV2(weights=None, include_top=False, alpha=0.35, input_shape=(64, 64, 3))(inputs)
    if PLANTED:
        h = keras.layers.Conv2D(256, 3, padding="same", activation="relu", name="planted_head_conv")(h)
    pooled = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    outputs = keras.layers.Dense(10, name="touched_out")(pooled)
    model = keras.Model(inputs, outputs)
    x = tf.constant(RNG.random((16, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 16
''', lambda key: "planted_head_conv" in key),
    "lstm_fit_token_dense": (
        "Embedding + LSTM text classifier under model.fit on a tf.data dataset: a Dense(192) and a Dense(32) "
        "back to the embedding's width added on every token",
        '''
def build():
    layers = [keras.Input((64,), dtype="int32"), keras.layers.Embedding(3000, 32)]
    if PLANTED:
        layers += [keras.layers.Dense(192, activation="relu", name="planted_token_dense"),
                   keras.layers.Dense(32, name="planted_token_proj")]
    layers += [keras.layers.LSTM(48), keras.layers.Dense(2)]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = RNG.integers(0, 3000, (2048, 64)).astype(np.int32)
    labels = RNG.integers(0, 2, 2048).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((tokens, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)), 4 * 32
''', lambda key: "planted_token_" in key),
    "gradient_tape_layer_widened": (
        "a custom GradientTape training step on a Keras MLP: its existing middle Dense 512 -> 768 units",
        '''
def build():
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(768 if PLANTED else 512, activation="relu", name="planted_middle"),
                              keras.layers.Dense(256, activation="relu", name="touched_next"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.01)
    x = tf.constant(RNG.random((128, 256), dtype=np.float32))
    y = tf.constant(RNG.integers(0, 10, 128).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step, 128
''', lambda key: "planted_middle" in key),
    "transformer_ffn_widened": (
        "a one-block text transformer (MultiHeadAttention + feed-forward) train_on_batch: the FFN 128 -> 512 units",
        '''
def build():
    inputs = keras.Input((48,), dtype="int32")
    h = keras.layers.Embedding(2000, 64)(inputs)
    h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(4, 16)(h, h))
    f = keras.layers.Dense(512 if PLANTED else 128, activation="relu", name="planted_ffn")(h)
    h = keras.layers.LayerNormalization()(h + keras.layers.Dense(64, name="planted_ffn_out")(f))
    outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model(inputs, outputs)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 2000, (32, 48)).astype(np.int32)
    y = RNG.integers(0, 2, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
''', lambda key: "planted_ffn" in key),
    "cnn_cost_spread": (
        "a 3-layer CNN train_on_batch: every Conv2D 32 -> 36 filters (the cost spread over three layers)",
        '''
def build():
    width = 36 if PLANTED else 32
    model = keras.Sequential([keras.Input((32, 32, 3))]
                             + [keras.layers.Conv2D(width, 3, padding="same", activation="relu", name=f"planted_conv_{i}")
                                for i in range(3)]
                             + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, name="touched_out")])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((32, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
''', lambda key: "planted_conv" in key),
    "step_short_gathers": (
        "a tf.function matmul step: 64 of its input's columns taken one by one (32 gathers, 32 slices) and stacked "
        "back (a new group of short ops)",
        '''
def build():
    w1 = tf.Variable(RNG.random((128, 256), dtype=np.float32) * 0.05)
    w2 = tf.Variable(RNG.random((256, 128), dtype=np.float32) * 0.05)
    x = tf.constant(RNG.random((256, 128), dtype=np.float32))

    @tf.function
    def step():
        h = x
        if PLANTED:
            with tf.name_scope("planted_gathers"):
                columns = [tf.gather(h, i, axis=1) for i in range(32)] + [h[:, 32 + i] for i in range(32)]
                h = tf.concat([tf.stack(columns, axis=1), h[:, 64:]], axis=1)
        return tf.reduce_sum(tf.tanh(tf.tanh(h @ w1) @ w2))

    return step, 256
''', lambda key: "planted_gathers" in key or any(op in key for op in ("Gather", "StridedSlice", "Pack"))),
}

# Written after the attribution read its spreads from testable groups only, each group's from the others
# (commit a85f2b2, chosen on CASES' run), before any run of these.
HELDOUT2: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "efficientnet_head_dense": (
        "EfficientNetB0 (weights=None, 64x64) inference: a Dense(8192) added to its pooled head",
        '''
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.EfficientNetB0(weights=None, include_top=False, input_shape=(64, 64, 3),
                                          pooling="avg")(inputs)
    if PLANTED:
        h = keras.layers.Dense(8192, activation="relu", name="planted_head_dense")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((8, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 8
''', lambda key: "planted_head_dense" in key),
    "gru_fit_conv_added": (
        "Embedding + GRU text classifier under model.fit on a tf.data dataset: a Conv1D(128, 7) and a 1x1 Conv1D back "
        "to the embedding's width added before the GRU",
        '''
def build():
    layers = [keras.Input((80,), dtype="int32"), keras.layers.Embedding(4000, 32)]
    if PLANTED:
        layers += [keras.layers.Conv1D(128, 7, padding="same", activation="relu", name="planted_conv1d"),
                   keras.layers.Conv1D(32, 1, name="planted_conv1d_proj")]
    layers += [keras.layers.GRU(32), keras.layers.Dense(2)]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = RNG.integers(0, 4000, (2048, 80)).astype(np.int32)
    labels = RNG.integers(0, 2, 2048).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((tokens, labels)).shuffle(512).repeat().batch(64).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 64
''', lambda key: "planted_conv1d" in key),
    "mlp_activation_gelu": (
        "an MLP train_on_batch: its widest Dense layer's activation relu -> gelu (exact, with erf): the same layer slower",
        '''
def build():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(2048, activation="gelu" if PLANTED else "relu", name="planted_dense"),
                              keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((512, 64), dtype=np.float32)
    y = RNG.integers(0, 10, 512).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 512
''', lambda key: "planted_dense" in key),
    "attention_heads_doubled": (
        "a text classifier with one MultiHeadAttention layer train_on_batch: 2 heads -> 3 heads of 32",
        '''
def build():
    inputs = keras.Input((64,), dtype="int32")
    h = keras.layers.Embedding(3000, 64)(inputs)
    h = h + keras.layers.MultiHeadAttention(3 if PLANTED else 2, 32, name="planted_mha")(h, h)
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h))
    model = keras.Model(inputs, keras.layers.Dense(2)(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 3000, (32, 64)).astype(np.int32)
    y = RNG.integers(0, 2, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
''', lambda key: "planted_mha" in key),
    "fit_augmentation_layer": (
        "a small CNN under model.fit on a tf.data dataset: a RandomTranslation augmentation layer added in the model",
        '''
def build():
    layers = [keras.Input((32, 32, 3))]
    if PLANTED:
        layers.append(keras.layers.RandomTranslation(0.1, 0.1, name="planted_translate"))
    layers += [keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(),
               keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
               keras.layers.Dense(10)]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = RNG.random((1024, 32, 32, 3), dtype=np.float32)
    labels = RNG.integers(0, 10, 1024).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)), 4 * 32
''', lambda key: "planted_translate" in key),
    "parallel_branch_widened": (
        "a tf.function step of four independent matmul branches summed (a parallel-op graph): one branch's hidden "
        "width 256 -> 448",
        '''
def build():
    x = tf.constant(RNG.random((256, 256), dtype=np.float32))
    widths = [448 if (PLANTED and i == 2) else 256 for i in range(4)]
    ins = [tf.Variable(RNG.random((256, w), dtype=np.float32) * 0.05) for w in widths]
    outs = [tf.Variable(RNG.random((w, 128), dtype=np.float32) * 0.05) for w in widths]

    @tf.function
    def step():
        total = 0.0
        for i in range(4):
            with tf.name_scope("planted_branch" if i == 2 else f"branch_{i}"):
                total += tf.reduce_sum(tf.tanh(tf.tanh(x @ ins[i]) @ outs[i]))
        return total

    return step, 256
''', lambda key: "planted_branch" in key),
}
# Written after the rule that tests each layer and op across three pairs of processes was frozen (commit
# ad572c2), before any run of these; sized with --plain only.
HELDOUT3: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "mobilenetv3_fit_dense_head": (
        "MobileNetV3Small (weights=None, 64x64) under model.fit on a tf.data dataset: two Dense(1024) added to its "
        "pooled head",
        '''
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.MobileNetV3Small(weights=None, include_top=False, input_shape=(64, 64, 3),
                                            pooling="avg", include_preprocessing=False)(inputs)
    if PLANTED:
        h = keras.layers.Dense(1024, activation="relu", name="planted_head_dense")(h)
        h = keras.layers.Dense(1024, activation="relu", name="planted_head_dense_2")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = RNG.random((256, 64, 64, 3), dtype=np.float32)
    labels = RNG.integers(0, 10, 256).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(16).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 16
''', lambda key: "planted_head_dense" in key),
    "bilstm_units_widened": (
        "a bidirectional LSTM text classifier train_on_batch: its existing LSTM 32 -> 64 units a direction",
        '''
def build():
    model = keras.Sequential([keras.Input((48,), dtype="int32"), keras.layers.Embedding(3000, 32),
                              keras.layers.Bidirectional(keras.layers.LSTM(64 if PLANTED else 32),
                                                         name="planted_bilstm"),
                              keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 3000, (32, 48)).astype(np.int32)
    y = RNG.integers(0, 2, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
''', lambda key: "planted_bilstm" in key),
    "audio_fit_kernel_widened": (
        "an audio-like 1D CNN on 4000-sample clips under model.fit on a tf.data dataset: its middle Conv1D's kernel "
        "9 -> 17",
        '''
def build():
    model = keras.Sequential([keras.Input((4000, 1)), keras.layers.Conv1D(16, 16, strides=4, activation="relu"),
                              keras.layers.MaxPooling1D(2),
                              keras.layers.Conv1D(32, 17 if PLANTED else 9, padding="same", activation="relu",
                                                  name="planted_conv_mid"),
                              keras.layers.MaxPooling1D(4), keras.layers.Conv1D(32, 5, activation="relu"),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(8)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    clips = RNG.random((256, 4000, 1), dtype=np.float32)
    labels = RNG.integers(0, 8, 256).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((clips, labels)).repeat().batch(16).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 16
''', lambda key: "planted_conv_mid" in key),
    "tape_l2_per_variable": (
        "a custom GradientTape step on a Keras MLP: an L2 penalty summed variable by variable (a new group of short "
        "ops)",
        '''
def build():
    model = keras.Sequential([keras.Input((64,))] + [keras.layers.Dense(64, activation="relu") for _ in range(6)]
                             + [keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.01)
    x = tf.constant(RNG.random((64, 64), dtype=np.float32))
    y = tf.constant(RNG.integers(0, 10, 64).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            if PLANTED:
                with tf.name_scope("planted_l2"):
                    for w in model.trainable_variables:
                        for part in tf.split(w, 4 if w.shape[0] % 4 == 0 else 1, axis=0):
                            loss += 1e-4 * tf.reduce_sum(tf.square(part))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step, 64
''', lambda key: "planted_l2" in key or key in ("op:Square", "op:Split")),
    "bag_of_words_embedding_widened": (
        "a bag-of-words text classifier train_on_batch: the Embedding 64 -> 96 wide (the cost spread over it and "
        "the Dense that reads it)",
        '''
def build():
    width = 96 if PLANTED else 64
    model = keras.Sequential([keras.Input((128,), dtype="int32"),
                              keras.layers.Embedding(20000, width, name="planted_embedding"),
                              keras.layers.GlobalAveragePooling1D(),
                              keras.layers.Dense(256, activation="relu", name="planted_reader"),
                              keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 20000, (64, 128)).astype(np.int32)
    y = RNG.integers(0, 4, 64).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 64
''', lambda key: "planted_embedding" in key or "planted_reader" in key),
    "cnn_fit_batchnorm_added": (
        "a small CNN under model.fit on a tf.data dataset: a BatchNormalization added after each of its two Conv2D "
        "layers",
        '''
def build():
    layers = [keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, padding="same", activation="relu")]
    if PLANTED:
        layers.append(keras.layers.BatchNormalization(name="planted_bn_0"))
    layers += [keras.layers.MaxPooling2D(), keras.layers.Conv2D(48, 3, padding="same", activation="relu")]
    if PLANTED:
        layers.append(keras.layers.BatchNormalization(name="planted_bn_1"))
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = RNG.random((512, 32, 32, 3), dtype=np.float32)
    labels = RNG.integers(0, 10, 512).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 32
''', lambda key: "planted_bn" in key),
}
# Written after e061b97 (the measured change is the verdict's own estimate), before any run of them, with the
# judge beside each; sized with --plain only.
HELDOUT4: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "nasnetmobile_head_conv": (
        "NASNetMobile (weights=None, 64x64) inference in a tf.function, a graph of parallel branches: a 3x3 "
        "Conv2D(768) added on its last feature map",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.NASNetMobile(weights=None, include_top=False, input_shape=(64, 64, 3))(inputs)
    if PLANTED:
        h = keras.layers.Conv2D(768, 3, padding="same", name="planted_head_conv")(h)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(h))
    x = tf.constant(RNG.random((8, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 8
""", lambda key: "planted_head_conv" in key),
    "efficientnetv2_fit_head_widened": (
        "EfficientNetV2B0 (weights=None, 32x32) under model.fit on a tf.data dataset: its Dense head 256 -> 6144 "
        "wide",
        """
def build():
    inputs = keras.Input((32, 32, 3))
    h = keras.applications.EfficientNetV2B0(weights=None, include_top=False, input_shape=(32, 32, 3),
                                            pooling="avg", include_preprocessing=False)(inputs)
    h = keras.layers.Dense(6144 if PLANTED else 256, activation="relu", name="planted_head")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = RNG.random((128, 32, 32, 3), dtype=np.float32)
    labels = RNG.integers(0, 10, 128).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(16).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 16
""", lambda key: "planted_head" in key),
    "text_cnn_kernel_widened": (
        "a Conv1D text classifier train_on_batch: its Conv1D kernel 5 -> 7 tokens",
        """
def build():
    model = keras.Sequential([keras.Input((200,), dtype="int32"), keras.layers.Embedding(10000, 64),
                              keras.layers.Conv1D(128, 7 if PLANTED else 5, activation="relu", name="planted_conv1d"),
                              keras.layers.GlobalMaxPooling1D(), keras.layers.Dense(1)])
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    x = RNG.integers(0, 10000, (64, 200)).astype(np.int32)
    y = RNG.integers(0, 2, (64, 1)).astype(np.float32)
    return (lambda: model.train_on_batch(x, y)), 64
""", lambda key: "planted_conv1d" in key),
    "gru_stack_cost_spread": (
        "two stacked GRUs train_on_batch: both 48 -> 72 units (the cost spread over two layers)",
        """
def build():
    width = 72 if PLANTED else 48
    model = keras.Sequential([keras.Input((40, 16)),
                              keras.layers.GRU(width, return_sequences=True, name="planted_gru_first"),
                              keras.layers.GRU(width, name="planted_gru_second"), keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((32, 40, 16), dtype=np.float32)
    y = RNG.integers(0, 4, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
""", lambda key: "planted_gru" in key),
    "mlp_short_ops_layer": (
        "an MLP train_on_batch: a layer of 16 short slice-and-scale ops (and their gradients) added between its "
        "Dense layers",
        """
class PlantedShortOps(keras.layers.Layer):
    def call(self, x):
        return keras.ops.concatenate([x[:, i:i + 6] * (1.0 + i / 100.0) for i in range(0, 96, 6)], axis=1)


def build():
    layers = [keras.Input((96,)), keras.layers.Dense(96, activation="relu")]
    if PLANTED:
        layers.append(PlantedShortOps(name="planted_short_ops"))
    layers += [keras.layers.Dense(96, activation="relu"), keras.layers.Dense(10)]
    model = keras.Sequential(layers)
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((64, 96), dtype=np.float32)
    y = RNG.integers(0, 10, 64).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 64
""", lambda key: "planted_short_ops" in key),
    "tape_residual_block_added": (
        "a small residual CNN trained with a GradientTape in a tf.function: one residual block (two Conv2D and "
        "an Add) added",
        """
def block(h, name):
    r = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name=name + "_a")(h)
    r = keras.layers.Conv2D(32, 3, padding="same", name=name + "_b")(r)
    return keras.layers.Add(name=name + "_add")([h, r])


def build():
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    for i in range(4):
        h = block(h, f"block{i}")
    if PLANTED:
        h = block(h, "planted_block")
    model = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(h)))
    opt = keras.optimizers.SGD(0.01)
    x = tf.constant(RNG.random((16, 32, 32, 3), dtype=np.float32))
    y = tf.constant(RNG.integers(0, 10, 16).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return step, 16
""", lambda key: "planted_block" in key),
}
# Written after 5571d5c (causes ranked by the part of their change their test is sure of), before any run of
# these, with the judge beside each, by a helper that did not read the explanation's code; sized with --plain only.
HELDOUT5: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "mobilenetv3large_head_kernel_widened": (
        "MobileNetV3Large (weights=None, 64x64) inference in a tf.function: its Conv2D(320) head's kernel 1x1 -> 3x3",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.MobileNetV3Large(weights=None, include_top=False, input_shape=(64, 64, 3),
                                            include_preprocessing=False)(inputs)
    h = keras.layers.Conv2D(320, 3 if PLANTED else 1, padding="same", activation="relu", name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((4, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 4
""", lambda key: "planted_head_conv" in key),
    "densenet121_head_dense_widened": (
        "DenseNet121 (weights=None, 32x32) inference in a tf.function: its Dense head 256 -> 10240 units",
        """
def build():
    inputs = keras.Input((32, 32, 3))
    h = keras.applications.DenseNet121(weights=None, include_top=False, input_shape=(32, 32, 3), pooling="avg")(inputs)
    h = keras.layers.Dense(10240 if PLANTED else 256, activation="relu", name="planted_head_dense")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((4, 32, 32, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 4
""", lambda key: "planted_head_dense" in key),
    "mobilenet_train_head_conv_widened": (
        "MobileNet (v1, weights=None, alpha 0.25, 96x96) train_on_batch: its 3x3 Conv2D head 128 -> 640 filters",
        """
def build():
    inputs = keras.Input((96, 96, 3))
    h = keras.applications.MobileNet(weights=None, include_top=False, alpha=0.25, input_shape=(96, 96, 3))(inputs)
    h = keras.layers.Conv2D(640 if PLANTED else 128, 3, padding="same", activation="relu",
                            name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((8, 96, 96, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 8).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 8
""", lambda key: "planted_head_conv" in key),
    "char_cnn_fit_filters_widened": (
        "a character-level Conv1D text classifier under model.fit on a tf.data dataset: its middle Conv1D 64 -> 80 "
        "filters",
        """
def build():
    model = keras.Sequential([keras.Input((256,), dtype="int32"), keras.layers.Embedding(70, 32),
                              keras.layers.Conv1D(64, 7, activation="relu"), keras.layers.MaxPooling1D(3),
                              keras.layers.Conv1D(80 if PLANTED else 64, 7, activation="relu",
                                                  name="planted_conv_mid"),
                              keras.layers.MaxPooling1D(3, name="touched_pool"),
                              keras.layers.Conv1D(64, 3, activation="relu", name="touched_conv_last"),
                              keras.layers.GlobalMaxPooling1D(), keras.layers.Dense(4)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    chars = RNG.integers(0, 70, (512, 256)).astype(np.int32)
    labels = RNG.integers(0, 4, 512).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((chars, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 32
""", lambda key: "planted_conv_mid" in key),
    "audio_stft_tape_kernel_widened": (
        "an audio classifier on 8000-sample clips (an STFT front end, then a small CNN) trained with a GradientTape "
        "in a tf.function: its second Conv2D's kernel 3x3 -> 3x6",
        """
class LogSpectrogram(keras.layers.Layer):
    def call(self, x):
        return tf.math.log(tf.abs(tf.signal.stft(x, 256, 128)) + 1e-6)[..., None]


def build():
    model = keras.Sequential([keras.Input((8000,)), LogSpectrogram(name="spectrogram"),
                              keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(),
                              keras.layers.Conv2D(32, (3, 6) if PLANTED else 3, padding="same", activation="relu",
                                                  name="planted_conv"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.random((16, 8000), dtype=np.float32) - 0.5)
    y = tf.constant(RNG.integers(0, 10, 16).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 16
""", lambda key: "planted_conv" in key),
    "separable_cnn_fit_cost_spread": (
        "a depthwise-separable CNN under model.fit on a tf.data dataset: every SeparableConv2D 32 -> 36 filters (the "
        "cost spread over four layers)",
        """
def build():
    width = 36 if PLANTED else 32
    model = keras.Sequential([keras.Input((32, 32, 3)),
                              keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")]
                             + [keras.layers.SeparableConv2D(width, 3, padding="same", activation="relu",
                                                             name=f"planted_sepconv_{i}") for i in range(4)]
                             + [keras.layers.GlobalAveragePooling2D(name="touched_pool"),
                                keras.layers.Dense(10, name="touched_out")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = RNG.random((512, 32, 32, 3), dtype=np.float32)
    labels = RNG.integers(0, 10, 512).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 32
""", lambda key: "planted_sepconv" in key),
    "audio_dilated_stack_cost_spread": (
        "a WaveNet-style stack of five dilated causal Conv1D over a 4096-sample waveform train_on_batch: every "
        "dilated layer 32 -> 36 channels (the cost spread over five layers)",
        """
def build():
    width = 36 if PLANTED else 32
    model = keras.Sequential([keras.Input((4096, 1)), keras.layers.Conv1D(32, 4, strides=4, name="frontend")]
                             + [keras.layers.Conv1D(width, 3, dilation_rate=2 ** i, padding="causal",
                                                    activation="relu", name=f"planted_dilated_{i}")
                                for i in range(5)]
                             + [keras.layers.GlobalAveragePooling1D(name="touched_pool"),
                                keras.layers.Dense(8, name="touched_out")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((16, 4096, 1), dtype=np.float32) - 0.5
    y = RNG.integers(0, 8, 16).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 16
""", lambda key: "planted_dilated" in key),
    "tabular_fit_short_ops_layer": (
        "a tabular MLP under model.fit on a tf.data dataset: a layer of per-column short ops (128 slices, each scaled "
        "by its neighbour's tanh, concatenated back) added before its first Dense",
        """
class PlantedColumnScale(keras.layers.Layer):
    def call(self, x):
        columns = []
        for i in range(128):
            j = (i + 1) % 128
            columns.append(x[:, i:i + 1] * (1.0 + 0.01 * keras.ops.tanh(x[:, j:j + 1])))
        return keras.ops.concatenate(columns, axis=1)


def build():
    layers = [keras.Input((128,))]
    if PLANTED:
        layers.append(PlantedColumnScale(name="planted_column_scale"))
    layers += [keras.layers.Dense(128, activation="relu"), keras.layers.Dense(128, activation="relu"),
               keras.layers.Dense(2)]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rows = RNG.random((2048, 128), dtype=np.float32)
    labels = RNG.integers(0, 2, 2048).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((rows, labels)).repeat().batch(128).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)), 4 * 128
""", lambda key: "planted_column_scale" in key),
    "inception_modules_branch_widened": (
        "a small Inception-style CNN (two modules of parallel 1x1, 3x3, 5x5 and pool branches) train_on_batch: the "
        "second module's 5x5 branch 16 -> 64 filters",
        """
def module(h, name, width5, planted=False):
    b1 = keras.layers.Conv2D(16, 1, activation="relu", name=name + "_1x1")(h)
    b3 = keras.layers.Conv2D(16, 1, activation="relu", name=name + "_3x3_reduce")(h)
    b3 = keras.layers.Conv2D(24, 3, padding="same", activation="relu", name=name + "_3x3")(b3)
    b5 = keras.layers.Conv2D(8, 1, activation="relu", name=name + "_5x5_reduce")(h)
    b5 = keras.layers.Conv2D(width5, 5, padding="same", activation="relu",
                             name="planted_branch_5x5" if planted else name + "_5x5")(b5)
    bp = keras.layers.MaxPooling2D(3, 1, padding="same", name=name + "_pool")(h)
    bp = keras.layers.Conv2D(16, 1, activation="relu", name=name + "_pool_proj")(bp)
    return keras.layers.Concatenate(name="touched_concat" if planted else name + "_concat")([b1, b3, b5, bp])


def build():
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="stem")(inputs)
    h = keras.layers.MaxPooling2D(name="stem_pool")(h)
    h = module(h, "mixed_a", 16)
    h = module(h, "mixed_b", 64 if PLANTED else 16, planted=True)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((32, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
""", lambda key: "planted_branch" in key),
    "vit_blocks_mlp_cost_spread": (
        "a small ViT (4x4 patches of 32x32 images, two blocks) train_on_batch: every block's MLP 128 -> 320 units "
        "(the cost spread over four Dense layers)",
        """
def build():
    hidden = 320 if PLANTED else 128
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Reshape((64, 64))(keras.layers.Conv2D(64, 4, strides=4, name="patches")(inputs))
    for i in range(2):
        a = keras.layers.LayerNormalization()(h)
        h = h + keras.layers.MultiHeadAttention(4, 16)(a, a)
        a = keras.layers.LayerNormalization()(h)
        f = keras.layers.Dense(hidden, activation="gelu", name=f"planted_mlp_{i}")(a)
        h = h + keras.layers.Dense(64, name=f"planted_mlp_out_{i}")(f)
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h))
    model = keras.Model(inputs, keras.layers.Dense(10)(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((32, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
""", lambda key: "planted_mlp" in key),
}
# Written after 9fb03c8, before any run of these, with the judge beside each, by a helper that did not read the
# explanation's code; most plants spread their cost over several layers; sized with --plain only.
HELDOUT6: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "resnet50v2_head_conv_added": (
        "ResNet50V2 (weights=None, 64x64) inference in a tf.function: a 3x3 Conv2D(256) added on its last feature map",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.ResNet50V2(weights=None, include_top=False, input_shape=(64, 64, 3))(inputs)
    if PLANTED:
        h = keras.layers.Conv2D(256, 3, padding="same", activation="relu", name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((1, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 1
""", lambda key: "planted_head_conv" in key),
    "recommender_fit_mlp_widened": (
        "an embedding-bag recommender (user, item and a bag of 50 history items) under model.fit on a tf.data "
        "dataset: its first MLP Dense 512 -> 2048 units",
        """
def build():
    user = keras.Input((1,), dtype="int32", name="user")
    history = keras.Input((50,), dtype="int32", name="history")
    item = keras.Input((1,), dtype="int32", name="item")
    items = keras.layers.Embedding(5000, 32, name="item_embedding")
    u = keras.layers.Flatten(name="user_flat")(keras.layers.Embedding(1000, 32, name="user_embedding")(user))
    bag = keras.layers.GlobalAveragePooling1D(name="history_bag")(items(history))
    h = keras.layers.Concatenate(name="features")([u, bag, keras.layers.Flatten(name="item_flat")(items(item))])
    h = keras.layers.Dense(2048 if PLANTED else 512, activation="relu", name="planted_mlp_first")(h)
    h = keras.layers.Dense(32, activation="relu", name="touched_mlp_second")(h)
    model = keras.Model([user, history, item], keras.layers.Dense(1, name="score")(h))
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    users = RNG.integers(0, 1000, (4096, 1)).astype(np.int32)
    histories = RNG.integers(0, 5000, (4096, 50)).astype(np.int32)
    candidates = RNG.integers(0, 5000, (4096, 1)).astype(np.int32)
    labels = RNG.integers(0, 2, (4096, 1)).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices(((users, histories, candidates), labels))
    ds = ds.repeat().batch(256).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 256
""", lambda key: "planted_mlp_first" in key),
    "multi_input_text_table_conv_widened": (
        "a two-input model (tokens through Embedding + Conv1D, a table of 40 features through two Dense) "
        "train_on_batch: the text branch's Conv1D 64 -> 96 filters",
        """
def build():
    text = keras.Input((120,), dtype="int32", name="text")
    table = keras.Input((40,), name="table")
    t = keras.layers.Embedding(8000, 48, name="text_embedding")(text)
    t = keras.layers.Conv1D(96 if PLANTED else 64, 5, activation="relu", name="planted_text_conv")(t)
    t = keras.layers.GlobalMaxPooling1D(name="touched_text_pool")(t)
    s = keras.layers.Dense(128, activation="relu", name="table_dense")(table)
    s = keras.layers.Dense(64, activation="relu", name="table_dense_out")(s)
    h = keras.layers.Concatenate(name="touched_concat")([t, s])
    h = keras.layers.Dense(64, activation="relu", name="touched_joint")(h)
    model = keras.Model([text, table], keras.layers.Dense(3, name="classes")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = RNG.integers(0, 8000, (64, 120)).astype(np.int32)
    features = RNG.random((64, 40), dtype=np.float32)
    y = RNG.integers(0, 3, 64).astype(np.int32)
    return (lambda: model.train_on_batch([tokens, features], y)), 64
""", lambda key: "planted_text_conv" in key),
    "unet1d_denoiser_fit_cost_spread": (
        "a 1-D U-Net denoiser (two levels down, two up, skip connections) under model.fit on a tf.data dataset: "
        "every Conv1D 32 -> 36 channels a level (the cost spread over five layers)",
        """
def conv(h, width, name):
    return keras.layers.Conv1D(width, 5, padding="same", activation="relu", name=name)(h)


def build():
    w = 36 if PLANTED else 32
    inputs = keras.Input((128, 1))
    e0 = conv(inputs, w, "planted_unet_enc_0")
    e1 = conv(keras.layers.MaxPooling1D(2, name="pool_0")(e0), 2 * w, "planted_unet_enc_1")
    b = conv(keras.layers.MaxPooling1D(2, name="pool_1")(e1), 2 * w, "planted_unet_bottom")
    d1 = keras.layers.Concatenate(name="touched_skip_1")([keras.layers.UpSampling1D(2, name="touched_up_1")(b), e1])
    d1 = conv(d1, 2 * w, "planted_unet_dec_1")
    d0 = keras.layers.Concatenate(name="touched_skip_0")([keras.layers.UpSampling1D(2, name="touched_up_0")(d1), e0])
    d0 = conv(d0, w, "planted_unet_dec_0")
    model = keras.Model(inputs, keras.layers.Conv1D(1, 1, name="touched_out")(d0))
    model.compile("adam", "mse")
    clean = np.sin(np.linspace(0, 15, 128, dtype=np.float32))[None, :, None] * RNG.random((256, 1, 1), dtype=np.float32)
    noisy = clean + 0.3 * RNG.standard_normal((256, 128, 1), dtype=np.float32)
    ds = tf.data.Dataset.from_tensor_slices((noisy, clean)).repeat().batch(16).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 16
""", lambda key: "planted_unet" in key),
    "conv_autoencoder_tape_cost_spread": (
        "a convolutional autoencoder (strided Conv2D down, Conv2DTranspose up) trained with a GradientTape in a "
        "tf.function: every hidden layer 32 -> 36 filters a level (the cost spread over four layers)",
        """
def build():
    w = 36 if PLANTED else 32
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(w, 3, strides=2, padding="same", activation="relu", name="planted_ae_enc_0"),
        keras.layers.Conv2D(2 * w, 3, strides=2, padding="same", activation="relu", name="planted_ae_enc_1"),
        keras.layers.Conv2D(2 * w, 3, padding="same", activation="relu", name="planted_ae_code"),
        keras.layers.Conv2DTranspose(w, 3, strides=2, padding="same", activation="relu", name="planted_ae_dec_0"),
        keras.layers.Conv2DTranspose(3, 3, strides=2, padding="same", name="touched_ae_out")])
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.random((16, 32, 32, 3), dtype=np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 16
""", lambda key: "planted_ae_" in key),
    "moe_experts_train_cost_spread": (
        "a mixture-of-experts block (six parallel Dense experts mixed by a softmax gate) train_on_batch: every "
        "expert's hidden layer 256 -> 336 units (the cost spread over twelve layers)",
        """
def build():
    hidden = 336 if PLANTED else 256
    inputs = keras.Input((128,))
    gate = keras.layers.Dense(6, activation="softmax", name="gate")(inputs)
    experts = []
    for i in range(6):
        e = keras.layers.Dense(hidden, activation="relu", name=f"planted_expert_{i}")(inputs)
        experts.append(keras.layers.Dense(64, name=f"planted_expert_out_{i}")(e))
    mixed = keras.ops.einsum("be,bed->bd", gate, keras.ops.stack(experts, axis=1))
    model = keras.Model(inputs, keras.layers.Dense(10, name="classes")(mixed))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((1024, 128), dtype=np.float32)
    y = RNG.integers(0, 10, 1024).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 1024
""", lambda key: "planted_expert" in key),
    "attention_encoder_key_dim_cost_spread": (
        "a three-block attention encoder over 64 tokens, inference in a tf.function: every MultiHeadAttention's "
        "key_dim 16 -> 32 (the cost spread over three layers)",
        """
def build():
    key_dim = 32 if PLANTED else 16
    inputs = keras.Input((64,), dtype="int32")
    h = keras.layers.Embedding(4000, 64, name="tokens")(inputs)
    for i in range(3):
        a = keras.layers.MultiHeadAttention(4, key_dim, name=f"planted_mha_{i}")(h, h)
        h = keras.layers.LayerNormalization(name=f"attention_norm_{i}")(h + a)
        f = keras.layers.Dense(128, activation="relu", name=f"ffn_{i}")(h)
        h = keras.layers.LayerNormalization(name=f"ffn_norm_{i}")(h + keras.layers.Dense(64, name=f"ffn_out_{i}")(f))
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(4, name="classes")(h))
    x = tf.constant(RNG.integers(0, 4000, (32, 64)).astype(np.int32))
    step = tf.function(lambda: model(x, training=False))
    return step, 32
""", lambda key: "planted_mha" in key),
    "convlstm_next_frame_filters_widened": (
        "a ConvLSTM2D next-frame predictor on 6-frame 12x12 clips train_on_batch: its ConvLSTM2D 32 -> 36 filters",
        """
def build():
    model = keras.Sequential([keras.Input((6, 12, 12, 1)),
                              keras.layers.ConvLSTM2D(36 if PLANTED else 32, 3, padding="same",
                                                      name="planted_convlstm"),
                              keras.layers.Conv2D(1, 3, padding="same", name="touched_next_frame")])
    model.compile("adam", "mse")
    clips = RNG.random((4, 7, 12, 12, 1), dtype=np.float32)
    return (lambda: model.train_on_batch(clips[:, :6], clips[:, 6])), 4
""", lambda key: "planted_convlstm" in key),
}
# Written after fb9179a, before any run of these, with the judge beside each, by a helper that did not read the
# explanation's code (nor the plugin's docs); sized with --plain only.
HELDOUT7: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "xception_head_conv_widened": (
        "Xception (weights=None, 71x71) inference in a tf.function: its 3x3 Conv2D head 128 -> 320 filters",
        """
def build():
    inputs = keras.Input((71, 71, 3))
    h = keras.applications.Xception(weights=None, include_top=False, input_shape=(71, 71, 3))(inputs)
    h = keras.layers.Conv2D(320 if PLANTED else 128, 3, padding="same", activation="relu",
                            name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((1, 71, 71, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 1
""", lambda key: "planted_head_conv" in key),
    "gru_text_tape_units_widened": (
        "an Embedding + GRU text classifier trained with a GradientTape in a tf.function: its GRU 64 -> 88 units",
        """
def build():
    model = keras.Sequential([keras.Input((60,), dtype="int32"), keras.layers.Embedding(5000, 32),
                              keras.layers.GRU(88 if PLANTED else 64, name="planted_gru"),
                              keras.layers.Dense(2, name="touched_out")])
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.integers(0, 5000, (32, 60)).astype(np.int32))
    y = tf.constant(RNG.integers(0, 2, 32).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 32
""", lambda key: "planted_gru" in key),
    "conv3d_video_filters_widened": (
        "a small Conv3D video classifier on 8-frame 32x32 clips train_on_batch: its second Conv3D 32 -> 64 filters",
        """
def build():
    model = keras.Sequential([keras.Input((8, 32, 32, 3)),
                              keras.layers.Conv3D(16, 3, padding="same", activation="relu", name="conv3d_first"),
                              keras.layers.MaxPooling3D(2, name="pool_first"),
                              keras.layers.Conv3D(64 if PLANTED else 32, 3, padding="same", activation="relu",
                                                  name="planted_conv3d"),
                              keras.layers.MaxPooling3D(2, name="touched_pool_second"),
                              keras.layers.GlobalAveragePooling3D(name="touched_pool"),
                              keras.layers.Dense(5, name="touched_out")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((8, 8, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 5, 8).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 8
""", lambda key: "planted_conv3d" in key),
    "dcgan_generator_deconv_widened": (
        "a DCGAN-style generator (Dense to 4x4x128, three Conv2DTranspose up to 32x32) sampling in a tf.function: "
        "its second Conv2DTranspose 64 -> 72 filters",
        """
def build():
    model = keras.Sequential([
        keras.Input((100,)), keras.layers.Dense(4 * 4 * 128, activation="relu", name="project"),
        keras.layers.Reshape((4, 4, 128), name="reshape"),
        keras.layers.Conv2DTranspose(128, 4, strides=2, padding="same", activation="relu", name="deconv_0"),
        keras.layers.Conv2DTranspose(72 if PLANTED else 64, 4, strides=2, padding="same", activation="relu",
                                     name="planted_deconv"),
        keras.layers.Conv2DTranspose(3, 4, strides=2, padding="same", activation="tanh", name="touched_image")])
    z = tf.constant(RNG.standard_normal((32, 100)).astype(np.float32))
    step = tf.function(lambda: model(z, training=False))
    return step, 32
""", lambda key: "planted_deconv" in key),
    "mlp_all_dense_cost_spread": (
        "a four-hidden-layer tabular MLP, inference in a tf.function: every hidden Dense 512 -> 576 units (the cost "
        "spread over four layers)",
        """
def build():
    width = 576 if PLANTED else 512
    model = keras.Sequential([keras.Input((512,))]
                             + [keras.layers.Dense(width, activation="relu", name=f"planted_dense_{i}")
                                for i in range(4)]
                             + [keras.layers.Dense(10, name="touched_out")])
    x = tf.constant(RNG.random((1024, 512), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 1024
""", lambda key: "planted_dense" in key),
    "vgg_blocks_tape_cost_spread": (
        "a VGG-style CNN (a stem, then two blocks of two 3x3 Conv2D) trained with a GradientTape in a tf.function: "
        "every block's Conv2D 96 -> 112 and 192 -> 208 filters (the cost spread over four layers)",
        """
def build():
    w1, w2 = (112, 208) if PLANTED else (96, 192)
    model = keras.Sequential([keras.Input((32, 32, 3)),
                              keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="stem"),
                              keras.layers.MaxPooling2D(name="stem_pool"),
                              keras.layers.Conv2D(w1, 3, padding="same", activation="relu", name="planted_vgg_1a"),
                              keras.layers.Conv2D(w1, 3, padding="same", activation="relu", name="planted_vgg_1b"),
                              keras.layers.MaxPooling2D(name="touched_pool_1"),
                              keras.layers.Conv2D(w2, 3, padding="same", activation="relu", name="planted_vgg_2a"),
                              keras.layers.Conv2D(w2, 3, padding="same", activation="relu", name="planted_vgg_2b"),
                              keras.layers.GlobalAveragePooling2D(name="touched_pool"),
                              keras.layers.Dense(10, name="touched_out")])
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    x = tf.constant(RNG.random((8, 32, 32, 3), dtype=np.float32))
    y = tf.constant(RNG.integers(0, 10, 8).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 8
""", lambda key: "planted_vgg" in key),
    "causal_decoder_heads_cost_spread": (
        "a two-block GPT-style causal decoder over 64 tokens train_on_batch: every block's MultiHeadAttention 4 -> 8 "
        "heads of 16 (the cost spread over two layers)",
        """
def build():
    heads = 8 if PLANTED else 4
    inputs = keras.Input((64,), dtype="int32")
    h = keras.layers.Embedding(1000, 64, name="tokens")(inputs)
    for i in range(2):
        a = keras.layers.LayerNormalization(name=f"attention_norm_{i}")(h)
        h = h + keras.layers.MultiHeadAttention(heads, 16, name=f"planted_causal_mha_{i}")(a, a, use_causal_mask=True)
        a = keras.layers.LayerNormalization(name=f"ffn_norm_{i}")(h)
        f = keras.layers.Dense(128, activation="gelu", name=f"ffn_{i}")(a)
        h = h + keras.layers.Dense(64, name=f"ffn_out_{i}")(f)
    logits = keras.layers.Dense(1000, name="lm_head")(keras.layers.LayerNormalization(name="final_norm")(h))
    model = keras.Model(inputs, logits)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = RNG.integers(0, 1000, (16, 65)).astype(np.int32)
    return (lambda: model.train_on_batch(tokens[:, :-1], tokens[:, 1:])), 16
""", lambda key: "planted_causal_mha" in key),
    "pointnet_shared_mlp_cost_spread": (
        "a PointNet-style classifier on 512-point clouds (a shared per-point MLP, then a max pool) train_on_batch: "
        "every per-point Dense 64 -> 76 and 128 -> 152 units (the cost spread over three layers)",
        """
def build():
    scale = 1.1875 if PLANTED else 1.0
    model = keras.Sequential([keras.Input((512, 3)),
                              keras.layers.Dense(int(64 * scale), activation="relu", name="planted_point_mlp_0"),
                              keras.layers.Dense(int(64 * scale), activation="relu", name="planted_point_mlp_1"),
                              keras.layers.Dense(int(128 * scale), activation="relu", name="planted_point_mlp_2"),
                              keras.layers.GlobalMaxPooling1D(name="touched_max_pool"),
                              keras.layers.Dense(64, activation="relu", name="touched_head"),
                              keras.layers.Dense(10, name="classes")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.standard_normal((16, 512, 3)).astype(np.float32)
    y = RNG.integers(0, 10, 16).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 16
""", lambda key: "planted_point_mlp" in key),
    "cnn_channel_gamma_short_ops_layer": (
        "a small CNN classifier, inference in a tf.function: a custom layer added after its first pooling that "
        "gamma-corrects its 32 channels one by one (32 slices, 32 powers, a concatenate: a new group of short ops)",
        """
class PlantedChannelGamma(keras.layers.Layer):
    def call(self, x):
        return keras.ops.concatenate([keras.ops.power(x[..., c:c + 1] + 1e-3, 0.8 + 0.01 * c) for c in range(32)],
                                     axis=-1)


def build():
    layers = [keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv_0"),
              keras.layers.MaxPooling2D(name="pool_0")]
    if PLANTED:
        layers.append(PlantedChannelGamma(name="planted_channel_gamma"))
    layers += [keras.layers.Conv2D(128, 3, padding="same", activation="relu", name="conv_1"),
               keras.layers.Conv2D(128, 3, padding="same", activation="relu", name="conv_1b"),
               keras.layers.MaxPooling2D(name="pool_1"),
               keras.layers.Conv2D(128, 3, padding="same", activation="relu", name="conv_2"),
               keras.layers.GlobalAveragePooling2D(name="pool"), keras.layers.Dense(10, name="classes")]
    model = keras.Sequential(layers)
    x = tf.constant(RNG.random((16, 32, 32, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 16
""", lambda key: "planted_channel_gamma" in key),
    "kim_text_cnn_branch_widened": (
        "a Kim-style text CNN (parallel Conv1D branches of 3, 4 and 5 tokens over one Embedding, max-pooled and "
        "concatenated) train_on_batch: the 5-token branch 64 -> 128 filters",
        """
def build():
    inputs = keras.Input((100,), dtype="int32")
    e = keras.layers.Embedding(10000, 64, name="tokens")(inputs)
    pooled = []
    for k in (3, 4, 5):
        planted = k == 5
        c = keras.layers.Conv1D(128 if (PLANTED and planted) else 64, k, activation="relu",
                                name="planted_branch_5" if planted else f"branch_{k}")(e)
        pooled.append(keras.layers.GlobalMaxPooling1D(name="touched_branch_pool_5" if planted else f"pool_{k}")(c))
    h = keras.layers.Concatenate(name="touched_concat")(pooled)
    h = keras.layers.Dropout(0.5, name="dropout")(h)
    model = keras.Model(inputs, keras.layers.Dense(2, name="touched_out")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 10000, (64, 100)).astype(np.int32)
    y = RNG.integers(0, 2, 64).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 64
""", lambda key: "planted_branch" in key),
    "sensor_fit_lstm_units_widened": (
        "a human-activity classifier on 128-step, 9-channel sensor windows (Conv1D then LSTM) under model.fit on a "
        "tf.data dataset: its LSTM 32 -> 96 units",
        """
def build():
    model = keras.Sequential([keras.Input((128, 9)),
                              keras.layers.Conv1D(32, 5, activation="relu", name="sensor_conv"),
                              keras.layers.MaxPooling1D(2, name="sensor_pool"),
                              keras.layers.LSTM(96 if PLANTED else 32, name="planted_lstm"),
                              keras.layers.Dense(6, name="touched_out")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    windows = RNG.standard_normal((512, 128, 9)).astype(np.float32)
    labels = RNG.integers(0, 6, 512).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((windows, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 32
""", lambda key: "planted_lstm" in key),
    "cifar_cnn_fit_last_conv_widened": (
        "a CIFAR-style CNN (three Conv2D with pooling and Dropout) under model.fit on a tf.data dataset: its last "
        "Conv2D 64 -> 192 filters",
        """
def build():
    model = keras.Sequential([keras.Input((32, 32, 3)),
                              keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv_0"),
                              keras.layers.MaxPooling2D(name="pool_0"),
                              keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv_1"),
                              keras.layers.MaxPooling2D(name="pool_1"),
                              keras.layers.Conv2D(192 if PLANTED else 64, 3, padding="same", activation="relu",
                                                  name="planted_conv_last"),
                              keras.layers.GlobalAveragePooling2D(name="touched_pool"),
                              keras.layers.Dropout(0.3, name="touched_dropout"),
                              keras.layers.Dense(10, name="touched_out")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images = RNG.random((512, 32, 32, 3), dtype=np.float32)
    labels = RNG.integers(0, 10, 512).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(32).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 32
""", lambda key: "planted_conv_last" in key),
}
# Written after 1793e86, before any run of these, with the judge beside each, by a helper that did not read the
# explanation's code (nor the plugin's docs); four plants slow one layer, four spread their cost over several, two
# add a layer, two run under model.fit on a tf.data dataset; sized with --plain only.
HELDOUT8: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "resnet50_head_conv_widened": (
        "ResNet50 (weights=None, 64x64) inference in a tf.function: its 3x3 Conv2D head 256 -> 640 filters",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(64, 64, 3))(inputs)
    h = keras.layers.Conv2D(640 if PLANTED else 256, 3, padding="same", activation="relu",
                            name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((1, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 1
""", lambda key: "planted_head_conv" in key),
    "ner_bilstm_tagger_tape_units_widened": (
        "a named-entity tagger (Embedding, a Bidirectional LSTM over every token, a Dense of 9 tags) trained with a "
        "GradientTape in a tf.function: its LSTM 64 -> 88 units a direction",
        """
def build():
    model = keras.Sequential([keras.Input((50,), dtype="int32"), keras.layers.Embedding(8000, 64, name="words"),
                              keras.layers.Bidirectional(keras.layers.LSTM(88 if PLANTED else 64,
                                                                           return_sequences=True),
                                                         name="planted_tagger_bilstm"),
                              keras.layers.Dense(9, name="touched_tags")])
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.integers(0, 8000, (32, 50)).astype(np.int32))
    y = tf.constant(RNG.integers(0, 9, (32, 50)).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 32
""", lambda key: "planted_tagger_bilstm" in key),
    "m5_raw_audio_conv_filters_widened": (
        "an M5-style raw-waveform classifier on 8000-sample clips (four Conv1D with BatchNormalization and pooling), "
        "inference in a tf.function: its second Conv1D 32 -> 72 filters",
        """
def build():
    model = keras.Sequential([keras.Input((8000, 1)),
                              keras.layers.Conv1D(32, 80, strides=4, name="wave_conv"),
                              keras.layers.BatchNormalization(name="wave_bn"), keras.layers.ReLU(name="wave_relu"),
                              keras.layers.MaxPooling1D(4, name="wave_pool"),
                              keras.layers.Conv1D(72 if PLANTED else 32, 3, name="planted_m5_conv"),
                              keras.layers.BatchNormalization(name="touched_m5_bn"),
                              keras.layers.ReLU(name="touched_m5_relu"),
                              keras.layers.MaxPooling1D(4, name="touched_m5_pool"),
                              keras.layers.Conv1D(64, 3, activation="relu", name="touched_conv_3"),
                              keras.layers.MaxPooling1D(4, name="pool_3"),
                              keras.layers.Conv1D(64, 3, activation="relu", name="conv_4"),
                              keras.layers.GlobalAveragePooling1D(name="pool"),
                              keras.layers.Dense(35, name="keywords")])
    x = tf.constant(RNG.random((32, 8000, 1), dtype=np.float32) - 0.5)
    step = tf.function(lambda: model(x, training=False))
    return step, 32
""", lambda key: "planted_m5_conv" in key),
    "question_pair_cross_attention_widened": (
        "a question-pair duplicate detector (a shared Embedding and token Dense, one question attending to the other "
        "with MultiHeadAttention, pooled and compared) train_on_batch: the cross-attention's key_dim 16 -> 28",
        """
def build():
    first = keras.Input((40,), dtype="int32", name="question_a")
    second = keras.Input((40,), dtype="int32", name="question_b")
    words = keras.layers.Embedding(5000, 64, name="words")
    token_dense = keras.layers.Dense(64, activation="relu", name="token_dense")
    a, b = token_dense(words(first)), token_dense(words(second))
    attended = keras.layers.MultiHeadAttention(4, 28 if PLANTED else 16, name="planted_cross_attention")(a, b)
    pooled = [keras.layers.GlobalAveragePooling1D(name="attended_pool")(attended),
              keras.layers.GlobalAveragePooling1D(name="second_pool")(b)]
    h = keras.layers.Dense(64, activation="relu", name="compare")(keras.layers.Concatenate(name="pair")(pooled))
    model = keras.Model([first, second], keras.layers.Dense(1, name="duplicate")(h))
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    xa = RNG.integers(0, 5000, (64, 40)).astype(np.int32)
    xb = RNG.integers(0, 5000, (64, 40)).astype(np.int32)
    y = RNG.integers(0, 2, (64, 1)).astype(np.float32)
    return (lambda: model.train_on_batch([xa, xb], y)), 64
""", lambda key: "planted_cross_attention" in key),
    "ecg_fcn_tape_cost_spread": (
        "a fully convolutional ECG heartbeat classifier on 187-sample beats (three Conv1D, each with "
        "BatchNormalization) trained with a GradientTape in a tf.function: every Conv1D 64/128/64 -> 80/160/80 filters "
        "(the cost spread over three layers and their normalizations)",
        """
def build():
    widths = (80, 160, 80) if PLANTED else (64, 128, 64)
    layers = [keras.Input((187, 1))]
    for i, (width, kernel) in enumerate(zip(widths, (8, 5, 3))):
        layers += [keras.layers.Conv1D(width, kernel, padding="same", name=f"planted_fcn_conv_{i}"),
                   keras.layers.BatchNormalization(name=f"planted_fcn_bn_{i}"),
                   keras.layers.ReLU(name=f"planted_fcn_relu_{i}")]
    layers += [keras.layers.GlobalAveragePooling1D(name="touched_pool"), keras.layers.Dense(5, name="touched_out")]
    model = keras.Sequential(layers)
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.standard_normal((8, 187, 1)).astype(np.float32))
    y = tf.constant(RNG.integers(0, 5, 8).astype(np.int32))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 8
""", lambda key: "planted_fcn_" in key),
    "residual_mlp_blocks_cost_spread": (
        "a tabular residual MLP (three pre-norm blocks of Dense 256 -> hidden -> 256 with a skip), inference in a "
        "tf.function: every block's hidden width 512 -> 768 (the cost spread over six Dense layers)",
        """
def build():
    hidden = 768 if PLANTED else 512
    inputs = keras.Input((64,))
    h = keras.layers.Dense(256, name="input_proj")(inputs)
    for i in range(3):
        r = keras.layers.LayerNormalization(name=f"block_norm_{i}")(h)
        r = keras.layers.Dense(hidden, activation="relu", name=f"planted_res_hidden_{i}")(r)
        r = keras.layers.Dropout(0.1, name=f"touched_dropout_{i}")(r)
        h = keras.layers.Add(name=f"block_add_{i}")([h, keras.layers.Dense(256, name=f"planted_res_out_{i}")(r)])
    h = keras.layers.ReLU(name="final_relu")(keras.layers.LayerNormalization(name="final_norm")(h))
    model = keras.Model(inputs, keras.layers.Dense(1, name="prediction")(h))
    x = tf.constant(RNG.standard_normal((2048, 64)).astype(np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 2048
""", lambda key: "planted_res_" in key),
    "cifar_resnet_blocks_cost_spread": (
        "a CIFAR-style ResNet (a stem and three basic residual blocks with BatchNormalization, 16/32/64 filters) "
        "train_on_batch: every layer 16/32/64 -> 18/36/72 filters (the cost spread over every block)",
        """
def block(h, width, stride, name):
    r = keras.layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False, name=name + "_conv_a")(h)
    r = keras.layers.ReLU(name=name + "_relu_a")(keras.layers.BatchNormalization(name=name + "_bn_a")(r))
    r = keras.layers.Conv2D(width, 3, padding="same", use_bias=False, name=name + "_conv_b")(r)
    r = keras.layers.BatchNormalization(name=name + "_bn_b")(r)
    if stride != 1 or h.shape[-1] != width:
        h = keras.layers.Conv2D(width, 1, strides=stride, use_bias=False, name=name + "_shortcut")(h)
    return keras.layers.ReLU(name=name + "_relu")(keras.layers.Add(name=name + "_add")([h, r]))


def build():
    base = 18 if PLANTED else 16
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(base, 3, padding="same", use_bias=False, name="planted_resblock_stem_conv")(inputs)
    h = keras.layers.ReLU(name="planted_resblock_stem_relu")(
        keras.layers.BatchNormalization(name="planted_resblock_stem_bn")(h))
    for i, (width, stride) in enumerate(((base, 1), (2 * base, 2), (4 * base, 2))):
        h = block(h, width, stride, f"planted_resblock_{i}")
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((8, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 8).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 8
""", lambda key: "planted_resblock" in key),
    "siamese_tower_conv_cost_spread": (
        "a Siamese image-pair verifier (one shared three-Conv2D tower applied to both 48x48 images, the absolute "
        "difference of their embeddings scored) train_on_batch: every tower Conv2D 32/64/64 -> 34/68/68 filters "
        "(the cost spread over three shared layers)",
        """
def build():
    w = 34 if PLANTED else 32
    tower = [keras.layers.Conv2D(w, 3, activation="relu", name="planted_tower_conv_0"),
             keras.layers.MaxPooling2D(name="touched_tower_pool_0"),
             keras.layers.Conv2D(2 * w, 3, activation="relu", name="planted_tower_conv_1"),
             keras.layers.MaxPooling2D(name="touched_tower_pool_1"),
             keras.layers.Conv2D(2 * w, 3, activation="relu", name="planted_tower_conv_2"),
             keras.layers.GlobalAveragePooling2D(name="touched_tower_pool"),
             keras.layers.Dense(64, name="touched_tower_embedding")]

    def embed(h):
        for layer in tower:
            h = layer(h)
        return h

    first = keras.Input((48, 48, 1), name="image_a")
    second = keras.Input((48, 48, 1), name="image_b")
    distance = keras.layers.Subtract(name="difference")([embed(first), embed(second)])
    distance = keras.layers.Activation(keras.ops.abs, name="absolute")(distance)
    model = keras.Model([first, second], keras.layers.Dense(1, name="same")(distance))
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    xa = RNG.random((8, 48, 48, 1), dtype=np.float32)
    xb = RNG.random((8, 48, 48, 1), dtype=np.float32)
    y = RNG.integers(0, 2, (8, 1)).astype(np.float32)
    return (lambda: model.train_on_batch([xa, xb], y)), 8
""", lambda key: "planted_tower_conv" in key),
    "espcn_superres_conv_added": (
        "an ESPCN super-resolution model (Conv2D 64 5x5, Conv2D 32 3x3, a sub-pixel Conv2D and a depth-to-space "
        "shuffle) upscaling 48x48 images in a tf.function: a 3x3 Conv2D(32) added before the sub-pixel layer",
        """
class PixelShuffle(keras.layers.Layer):
    def call(self, x):
        return tf.nn.depth_to_space(x, 2)


def build():
    layers = [keras.Input((48, 48, 3)),
              keras.layers.Conv2D(64, 5, padding="same", activation="tanh", name="features"),
              keras.layers.Conv2D(32, 3, padding="same", activation="tanh", name="shrink")]
    if PLANTED:
        layers.append(keras.layers.Conv2D(32, 3, padding="same", activation="tanh", name="planted_extra_conv"))
    layers += [keras.layers.Conv2D(12, 3, padding="same", name="subpixel"), PixelShuffle(name="pixel_shuffle")]
    model = keras.Sequential(layers)
    x = tf.constant(RNG.random((8, 48, 48, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 8
""", lambda key: "planted_extra_conv" in key),
    "dense_autoencoder_tape_layer_added": (
        "a dense autoencoder on 784-pixel images (784-512-128-32 and back) trained with a GradientTape in a "
        "tf.function: a Dense(384) added after the encoder's first layer",
        """
def build():
    layers = [keras.Input((784,)), keras.layers.Dense(512, activation="relu", name="encoder_0")]
    if PLANTED:
        layers.append(keras.layers.Dense(384, activation="relu", name="planted_encoder_dense"))
    layers += [keras.layers.Dense(128, activation="relu", name="touched_encoder_1"),
               keras.layers.Dense(32, activation="relu", name="code"),
               keras.layers.Dense(128, activation="relu", name="decoder_0"),
               keras.layers.Dense(512, activation="relu", name="decoder_1"),
               keras.layers.Dense(784, activation="sigmoid", name="reconstruction")]
    model = keras.Sequential(layers)
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.random((128, 784), dtype=np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - x))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 128
""", lambda key: "planted_encoder_dense" in key),
    "unet2d_segmentation_fit_cost_spread": (
        "a 2-D U-Net segmenter on 32x32 images (two levels down, two up, skip connections, two Conv2D a level) under "
        "model.fit on a tf.data dataset: every Conv2D 32 -> 36 filters a level (the cost spread over ten layers)",
        """
def double_conv(h, width, name):
    h = keras.layers.Conv2D(width, 3, padding="same", activation="relu", name=name + "_a")(h)
    return keras.layers.Conv2D(width, 3, padding="same", activation="relu", name=name + "_b")(h)


def build():
    w = 36 if PLANTED else 32
    inputs = keras.Input((32, 32, 3))
    e0 = double_conv(inputs, w, "planted_unet2d_enc_0")
    e1 = double_conv(keras.layers.MaxPooling2D(name="pool_0")(e0), 2 * w, "planted_unet2d_enc_1")
    b = double_conv(keras.layers.MaxPooling2D(name="pool_1")(e1), 4 * w, "planted_unet2d_bottom")
    d1 = keras.layers.Concatenate(name="touched_skip_1")([keras.layers.UpSampling2D(name="touched_up_1")(b), e1])
    d1 = double_conv(d1, 2 * w, "planted_unet2d_dec_1")
    d0 = keras.layers.Concatenate(name="touched_skip_0")([keras.layers.UpSampling2D(name="touched_up_0")(d1), e0])
    d0 = double_conv(d0, w, "planted_unet2d_dec_0")
    model = keras.Model(inputs, keras.layers.Conv2D(1, 1, name="touched_mask")(d0))
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    images = RNG.random((128, 32, 32, 3), dtype=np.float32)
    masks = (images.mean(axis=-1, keepdims=True) > 0.5).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((images, masks)).repeat().batch(2).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 2
""", lambda key: "planted_unet2d" in key),
    "localizer_fit_box_head_widened": (
        "an object localizer (a small strided Conv2D trunk, a class head and a box-regression head, two losses) under "
        "model.fit on a tf.data dataset: its box head's hidden Dense 256 -> 320 units",
        """
def build():
    images = keras.Input((32, 32, 3), name="image")
    h = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu", name="trunk_conv_0")(images)
    h = keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu", name="trunk_conv_1")(h)
    label = keras.layers.Dense(10, name="label")(keras.layers.GlobalAveragePooling2D(name="label_pool")(h))
    b = keras.layers.Dense(320 if PLANTED else 256, activation="relu", name="planted_box_hidden")(
        keras.layers.Flatten(name="box_flatten")(h))
    box = keras.layers.Dense(4, name="touched_box")(b)
    model = keras.Model(images, {"label": label, "box": box})
    model.compile("adam", loss={"label": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "box": "mse"},
                  loss_weights={"label": 1.0, "box": 0.5})
    pictures = RNG.random((512, 32, 32, 3), dtype=np.float32)
    targets = {"label": RNG.integers(0, 10, 512).astype(np.int32), "box": RNG.random((512, 4), dtype=np.float32)}
    ds = tf.data.Dataset.from_tensor_slices((pictures, targets)).repeat().batch(64).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 64
""", lambda key: "planted_box_hidden" in key),
}
# Written after c599814, before any run of these, with the judge beside each, by a helper that read only this
# benchmark (not the explanation's code, its docs nor its results); three plants slow one layer, two spread their
# cost over several, one adds a layer, one adds a new group of short ops, one runs under model.fit on a tf.data
# dataset with TensorFlow's default options; sized with --plain only.
HELDOUT9: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "efficientnetb1_head_conv_widened": (
        "EfficientNetB1 (weights=None, 64x64) inference in a tf.function: its 3x3 Conv2D head 128 -> 512 filters",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.EfficientNetB1(weights=None, include_top=False, input_shape=(64, 64, 3))(inputs)
    h = keras.layers.Conv2D(512 if PLANTED else 128, 3, padding="same", activation="swish",
                            name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((4, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 4
""", lambda key: "planted_head_conv" in key),
    "dual_encoder_doc_tower_widened": (
        "a dual-encoder retrieval model (query and document towers: Embedding, a per-token Dense, mean-pooled and "
        "projected; an in-batch softmax over their dot products) train_on_batch: the document tower's per-token "
        "Dense 128 -> 224 units",
        """
def build():
    query = keras.Input((16,), dtype="int32", name="query")
    document = keras.Input((128,), dtype="int32", name="document")
    q = keras.layers.Embedding(5000, 64, name="query_words")(query)
    q = keras.layers.Dense(128, activation="relu", name="query_token_dense")(q)
    q = keras.layers.Dense(64, name="query_proj")(keras.layers.GlobalAveragePooling1D(name="query_pool")(q))
    d = keras.layers.Embedding(5000, 64, name="document_words")(document)
    d = keras.layers.Dense(224 if PLANTED else 128, activation="relu", name="planted_doc_token_dense")(d)
    d = keras.layers.Dense(64, name="touched_doc_proj")(keras.layers.GlobalAveragePooling1D(name="touched_doc_pool")(d))
    scores = keras.layers.Lambda(lambda t: keras.ops.matmul(t[0], keras.ops.transpose(t[1])), name="scores")([q, d])
    model = keras.Model([query, document], scores)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xq = RNG.integers(0, 5000, (64, 16)).astype(np.int32)
    xd = RNG.integers(0, 5000, (64, 128)).astype(np.int32)
    y = np.arange(64, dtype=np.int32)
    return (lambda: model.train_on_batch([xq, xd], y)), 64
""", lambda key: "planted_doc_token_dense" in key),
    "crnn_sound_events_gru_widened": (
        "a CRNN sound-event detector on 64-band log-mel spectrograms of 64 frames (two Conv2D pooled over "
        "frequency, then a GRU over the frames and a frame-wise Dense of 10 events) train_on_batch: its GRU 128 -> 176 "
        "units",
        """
def build():
    model = keras.Sequential([keras.Input((64, 64, 1)),
                              keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="mel_conv_0"),
                              keras.layers.MaxPooling2D((1, 4), name="mel_pool_0"),
                              keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="mel_conv_1"),
                              keras.layers.MaxPooling2D((1, 4), name="mel_pool_1"),
                              keras.layers.Reshape((64, 4 * 32), name="frames"),
                              keras.layers.GRU(176 if PLANTED else 128, return_sequences=True,
                                               name="planted_event_gru"),
                              keras.layers.Dense(10, name="touched_events")])
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    x = RNG.standard_normal((16, 64, 64, 1)).astype(np.float32)
    y = (RNG.random((16, 64, 10)) < 0.1).astype(np.float32)
    return (lambda: model.train_on_batch(x, y)), 16
""", lambda key: "planted_event_gru" in key),
    "gcn_node_classifier_cost_spread": (
        "a graph convolutional network classifying the 1024 nodes of one graph (a dense normalised adjacency, three "
        "graph-conv layers, each a weight then the adjacency product) train_on_batch: every graph conv 128 -> 160 "
        "units (the cost spread over three layers)",
        """
ADJACENCY = (RNG.random((1024, 1024)) < 0.01).astype(np.float32) + np.eye(1024, dtype=np.float32)
ADJACENCY = ADJACENCY / ADJACENCY.sum(axis=1, keepdims=True)


class GraphConv(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], self.units), initializer="glorot_uniform", name="kernel")
        self.adjacency = tf.constant(ADJACENCY)

    def call(self, x):
        return keras.ops.relu(keras.ops.matmul(self.adjacency, keras.ops.matmul(x, self.kernel)))


def build():
    units = 160 if PLANTED else 128
    model = keras.Sequential([keras.Input((1024, 64), batch_size=1)]
                             + [GraphConv(units, name=f"planted_graph_conv_{i}") for i in range(3)]
                             + [keras.layers.Dense(7, name="touched_node_classes")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((1, 1024, 64), dtype=np.float32)
    y = RNG.integers(0, 7, (1, 1024)).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 1024
""", lambda key: "planted_graph_conv" in key),
    "mlp_mixer_blocks_cost_spread": (
        "an MLP-Mixer on 32x32 images (4x4 patches, two mixer blocks of token-mixing and channel-mixing MLPs) "
        "train_on_batch: every block's channel-mixing hidden Dense 256 -> 448 and token-mixing hidden 64 -> 112 "
        "units (the cost spread over four layers)",
        """
def mixer_block(h, i):
    channel_hidden, token_hidden = (448, 112) if PLANTED else (256, 64)
    t = keras.layers.LayerNormalization(name=f"token_norm_{i}")(h)
    t = keras.layers.Permute((2, 1), name=f"to_tokens_{i}")(t)
    t = keras.layers.Dense(token_hidden, activation="gelu", name=f"planted_token_mlp_{i}")(t)
    t = keras.layers.Dense(64, name=f"touched_token_out_{i}")(t)
    h = keras.layers.Add(name=f"token_skip_{i}")([h, keras.layers.Permute((2, 1), name=f"to_channels_{i}")(t)])
    c = keras.layers.LayerNormalization(name=f"channel_norm_{i}")(h)
    c = keras.layers.Dense(channel_hidden, activation="gelu", name=f"planted_channel_mlp_{i}")(c)
    c = keras.layers.Dense(128, name=f"touched_channel_out_{i}")(c)
    return keras.layers.Add(name=f"channel_skip_{i}")([h, c])


def build():
    images = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(128, 4, strides=4, name="patches")(images)
    h = keras.layers.Reshape((64, 128), name="tokens")(h)
    for i in range(2):
        h = mixer_block(h, i)
    h = keras.layers.GlobalAveragePooling1D(name="pool")(keras.layers.LayerNormalization(name="final_norm")(h))
    model = keras.Model(images, keras.layers.Dense(10, name="classes")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((16, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 16).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 16
""", lambda key: "planted_channel_mlp" in key or "planted_token_mlp" in key),
    "timeseries_cnn_attention_added": (
        "a Conv1D time-series classifier on 256-step windows of 6 channels train_on_batch: a self-attention "
        "MultiHeadAttention (one head of 16) added after its Conv1D stack (pooled to 32 steps)",
        """
def build():
    inputs = keras.Input((256, 6))
    h = keras.layers.Conv1D(64, 7, padding="same", activation="relu", name="series_conv_0")(inputs)
    h = keras.layers.MaxPooling1D(2, name="series_pool_0")(h)
    h = keras.layers.Conv1D(128, 5, padding="same", activation="relu", name="series_conv_1")(h)
    h = keras.layers.MaxPooling1D(4, name="series_pool_1")(h)
    if PLANTED:
        h = keras.layers.MultiHeadAttention(1, 16, name="planted_self_attention")(h, h)
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(5, name="classes")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.standard_normal((64, 256, 6)).astype(np.float32)
    y = RNG.integers(0, 5, 64).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 64
""", lambda key: "planted_self_attention" in key),
    "forecaster_detrend_short_ops_layer": (
        "a Conv1D multi-series forecaster on 96-step windows of 8 series, inference in a tf.function: a custom layer "
        "added before it that detrends each step by its causal running mean, computed step by step (96 slices, 96 "
        "means, 96 subtractions and a concatenate: a new group of short ops)",
        """
class PlantedDetrend(keras.layers.Layer):
    def call(self, x):
        return keras.ops.concatenate([x[:, t:t + 1] - keras.ops.mean(x[:, :t + 1], axis=1, keepdims=True)
                                      for t in range(96)], axis=1)


def build():
    layers = [keras.Input((96, 8))]
    if PLANTED:
        layers.append(PlantedDetrend(name="planted_detrend"))
    layers += [keras.layers.Conv1D(64, 5, padding="same", activation="relu", name="series_conv_0"),
               keras.layers.Conv1D(128, 5, padding="same", activation="relu", name="series_conv_1"),
               keras.layers.Flatten(name="flatten"), keras.layers.Dense(12 * 8, name="horizon")]
    model = keras.Sequential(layers)
    x = tf.constant(RNG.standard_normal((64, 96, 8)).astype(np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 64
""", lambda key: "planted_detrend" in key),
    "forecaster_fit_dense_widened": (
        "a multi-horizon forecaster (a Conv1D over 96-step windows of 7 series, then Flatten and two Dense, 24 "
        "steps ahead) under model.fit on a tf.data dataset: its first Dense 256 -> 384 units",
        """
def build():
    model = keras.Sequential([keras.Input((96, 7)),
                              keras.layers.Conv1D(64, 5, padding="same", activation="relu", name="series_conv"),
                              keras.layers.Flatten(name="flatten"),
                              keras.layers.Dense(384 if PLANTED else 256, activation="relu", name="planted_hidden"),
                              keras.layers.Dense(24, name="touched_horizon")])
    model.compile("adam", "mse")
    windows = RNG.standard_normal((1024, 96, 7)).astype(np.float32)
    targets = RNG.standard_normal((1024, 24)).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((windows, targets)).repeat().batch(64).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 64
""", lambda key: "planted_hidden" in key),
}
# Unchanged code through the plugin's own path (``--set aa``): revision B is revision A with a comment added, and
# ``FORCE_CONFTEST`` explains each verdict as if it were red, so that the five pairs of processes are profiled
# as after a false alarm and what each explanation blames on unchanged code is counted (development data: the
# cases are older sets' models with their plant left out, and a default-option pipeline consumed by a step).
AA_FROM = ("mobilenetv2_conv_head", "resnet50_head_conv_widened", "ner_bilstm_tagger_tape_units_widened",
           "question_pair_cross_attention_widened", "m5_raw_audio_conv_filters_widened",
           "localizer_fit_box_head_widened")
AA_PIPELINE = """
def build():
    rows = RNG.random((4096, 64), dtype=np.float32)

    def parse(r):
        return np.tanh(r.numpy()) * 2.0

    ds = (tf.data.Dataset.from_tensor_slices(rows).repeat()
          .map(lambda r: tf.py_function(parse, [r], tf.float32), num_parallel_calls=tf.data.AUTOTUNE)
          .batch(16).prefetch(tf.data.AUTOTUNE))
    it = iter(ds)
    w = tf.constant(RNG.random((64, 32), dtype=np.float32))

    @tf.function
    def consume(x):
        return tf.reduce_sum(tf.matmul(x, w))

    return (lambda: consume(next(it))), 16
"""
ALL = {**CASES, **HELDOUT2, **HELDOUT3, **HELDOUT4, **HELDOUT5, **HELDOUT6, **HELDOUT7, **HELDOUT8,
       **HELDOUT9, **HELDOUT10}
AA: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    **{f"aa_{name}": (f"A/A: {ALL[name][0]}, unplanted on both sides", ALL[name][1], lambda key: False)
       for name in AA_FROM},
    "aa_pipeline_py_map_defaults": ("A/A: a default-option tf.data pipeline (a parallel py_function map, batch, "
                                    "prefetch) consumed by a tf.function step", AA_PIPELINE, lambda key: False)}
ALL.update(AA)

HEADER = '''
import numpy as np
import tensorflow as tf
import keras

RNG = np.random.default_rng(3)
PLANTED = {planted}
'''

TEST = '''
from model import build


def test_model(tfperf):
    step, items = build()
    tfperf(step, items=items)
'''


def model_module(case: str, planted: bool) -> str:
    if case in AA:  # the same model on both sides; revision B only adds a comment
        return HEADER.format(planted=False) + ALL[case][1] + ("\n# revision B: nothing changed\n" if planted else "")
    return HEADER.format(planted=planted) + ALL[case][1]


# With ``--keep-profiles``: a conftest (untracked, so the partner's tree of HEAD~1 lacks it) that writes what
# each explanation was computed from (both sides' compact profiles, the replicate pairs and the measured change)
# before the explanation is made, for rules tried offline on development data; the plugin is not changed.
KEEP_CONFTEST = '''
import json
import os
import time
from pathlib import Path

import pytest_tfperf.explain.explanation as _explanation

_explain = _explanation.explain


def _kept(base, current, measured_s, why_not, cost=(), pointer=None, replicates=()):
    if base is not None and current is not None:
        folder = Path(os.environ["TFPERF_KEEP_PROFILES"])
        folder.mkdir(parents=True, exist_ok=True)
        doc = {"measured": measured_s, "base": base.to_dict(), "current": current.to_dict(),
               "replicates": [[b.to_dict(), c.to_dict()] for b, c in replicates]}
        (folder / f"attribution-{time.time_ns()}.json").write_text(json.dumps(doc))
    return _explain(base, current, measured_s, why_not, cost, pointer, replicates)


_explanation.explain = _kept
'''

# In the A/A set (``--set aa``): every verdict explained as a red one is, with its five pairs of processes,
# so that what the explanation blames on unchanged code is seen through the plugin's own path; the verdicts and
# the test's outcome stay as judged.
FORCE_CONFTEST = '''
import pytest_tfperf.explain.orchestrate as _orchestrate
from pytest_tfperf.session.outcome import Outcome

_explain_outcomes = _orchestrate.explain_outcomes


def _forced(*args, **kwargs):
    saved = Outcome.failed, Outcome.throughput_regressed
    Outcome.failed = property(lambda self: True)
    Outcome.throughput_regressed = property(lambda self: True)
    try:
        return _explain_outcomes(*args, **kwargs)
    finally:
        Outcome.failed, Outcome.throughput_regressed = saved


_orchestrate.explain_outcomes = _forced
'''


def make_repo(repo: Path, case: str) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "test_model.py").write_text(TEST)
    (repo / "model.py").write_text(model_module(case, False))
    (repo / "pytest.ini").write_text("[pytest]\nfilterwarnings = ignore\n")
    (repo / ".gitignore").write_text(".tfperf/\n*.json\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "A: healthy")
    (repo / "model.py").write_text(model_module(case, True))
    git(repo, "commit", "-qam", f"B: {case}")


def session(repo: Path, case: str, index: int, keep: Path | None = None) -> dict[str, Any]:
    out = repo / f"results-{index}.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf", "--tfperf-against=HEAD~1",
               "--tfperf-json", str(out), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    # The A/A set is always explained as if red (as in explain_pipelines_against.py): without it, its unchanged
    # verdicts pass and nothing is profiled, and the run says nothing of what explanations blame.
    if keep is not None or case in AA:
        (repo / "conftest.py").write_text((KEEP_CONFTEST if keep is not None else "")
                                          + (FORCE_CONFTEST if case in AA else ""))
    if keep is not None:
        env["TFPERF_KEEP_PROFILES"] = str(keep / case / str(index))
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    wall = time.perf_counter() - started
    doc = json.loads(out.read_text()) if out.exists() else None
    data = find_explanation(doc)
    first = named_first(data)
    verdict = next((line.strip() for line in proc.stdout.splitlines() if "throughput" in line and "%" in line), "")
    lines = list(data.get("lines") or []) if isinstance(data, dict) else []
    planted = ALL[case][2]
    causes = [c for c in (data or {}).get("causes") or [] if isinstance(c, dict)]
    keys = [str(c.get("key") or c.get("label")) for c in causes]
    return {"case": case, "session": index, "returncode": proc.returncode, "wall_s": round(wall, 1),
            "load": round(os.getloadavg()[0], 2), "verdict": verdict, "red": proc.returncode == 1,
            "explained": isinstance(data, dict) and "causes" in data, "named_first": first,
            "planted_first": bool(first and planted(first)),
            "planted_in_top3": any(planted(k) for k in keys[:3]) or bool(first and planted(first)),
            # secondary blame: a cause the plant did not touch (a layer whose input or output width the plant
            # changed is named touched_* in the case and does not count)
            "unplanted_causes": [k for k in keys if not planted(k) and "touched_" not in k
                                 and not k.startswith("wait:")],
            "nothing_moved": said_nothing_moved(lines),
            "lines": lines, "tail": "" if lines else (proc.stdout + proc.stderr)[-3000:]}


def plain(cases: list[str], out: Path, turns: int = 4, seconds: float = 2.0) -> list[str]:
    """Each case's two steps called in one process, taking turns: milliseconds per call, per turn."""
    rows: dict[str, dict[str, list[float]]] = {}
    for case in cases:
        steps = {}
        for side, planted in (("healthy", False), ("regressed", True)):
            namespace: dict[str, Any] = {}
            exec(model_module(case, planted), namespace)  # noqa: S102 - this file's own cases
            steps[side] = namespace["build"]()[0]
            for _ in range(5):
                steps[side]()
        rows[case] = {side: [] for side in steps}
        for _ in range(turns):
            for side, step in steps.items():
                calls, started = 0, time.perf_counter()
                while time.perf_counter() - started < seconds:
                    step()
                    calls += 1
                rows[case][side].append((time.perf_counter() - started) / calls * 1e3)
        print(case, {s: [round(v, 2) for v in r] for s, r in rows[case].items()}, flush=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    Path(str(out) + ".json").write_text(json.dumps({"measured_at": when, "ms_per_call": rows,
                                                    "load_average_1min": round(os.getloadavg()[0], 2)}, indent=1))
    md = [f"# The model steps alone, in one process, taking turns ({when}, load {os.getloadavg()[0]:.1f})", "",
          f"`.venv/bin/python benchmarks/explain_models_against.py --plain {' '.join(cases)}`", "",
          "| case | healthy ms/call (per turn) | regressed ms/call (per turn) | regressed/healthy per turn |",
          "|---|---|---|---|"]
    for case, r in rows.items():
        ratios = ", ".join(f"{b / a:.2f}" for a, b in zip(r["healthy"], r["regressed"]))
        md.append(f"| {case} | {', '.join(f'{v:.2f}' for v in r['healthy'])} | "
                  f"{', '.join(f'{v:.2f}' for v in r['regressed'])} | {ratios} |")
    Path(str(out) + ".md").write_text("\n".join(md) + "\n")
    return md


LEAD_LINE = "most likely where, none beyond its noise by itself (each needed the ± beside it): "


def lead_of(lines: list[str]) -> str | None:
    """The first lead an explanation gave when no group passed its test (``Attribution.leads``, its label as
    printed), or None: read from the lines, so that results written before the field existed are read alike."""
    line = next((ln.strip() for ln in lines if ln.strip().startswith(LEAD_LINE)), None)
    if line is None:
        return None
    first = line[len(LEAD_LINE):].split(", ")[0]
    return re.split(r" (?:grew|shrank|appeared|vanished) ", first)[0]


def write(report: dict[str, Any], out: Path) -> list[str]:
    runs = report["runs"]
    red = [r for r in runs if r["red"]]
    for r in runs:  # the lead, judged as the named-first group is (the case's judge, on the printed label)
        r["lead"] = lead_of(r.get("lines") or []) if r["nothing_moved"] else None
        r["lead_planted"] = bool(r["lead"] and ALL[r["case"]][2](r["lead"]))
    report["summary"] = {"sessions": len(runs), "red": len(red), "explained": sum(r["explained"] for r in red),
                         "planted_first": sum(r["planted_first"] for r in red),
                         "planted_in_top3": sum(r["planted_in_top3"] for r in red),
                         "nothing_moved": sum(r["nothing_moved"] for r in red),
                         "nothing_moved_lead_planted": sum(r["lead_planted"] for r in red),
                         "unplanted_causes": sum(len(r["unplanted_causes"]) for r in red)}
    Path(str(out) + ".json").write_text(json.dumps(report, indent=1) + "\n")
    s = report["summary"]
    md = [f"# Model regressions explained under --tfperf-against (commit {report['commit']})", "",
          f"`{report['command']}`, {report['started']} to {report['finished']}, {report['cores']} CPUs", "",
          f"- red verdicts: {s['red']} of {s['sessions']} sessions; explained {s['explained']}; the planted group "
          f"named first {s['planted_first']} of {s['red']}, in the top 3 {s['planted_in_top3']}; \"nothing moved\" "
          f"{s['nothing_moved']} (the planted group the first lead in {s['nothing_moved_lead_planted']}); causes "
          f"named that the plant did not touch: {s['unplanted_causes']}", "",
          "| case | session | verdict | named first | planted first | lead (nothing moved) | other causes | load |",
          "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        verdict = re.sub(r"\s+", " ", r["verdict"])[:80].replace("|", "/")
        md.append(f"| {r['case']} | {r['session']} | {verdict or ('rc ' + str(r['returncode']))} | "
                  f"`{r['named_first']}` | {r['planted_first']} | {r['lead'] or '-'} | "
                  f"{', '.join(r['unplanted_causes']) or '-'} | "
                  f"{r['load']} |")
    Path(str(out) + ".md").write_text("\n".join(md) + "\n")
    return md


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--set", choices=("first", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6",
                                          "heldout7", "heldout8", "heldout9", "heldout10", "aa"),
                        default="first",
                        help="first: the six cases run once on the rules of aaf92c7 (the spread rule of a85f2b2 was "
                             "chosen on their run); heldout2: six written after a85f2b2, before any run of them; "
                             "heldout3: six written after ad572c2 (groups tested across three pairs of processes); "
                             "heldout4: six written after e061b97 (the measured change the verdict's own); "
                             "heldout5: ten written after 5571d5c (the ranking), before any run of them; "
                             "heldout6: eight written after 9fb03c8, before any run of them; "
                             "heldout7: twelve written after fb9179a, before any run of them; "
                             "heldout8: twelve written after 1793e86, before any run of them; "
                             "heldout9: eight written after c599814, before any run of them; "
                             "heldout10: ten written after 40912b7 by a writer who read none of the rules, before "
                             "any run of them (benchmarks/explain_heldout10_cases.py); aa: unchanged "
                             "code (older sets' models unplanted, and a pipeline), each verdict explained as if red")
    parser.add_argument("--cases", nargs="*", choices=list(ALL), help="these cases only (default: the set's)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "explain_models_against")
    parser.add_argument("--keep-profiles", type=Path, metavar="DIR",
                        help="write what each explanation was computed from under DIR/<case>/<session>/ (for rules "
                             "tried offline: development data, never a held-out figure)")
    parser.add_argument("--rewrite", type=Path, metavar="JSON",
                        help="only rewrite a results file's summary and table (the lead read from its lines)")
    parser.add_argument("--plain", nargs="+", metavar="CASE", choices=list(ALL),
                        help="only time these cases' two steps in one process, taking turns, without the plugin")
    args = parser.parse_args()
    if args.rewrite:
        print("\n".join(write(json.loads(args.rewrite.read_text()), Path(str(args.rewrite)[:-len(".json")]))))
        return 0
    if args.plain:
        print("\n".join(plain(args.plain, Path(str(args.out) + "_plain"))))
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs: list[dict[str, Any]] = []
    report = {"commit": commit, "started": started, "cores": os.cpu_count(), "runs": runs,
              "command": f"PYTHONPATH=$PWD .venv/bin/python benchmarks/explain_models_against.py --sessions "
                         f"{args.sessions} --set {args.set}" + (f" --cases {' '.join(args.cases)}" if args.cases else "")
                         + (f" --keep-profiles {args.keep_profiles}" if args.keep_profiles else "")}
    with tempfile.TemporaryDirectory(prefix="tfperf-model-against-") as tmp:
        for case in args.cases or list({"first": CASES, "heldout2": HELDOUT2, "heldout3": HELDOUT3,
                                         "heldout4": HELDOUT4, "heldout5": HELDOUT5,
                                         "heldout6": HELDOUT6, "heldout7": HELDOUT7,
                                         "heldout8": HELDOUT8, "heldout9": HELDOUT9,
                                         "heldout10": HELDOUT10, "aa": AA}[args.set]):
            repo = Path(tmp) / case
            make_repo(repo, case)
            for i in range(args.sessions):
                r = session(repo, case, i, args.keep_profiles)
                runs.append(r)
                print(f"{case} {i}: rc {r['returncode']} {r['verdict'][:90]!r} first {r['named_first']!r} "
                      f"planted {r['planted_first']} {r['wall_s']} s load {r['load']}", flush=True)
                report["finished"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                write(report, args.out)  # after every session: a run stopped early keeps what it measured
    print("\n".join(write(report, args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
