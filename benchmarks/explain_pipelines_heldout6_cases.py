"""Held-out pipeline set 6 for benchmarks/explain_pipelines_against.py (written 2026-11-29 after commit 7236bc9 by a
writer who did not read the explanation's rules, code, docs or results, before any run of them).

Six default-option tf.data regressions, none of them one of CASES, HELDOUT..HELDOUT4 or HELDOUT5, all of pure TF
graph ops (no Python in any pipeline): a random rotation (ImageProjectiveTransformV3) added to a per-image JPEG
decode, a tokenizer changed from hashed words to Unicode code points, a noise augmentation added as a plain .map
(stateful random ops, so tf.data's map parallelization leaves it sequential), TFRecord shards read through a
parallel interleave that are now GZIP-compressed, a .cache() moved before the JPEG decode instead of after it, and
a two-class rebalancing through Dataset.sample_from_datasets. Sized only by timing each pair alone in one process
(4 alternating turns of 1,500 pulls after 300), on 2 cores shared with other work (load 1-3.6): regressed/healthy
throughput random_rotation 0.73, char_tokens 0.75 and 0.74, sequential_noise_map 0.71, gzip_shards 0.73 and 0.68
(the noisiest: 0.77-0.85 with 6.9 KB records, 0.66 with 12 KB), cache_before_decode 0.70, class_rebalanced 0.79;
healthy pipelines 300-4,200 pulls a second.

The predicates: the planted stage's own name, under the names tf.data gives it after its default rewrites
(checked with the profiler's Iterator:: events); random_rotation and char_tokens any map but a FlatMap (theirs is
the only map: MapAndBatch, ParallelMapV2). gzip_shards accepts the interleave and the reader inside each of
its cycles (TFRecord, and the FlatMap that TFRecordDataset makes over its file names); sequential_noise_map only
the sequential Map (the unchanged augmentation before it is a ParallelMapV2); cache_before_decode the decode map
and the cache, not the unchanged augmentation fused with .batch (MapAndBatch); class_rebalanced the
DirectedInterleave of sample_from_datasets and its selector (a parallelized map over Random), not the unchanged
decode (MapAndBatch) nor the Batch and ShuffleAndRepeat the healthy pipeline also has.
"""
from __future__ import annotations
from collections.abc import Callable

HELPERS6 = '''
import atexit
import os
import shutil
import tempfile

H6_PHOTOS = np.random.default_rng(61).integers(0, 256, (256, 64, 64, 3), dtype=np.uint8)


def h6_augment(images):
    images = tf.image.random_flip_left_right(tf.cast(images, tf.float32) / 255.0)
    images = tf.image.random_contrast(tf.image.random_brightness(images, 0.2), 0.8, 1.2)
    return tf.clip_by_value(tf.image.random_saturation(images, 0.8, 1.2), 0.0, 1.0)


def h6_add_noise(images):
    return tf.clip_by_value(images + tf.random.uniform(tf.shape(images), -0.03, 0.03), 0.0, 1.0)


def h6_rotate(images, max_angle=0.25):
    n = tf.shape(images)[0]
    height = tf.cast(tf.shape(images)[1], tf.float32) - 1.0
    width = tf.cast(tf.shape(images)[2], tf.float32) - 1.0
    angles = tf.random.uniform((n,), -max_angle, max_angle)
    cos, sin, zeros = tf.cos(angles), tf.sin(angles), tf.zeros((n,))
    x_offset = (width - (cos * width - sin * height)) / 2.0
    y_offset = (height - (sin * width + cos * height)) / 2.0
    transforms = tf.stack([cos, -sin, x_offset, sin, cos, y_offset, zeros, zeros], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(images=images, transforms=transforms,
                                                 output_shape=tf.shape(images)[1:3], fill_value=0.0,
                                                 interpolation="BILINEAR", fill_mode="REFLECT")


def h6_decode_augment(jpeg, size=48):
    image = tf.image.resize(tf.io.decode_jpeg(jpeg, channels=3), (size, size)) / 255.0
    return tf.image.random_flip_left_right(image)


def h6_decode_augment_rotate(jpeg, size=48):
    return h6_rotate(h6_decode_augment(jpeg, size)[None])[0]


H6_VOCAB = np.array(["\\u00dcberraschend", "gut", "caf\\u00e9", "na\\u00efve", "film", "the", "story", "was",
                     "\\u00fcber", "slow", "and", "se\\u00f1or", "plot", "actors", "smart", "r\\u00e9sum\\u00e9",
                     "music", "ending", "was", "weak", "fun"])
H6_LINES = [" ".join(H6_VOCAB[(np.arange(40) * (i % 13 + 2) + i) % 21]) for i in range(1000)]


def h6_word_ids(lines):
    words = tf.strings.split(tf.strings.lower(lines, encoding="utf-8"))
    return tf.strings.to_hash_bucket_fast(words.to_tensor("", shape=(None, 40)), 50000)


def h6_char_ids(lines):
    chars = tf.strings.unicode_decode(tf.strings.lower(lines, encoding="utf-8"), "UTF-8")
    return chars.to_tensor(0, shape=(None, 320))


def _h6_write_shards():
    folder = tempfile.mkdtemp(prefix="h6-shards-")
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, True))  # not from a forked child
    records = np.random.default_rng(62).integers(0, 256, (2048, 56, 56, 3), dtype=np.uint8)
    records[:, :, :28] = 0  # half of each image blank: the compression has something to do
    plain, gzip = [], []
    for shard in range(8):
        for files, kind in ((plain, ""), (gzip, "GZIP")):
            files.append(os.path.join(folder, f"shard-{shard}.tfrecord" + (".gz" if kind else "")))
            with tf.io.TFRecordWriter(files[-1], options=kind) as writer:
                for record in records[shard::8]:
                    writer.write(record.tobytes())
    return plain, gzip


H6_SHARDS, H6_GZIP_SHARDS = _h6_write_shards()


def h6_gzip_shard(path):
    return tf.data.TFRecordDataset(path, compression_type="GZIP")


def h6_parse_record(record):
    return tf.reshape(tf.io.decode_raw(record, tf.uint8), (56, 56, 3))


H6_JPEGS = [tf.io.encode_jpeg(tf.cast(tf.image.resize(tf.random.uniform((6, 6, 3), 0, 255, seed=i), (48, 48))
                                      + tf.random.uniform((48, 48, 3), -8, 8, seed=i), tf.uint8)).numpy()
            for i in range(64)] * 8


def h6_decode(jpeg):
    return tf.io.decode_jpeg(jpeg, channels=3)


def h6_random_crop(image):
    image = tf.image.resize(image, (88, 88)) / 255.0
    image = tf.image.random_flip_left_right(tf.image.random_crop(image, (64, 64, 3)))
    image = tf.image.random_saturation(tf.image.random_contrast(image, 0.8, 1.2), 0.8, 1.2)
    image = tf.clip_by_value(tf.image.random_hue(tf.image.random_brightness(image, 0.1), 0.05), 0.0, 1.0)
    return tf.image.per_image_standardization(image)


H6_IS_RARE = (np.arange(64) % 8 == 0).astype(np.int64)
H6_RARE = [JPEGS[i] for i in range(64) if H6_IS_RARE[i]]
H6_COMMON = [JPEGS[i] for i in range(64) if not H6_IS_RARE[i]]


def h6_decode_resize(jpeg, label):
    return tf.image.resize(tf.io.decode_jpeg(jpeg, channels=3), (32, 32)) / 255.0, label


def h6_balanced():
    rare = tf.data.Dataset.from_tensor_slices((H6_RARE, tf.ones(8, tf.int64))).shuffle(8).repeat()
    common = tf.data.Dataset.from_tensor_slices((H6_COMMON, tf.zeros(56, tf.int64))).shuffle(56).repeat()
    return tf.data.Dataset.sample_from_datasets([rare, common], weights=[0.5, 0.5])
'''

HELDOUT6: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "random_rotation": (
        "a parallel per-image map (decode a 128x128 JPEG, resize to 48x48, random flip) that now also rotates "
        "each image by a random angle up to 0.25 rad (ImageProjectiveTransformV3, bilinear, reflected edges)",
        "tf.data.Dataset.from_tensor_slices(EXAMPLE_JPEGS).repeat().map(h6_decode_augment, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(EXAMPLE_JPEGS).repeat().map(h6_decode_augment_rotate, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "char_tokens": (
        "a tokenizer changed from hashed whitespace words (40 a line) to Unicode code points (320 a line, "
        "tf.strings.unicode_decode after a UTF-8 lowercase) in the same parallel map after .batch(64)",
        "tf.data.Dataset.from_tensor_slices(H6_LINES).repeat().batch(64).map(h6_word_ids, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H6_LINES).repeat().batch(64).map(h6_char_ids, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        64, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "sequential_noise_map": (
        "uniform pixel noise added to batches of 32 64x64 images by a .map without num_parallel_calls after the "
        "parallel colour augmentation (tf.random ops are stateful, so tf.data does not parallelize it)",
        "tf.data.Dataset.from_tensor_slices(H6_PHOTOS).repeat().batch(32).map(h6_augment, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H6_PHOTOS).repeat().batch(32).map(h6_augment, "
        "num_parallel_calls=tf.data.AUTOTUNE).map(h6_add_noise).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: stage == "Map"),
    "gzip_shards": (
        "8 TFRecord shards of 9 KB images (56x56, half blank) read through a parallel interleave (cycle 4) that "
        "are now written and read GZIP-compressed",
        "tf.data.Dataset.from_tensor_slices(H6_SHARDS).repeat().interleave(tf.data.TFRecordDataset, "
        "cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE).map(h6_parse_record, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H6_GZIP_SHARDS).repeat().interleave(h6_gzip_shard, "
        "cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE).map(h6_parse_record, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: ("Interleave" in stage and "Directed" not in stage) or "TFRecord" in stage
        or stage == "FlatMap"),
    "cache_before_decode": (
        "a .cache() moved from after the JPEG decode to before it (the encoded bytes cached, 512 48x48 JPEGs "
        "decoded again every epoch), ahead of the same parallel random crop and colour augmentation",
        "tf.data.Dataset.from_tensor_slices(H6_JPEGS).map(h6_decode, num_parallel_calls=tf.data.AUTOTUNE).cache()"
        ".repeat().map(h6_random_crop, num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H6_JPEGS).cache().map(h6_decode, num_parallel_calls=tf.data.AUTOTUNE)"
        ".repeat().map(h6_random_crop, num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: ("Map" in stage and "FlatMap" not in stage and "AndBatch" not in stage)
        or "Cache" in stage),
    "class_rebalanced": (
        "a shuffled set of 64 JPEGs (1 in 8 of the rare class) rebalanced 50/50 through "
        "Dataset.sample_from_datasets over one shuffled, repeated dataset per class, before the same parallel "
        "decode",
        "tf.data.Dataset.from_tensor_slices((JPEGS, H6_IS_RARE)).shuffle(64).repeat().map(h6_decode_resize, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        "h6_balanced().map(h6_decode_resize, num_parallel_calls=tf.data.AUTOTUNE).batch(32)"
        ".prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "DirectedInterleave" in stage or "ParallelMap" in stage or stage in ("Map", "Random")),
}

# Judges on the named stage's whole path, where its own name cannot tell the planted stage from an unchanged one.
# Added by the engineer before any run: the profile's stage keys drop TensorFlow's "Parallel" and "V2", so the
# planted sequential Map and the unchanged ParallelMapV2 below it are both "Map" there; the planted map is the upper
# one (Prefetch/Map above Prefetch/Map/Map).
PATH_JUDGES6: dict[str, Callable[[str], bool]] = {
    "sequential_noise_map": lambda path: path.split("/")[-1] == "Map" and path.split("/").count("Map") == 1,
}
