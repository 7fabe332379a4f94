"""Held-out pipeline set 5 for benchmarks/explain_pipelines_against.py (written 2026-11-28 after commit d5890e3 by a
writer who did not read the explanation's rules, code, docs or results, before any run of them).

Six default-option tf.data regressions, none of them one of CASES or HELDOUT..HELDOUT4: two through Python
(a py_function label lookup over each batch, a numpy_function peak normalisation over each batch) and four of
pure TF graph ops (a resize at a larger size then cropped, regex standardisation of text, a shuffle buffer far
beyond need on freshly made 12 KB images, a filter whose predicate became a per-image reduction). Sized only by
timing each pair alone in one process (4 alternating turns of 1,500 pulls after 300), on 2 shared cores:
regressed/healthy throughput about 0.65-0.85 (label_lookup_py_map the noisiest, 0.49-0.81 from run to run),
healthy pipelines 1,200-4,000 pulls a second.

The predicates: the planted stage's own name. oversized_shuffle also accepts the Batch just after the shuffle
(the extra time comes only with freshly allocated elements held long in the buffer, and is paid where they are
read out and copied, which its writer could not place more exactly); label_lookup_py_map excludes the unchanged
per-record map that tf.data fuses with .batch (MapAndBatch).
"""
from __future__ import annotations
from collections.abc import Callable

HELPERS5 = '''

H5_CLASSES = np.array(["cat", "dog", "bird", "fish", "horse", "sheep", "cow", "frog", "deer", "truck"])
H5_NAMES = H5_CLASSES[np.random.default_rng(51).integers(0, 10, 20000)]
H5_TABLE = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
    tf.constant(H5_CLASSES), tf.range(10, dtype=tf.int64)), default_value=-1)
H5_IDS = {name: i for i, name in enumerate(H5_CLASSES)}


def h5_features(r, name):
    return (r - 0.5) * 2.0, name


def h5_features_and_id(r, name):
    return (r - 0.5) * 2.0, H5_TABLE.lookup(name)


def _h5_ids(names):
    return np.array([H5_IDS[name.decode()] for name in names.numpy()], dtype=np.int64)


def h5_ids_py(r, names):
    labels = tf.py_function(_h5_ids, [names], tf.int64)
    labels.set_shape(names.shape)
    return r, labels


def h5_crop_resize(j, size=48):
    image = tf.io.decode_jpeg(j, channels=3)
    image = tf.image.resize(image, (size + size // 7, size + size // 7))
    return tf.image.resize_with_crop_or_pad(image, size, size)


def h5_resize_large_crop(j, large, size=48):
    image = tf.image.resize(tf.io.decode_jpeg(j, channels=3), (large, large))
    image = tf.image.resize_with_crop_or_pad(image, large * 6 // 7, large * 6 // 7)
    return tf.image.resize(image, (size, size))


H5_WORDS = np.array(["The", "movie", "was", "great,", "the", "acting", "and", "plot", "were", "fine.", "I",
                     "really", "did", "not", "like", "the", "ending", "but", "story", "was", "good!", "director",
                     "cut", "is", "long", "and", "slow", "in", "parts", "overall", "<br", "/><br", "/>"])
H5_REVIEWS = [" ".join(H5_WORDS[(np.arange(64) * (i % 17 + 3) + i) % 33]) for i in range(1000)]


def h5_tokens(reviews):
    words = tf.strings.split(tf.strings.lower(reviews))
    grams = tf.strings.ngrams(words, (1, 2, 3), separator=" ")
    return tf.strings.to_hash_bucket_fast(grams.to_tensor("", shape=(None, 192)), 100000)


def h5_standardise(reviews):
    reviews = tf.strings.regex_replace(reviews, "<br />", " ")
    return tf.strings.regex_replace(reviews, "[[:punct:]]", "")


def h5_standardised_tokens(reviews):
    return h5_tokens(h5_standardise(reviews))

H5_PHOTOS = np.random.default_rng(52).integers(0, 256, (512, 32, 32, 3), dtype=np.uint8)
H5_PHOTO_LABELS = np.random.default_rng(53).integers(0, 10, 512)


def h5_to_float(image, label):
    return tf.cast(image, tf.float32) / 255.0, label


def h5_not_class_9(image, label):
    return label != 9


def h5_not_blank(image, label):
    gray = tf.image.rgb_to_grayscale(image)
    return tf.logical_and(label != 9, tf.math.reduce_std(gray) > 0.02)


H5_WAVES = np.random.default_rng(54).standard_normal((256, 4000)).astype(np.float32)


H5_MEL = tf.signal.linear_to_mel_weight_matrix(64, 129, 16000, 20.0, 7600.0)


def h5_log_mel(magnitudes):
    return tf.math.log(tf.tensordot(magnitudes, H5_MEL, 1) + 1e-6)


def h5_spectrogram(waves):
    waves = waves / (tf.reduce_max(tf.abs(waves), axis=-1, keepdims=True) + 1e-6)
    return h5_log_mel(tf.abs(tf.signal.stft(waves, 256, 128)))


def _h5_np_peak_normalise(waves):
    return (waves / (np.abs(waves).max(axis=-1, keepdims=True) + 1e-6)).astype(np.float32)


def h5_np_spectrogram(waves):
    waves = tf.numpy_function(_h5_np_peak_normalise, [waves], tf.float32)
    waves.set_shape((None, 4000))
    return h5_log_mel(tf.abs(tf.signal.stft(waves, 256, 128)))
'''

HELDOUT5: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "label_lookup_py_map": (
        "class names mapped to ids by a second parallel map after .batch(16) calling a py_function (a dict lookup "
        "in Python per name) instead of a StaticHashTable lookup in the per-record feature map",
        "tf.data.Dataset.from_tensor_slices((ROWS, H5_NAMES)).repeat().map(h5_features_and_id, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices((ROWS, H5_NAMES)).repeat().map(h5_features, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(16).map(h5_ids_py, num_parallel_calls=tf.data.AUTOTUNE)"
        ".prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Map" in stage and "FlatMap" not in stage and "AndBatch" not in stage),
    "resize_large_then_crop": (
        "a parallel JPEG decode that now resizes to 96x96, centre-crops 82x82 and resizes again to 48x48 "
        "instead of resizing to 54x54 and centre-cropping 48x48",
        "tf.data.Dataset.from_tensor_slices(JPEGS).repeat().map(h5_crop_resize, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(JPEGS).repeat().map(lambda j: h5_resize_large_crop(j, 96), "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)",
        8, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "regex_standardise": (
        "movie reviews tokenized per batch (lowercase, split, 1-3-grams hashed) that now also standardise "
        "each review with two tf.strings.regex_replace (strip '<br />', strip punctuation) in the same "
        "parallel map",
        "tf.data.Dataset.from_tensor_slices(H5_REVIEWS).repeat().batch(32).map(h5_tokens, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H5_REVIEWS).repeat().batch(32).map(h5_standardised_tokens, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "oversized_shuffle": (
        "32x32 images converted to float32 (12 KB each) by a parallel map, then shuffled with a buffer raised"
        " from 128 to 20,000 elements (240 MB held)",
        "tf.data.Dataset.from_tensor_slices((H5_PHOTOS, H5_PHOTO_LABELS)).repeat().map(h5_to_float, "
        "num_parallel_calls=tf.data.AUTOTUNE).shuffle(128).batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices((H5_PHOTOS, H5_PHOTO_LABELS)).repeat().map(h5_to_float, "
        "num_parallel_calls=tf.data.AUTOTUNE).shuffle(20000).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Shuffle" in stage or stage in ("Batch", "BatchV2")),
    "expensive_filter": (
        "a filter that dropped one class by its label now also drops near-blank images by the grayscale "
        "standard deviation of every image",
        "tf.data.Dataset.from_tensor_slices((H5_PHOTOS, H5_PHOTO_LABELS)).repeat().map(h5_to_float, "
        "num_parallel_calls=tf.data.AUTOTUNE).filter(h5_not_class_9).batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices((H5_PHOTOS, H5_PHOTO_LABELS)).repeat().map(h5_to_float, "
        "num_parallel_calls=tf.data.AUTOTUNE).filter(h5_not_blank).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Filter" in stage),
    "numpy_spectrogram": (
        "batches of 4,000-sample clips peak-normalised by a tf.numpy_function (NumPy over the batch) instead "
        "of TF ops, before the same log-mel STFT, in the same parallel map after .batch(24)",
        "tf.data.Dataset.from_tensor_slices(H5_WAVES).repeat().batch(24).map(h5_spectrogram, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H5_WAVES).repeat().batch(24).map(h5_np_spectrogram, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        24, lambda stage: "Map" in stage and "FlatMap" not in stage),
}
