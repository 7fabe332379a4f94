"""Held-out set 10 for benchmarks/explain_models_against.py: ten model regressions whose plants and judges were
written together (written 2026-11-28 by a writer who did not read the explanation's rules, its code, its docs nor its
results, after commit 40912b7, before any run of them). Sized with a plain timing of the two revisions only (no
plugin): three plants slow one existing layer (a keras.applications model, a text model, an audio model), two spread
their cost over several layers (one under model.fit on a tf.data dataset with TensorFlow's default options), one adds
a layer in a GradientTape step, one adds a new group of short ops, one widens a branch of a parallel graph, one widens
a SimpleRNN under train_on_batch and one adds a GroupNormalization layer."""

from __future__ import annotations

from collections.abc import Callable

HELDOUT10: dict[str, tuple[str, str, Callable[[str], bool]]] = {
    "densenet169_head_conv_widened": (
        "DenseNet169 (weights=None, 64x64) inference in a tf.function on a batch of 4: its 3x3 Conv2D head on the "
        "backbone's 2x2 map 128 -> 448 filters",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.applications.DenseNet169(weights=None, include_top=False, input_shape=(64, 64, 3))(inputs)
    h = keras.layers.Conv2D(448 if PLANTED else 128, 3, padding="same", activation="relu",
                            name="planted_head_conv")(h)
    h = keras.layers.GlobalAveragePooling2D(name="touched_pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="touched_out")(h))
    x = tf.constant(RNG.random((4, 64, 64, 3), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 4
""", lambda key: "planted_head_conv" in key),
    "gated_cnn_text_conv_kernel_widened": (
        "a gated convolutional (GLU) text classifier on 200-token reviews (Embedding, three blocks of a Conv1D whose "
        "output is split into values and sigmoid gates, global max pooling) train_on_batch: the second block's "
        "Conv1D kernel 3 -> 7 tokens",
        """
def glu(t):
    values, gates = keras.ops.split(t, 2, axis=-1)
    return values * keras.ops.sigmoid(gates)


def build():
    layers = [keras.Input((200,), dtype="int32"), keras.layers.Embedding(20000, 96, name="words")]
    for i in range(3):
        kernel = 7 if (PLANTED and i == 1) else 3
        prefix = "planted_glu" if i == 1 else ("touched_glu" if i == 2 else "glu")
        layers += [keras.layers.Conv1D(192, kernel, padding="same", name=f"{prefix}_conv_{i}"),
                   keras.layers.Lambda(glu, name=f"{'touched_glu' if i == 1 else 'glu'}_gate_{i}")]
    layers += [keras.layers.GlobalMaxPooling1D(name="pool"), keras.layers.Dense(2, name="sentiment")]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 20000, (32, 200)).astype(np.int32)
    y = RNG.integers(0, 2, 32).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 32
""", lambda key: "planted_glu_conv" in key),
    "dscnn_keyword_pointwise_widened": (
        "a DS-CNN keyword spotter on 49 frames of 40 log-mel bands (a strided Conv2D, four depthwise-separable "
        "blocks of DepthwiseConv2D and a 1x1 Conv2D, each with BatchNormalization) inference in a tf.function on a "
        "batch of 32: the second block's pointwise 1x1 Conv2D 64 -> 128 filters",
        """
def build():
    inputs = keras.Input((49, 40, 1))
    h = keras.layers.Conv2D(64, (10, 4), strides=(2, 2), padding="same", use_bias=False, name="stem_conv")(inputs)
    h = keras.layers.ReLU(name="stem_relu")(keras.layers.BatchNormalization(name="stem_bn")(h))
    for i in range(4):
        width = 128 if (PLANTED and i == 1) else 64
        first = "planted_ds" if i == 1 else ("touched_ds" if i == 2 else "ds")
        after = "touched_ds" if i == 1 else "ds"
        h = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False,
                                         name=f"{'touched_ds' if i == 2 else 'ds'}_depthwise_{i}")(h)
        h = keras.layers.ReLU(name=f"ds_dw_relu_{i}")(keras.layers.BatchNormalization(name=f"ds_dw_bn_{i}")(h))
        h = keras.layers.Conv2D(width, 1, use_bias=False, name=f"{first}_pointwise_{i}")(h)
        h = keras.layers.ReLU(name=f"{after}_pw_relu_{i}")(
            keras.layers.BatchNormalization(name=f"{after}_pw_bn_{i}")(h))
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    model = keras.Model(inputs, keras.layers.Dense(12, name="keywords")(h))
    x = tf.constant(RNG.standard_normal((32, 49, 40, 1)).astype(np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 32
""", lambda key: "planted_ds_pointwise" in key),
    "squeezenet_fire_expand_cost_spread": (
        "a SqueezeNet-style CNN on 32x32 images (a stem and four fire modules, each a 1x1 squeeze then parallel 1x1 "
        "and 3x3 expand Conv2D concatenated) train_on_batch: every fire module's expand Conv2D 25% wider "
        "(64/64/128/128 -> 80/80/160/160 filters a branch; the cost spread over eight layers)",
        """
def fire(h, squeeze, expand, name):
    s = keras.layers.Conv2D(squeeze, 1, activation="relu", name=name + "_squeeze")(h)
    e1 = keras.layers.Conv2D(expand, 1, activation="relu", name="planted_" + name + "_expand1x1")(s)
    e3 = keras.layers.Conv2D(expand, 3, padding="same", activation="relu", name="planted_" + name + "_expand3x3")(s)
    return keras.layers.Concatenate(name="touched_" + name + "_concat")([e1, e3])


def build():
    scale = 1.25 if PLANTED else 1.0
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="stem_conv")(inputs)
    for i, (squeeze, expand) in enumerate(((16, 64), (16, 64), (32, 128), (32, 128))):
        h = fire(h, squeeze, int(expand * scale), f"fire_{i}")
        if i == 1:
            h = keras.layers.MaxPooling2D(name="pool_1")(h)
    h = keras.layers.Conv2D(10, 1, name="touched_class_conv")(h)
    model = keras.Model(inputs, keras.layers.GlobalAveragePooling2D(name="touched_logits")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((8, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 8).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 8
""", lambda key: "planted_fire_" in key),
    "eegnet_fit_filters_cost_spread": (
        "an EEGNet classifier on 32-channel, 256-sample EEG trials (a temporal Conv2D, a depthwise spatial Conv2D, a "
        "SeparableConv2D, each with BatchNormalization) under model.fit on a tf.data dataset: its temporal filters "
        "16 -> 20 and separable filters 32 -> 40 (every convolution 25% wider; the cost spread over three layers "
        "and their normalizations)",
        """
def build():
    f1, f2 = (20, 40) if PLANTED else (16, 32)
    model = keras.Sequential([
        keras.Input((32, 256, 1)),
        keras.layers.Conv2D(f1, (1, 64), padding="same", use_bias=False, name="planted_eeg_temporal_conv"),
        keras.layers.BatchNormalization(name="planted_eeg_temporal_bn"),
        keras.layers.DepthwiseConv2D((32, 1), depth_multiplier=2, use_bias=False, name="planted_eeg_spatial_conv"),
        keras.layers.BatchNormalization(name="planted_eeg_spatial_bn"),
        keras.layers.Activation("elu", name="planted_eeg_spatial_elu"),
        keras.layers.AveragePooling2D((1, 4), name="touched_eeg_pool_0"),
        keras.layers.Dropout(0.25, name="touched_eeg_dropout_0"),
        keras.layers.SeparableConv2D(f2, (1, 16), padding="same", use_bias=False, name="planted_eeg_separable_conv"),
        keras.layers.BatchNormalization(name="planted_eeg_separable_bn"),
        keras.layers.Activation("elu", name="planted_eeg_separable_elu"),
        keras.layers.AveragePooling2D((1, 8), name="touched_eeg_pool_1"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(4, name="classes")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    trials = RNG.standard_normal((256, 32, 256, 1)).astype(np.float32)
    labels = RNG.integers(0, 4, 256).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((trials, labels)).repeat().batch(16).prefetch(tf.data.AUTOTUNE)
    return (lambda: model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0)), 2 * 16
""", lambda key: "planted_eeg_" in key),
    "vae_tape_decoder_deconv_added": (
        "a convolutional variational autoencoder on 28x28 images (two strided Conv2D to a 16-d Gaussian code, a "
        "sampling layer, Dense and two Conv2DTranspose back up; reconstruction plus KL loss) trained with a "
        "GradientTape in a tf.function: a stride-1 Conv2DTranspose(48) added between the decoder's two upsamplings",
        """
class Sample(keras.layers.Layer):
    def call(self, inputs):
        mean, log_var = inputs
        return mean + tf.exp(0.5 * log_var) * tf.random.normal(tf.shape(mean))


def build():
    images = keras.Input((28, 28, 1))
    h = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu", name="enc_conv_0")(images)
    h = keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu", name="enc_conv_1")(h)
    h = keras.layers.Flatten(name="enc_flatten")(h)
    mean = keras.layers.Dense(16, name="code_mean")(h)
    log_var = keras.layers.Dense(16, name="code_log_var")(h)
    z = Sample(name="sample")([mean, log_var])
    d = keras.layers.Reshape((7, 7, 64), name="dec_reshape")(
        keras.layers.Dense(7 * 7 * 64, activation="relu", name="dec_dense")(z))
    d = keras.layers.Conv2DTranspose(64, 3, strides=2, padding="same", activation="relu", name="dec_deconv_0")(d)
    if PLANTED:
        d = keras.layers.Conv2DTranspose(48, 3, padding="same", activation="relu", name="planted_dec_deconv")(d)
    d = keras.layers.Conv2DTranspose(32, 3, strides=2, padding="same", activation="relu",
                                     name="touched_dec_deconv_1")(d)
    out = keras.layers.Conv2D(1, 3, padding="same", name="dec_out")(d)
    model = keras.Model(images, [out, mean, log_var])
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(RNG.random((32, 28, 28, 1), dtype=np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits, m, lv = model(x, training=True)
            rec = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits))
            kl = -0.5 * tf.reduce_mean(1.0 + lv - tf.square(m) - tf.exp(lv))
            loss = rec + 0.01 * kl
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return step, 32
""", lambda key: "planted_dec_deconv" in key),
    "skeleton_joint_centering_short_ops_layer": (
        "a skeleton action classifier on 64 frames of 17 joints' (x, y) (two Conv1D of 128 filters over the frames) "
        "inference in a tf.function on a batch of 128: a custom layer added before it that centres each joint on the "
        "hip and scales it by the "
        "torso length joint by joint (17 joints: two slices, two subtractions, two divisions each, then a "
        "concatenate: a new group of short ops)",
        """
class PlantedJointCentering(keras.layers.Layer):
    def call(self, x):
        hip_x, hip_y = x[..., 22:23], x[..., 23:24]
        torso = keras.ops.sqrt(keras.ops.square(x[..., 10:11] - hip_x) + keras.ops.square(x[..., 11:12] - hip_y))
        torso = torso + 1e-3
        parts = []
        for j in range(17):
            parts.append((x[..., 2 * j:2 * j + 1] - hip_x) / torso)
            parts.append((x[..., 2 * j + 1:2 * j + 2] - hip_y) / torso)
        return keras.ops.concatenate(parts, axis=-1)


def build():
    layers = [keras.Input((64, 34))]
    if PLANTED:
        layers.append(PlantedJointCentering(name="planted_joint_centering"))
    layers += [keras.layers.Conv1D(128, 3, padding="same", activation="relu", name="pose_conv_0"),
               keras.layers.Conv1D(128, 3, padding="same", activation="relu", name="pose_conv_1"),
               keras.layers.GlobalAveragePooling1D(name="pool"), keras.layers.Dense(20, name="actions")]
    model = keras.Sequential(layers)
    x = tf.constant(RNG.random((128, 64, 34), dtype=np.float32))
    step = tf.function(lambda: model(x, training=False))
    return step, 128
""", lambda key: "planted_joint_centering" in key),
    "aspp_segmenter_branch_widened": (
        "a DeepLab-style segmenter on 64x64 images (a strided Conv2D trunk, then an atrous spatial pyramid of five "
        "parallel branches: 1x1, 3x3 at rates 2, 4 and 6, and image pooling, concatenated and projected) "
        "train_on_batch: its rate-4 atrous branch 32 -> 96 filters",
        """
def build():
    inputs = keras.Input((64, 64, 3))
    h = keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu", name="trunk_conv_0")(inputs)
    h = keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu", name="trunk_conv_1")(h)
    branches = [keras.layers.Conv2D(32, 1, activation="relu", name="aspp_1x1")(h),
                keras.layers.Conv2D(32, 3, padding="same", dilation_rate=2, activation="relu", name="aspp_rate_2")(h),
                keras.layers.Conv2D(96 if PLANTED else 32, 3, padding="same", dilation_rate=4, activation="relu",
                                    name="planted_aspp_rate_4")(h),
                keras.layers.Conv2D(32, 3, padding="same", dilation_rate=6, activation="relu", name="aspp_rate_6")(h)]
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True, name="aspp_image_pool")(h)
    pooled = keras.layers.Conv2D(32, 1, activation="relu", name="aspp_image_conv")(pooled)
    branches.append(keras.layers.UpSampling2D(16, name="aspp_image_up")(pooled))
    h = keras.layers.Concatenate(name="touched_aspp_concat")(branches)
    h = keras.layers.Conv2D(64, 1, activation="relu", name="touched_aspp_project")(h)
    h = keras.layers.Conv2D(5, 1, name="classes")(h)
    model = keras.Model(inputs, keras.layers.UpSampling2D(4, interpolation="bilinear", name="logits_up")(h))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((8, 64, 64, 3), dtype=np.float32)
    y = RNG.integers(0, 5, (8, 64, 64)).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 8
""", lambda key: "planted_aspp_rate_4" in key),
    "char_simplernn_units_widened": (
        "a character-level next-character model (Embedding of 64 symbols, a SimpleRNN over 100 characters returning "
        "every step, a per-step Dense over the symbols) train_on_batch: its SimpleRNN 256 -> 304 units",
        """
def build():
    model = keras.Sequential([keras.Input((100,), dtype="int32"), keras.layers.Embedding(64, 32, name="chars"),
                              keras.layers.SimpleRNN(304 if PLANTED else 256, return_sequences=True,
                                                     name="planted_char_rnn"),
                              keras.layers.Dense(64, name="touched_next_char")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.integers(0, 64, (32, 100)).astype(np.int32)
    y = np.roll(x, -1, axis=1)
    return (lambda: model.train_on_batch(x, y)), 32
""", lambda key: "planted_char_rnn" in key),
    "cnn_groupnorm_added": (
        "a small CNN image classifier on 32x32 images (three Conv2D of 32/64/128 filters with max pooling) "
        "train_on_batch: a GroupNormalization (8 groups) added after its second Conv2D",
        """
def build():
    layers = [keras.Input((32, 32, 3)), keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv_0"),
              keras.layers.MaxPooling2D(name="pool_0"),
              keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv_1")]
    if PLANTED:
        layers.append(keras.layers.GroupNormalization(8, name="planted_group_norm"))
    layers += [keras.layers.MaxPooling2D(name="touched_pool_1"),
               keras.layers.Conv2D(128, 3, padding="same", activation="relu", name="conv_2"),
               keras.layers.GlobalAveragePooling2D(name="pool"), keras.layers.Dense(10, name="classes")]
    model = keras.Sequential(layers)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = RNG.random((16, 32, 32, 3), dtype=np.float32)
    y = RNG.integers(0, 10, 16).astype(np.int32)
    return (lambda: model.train_on_batch(x, y)), 16
""", lambda key: "planted_group_norm" in key),
}
