"""Held-out pipeline set 8 for benchmarks/explain_pipelines_against.py (written 2026-11-29 after commit 0bc035d by a
writer who did not read the explanation's rules, code, docs, tests or results, before any run of them).

Four default-option tf.data regressions, none of them one of CASES, HELDOUT..HELDOUT7, all of pure TF graph ops (no
Python in any pipeline; tf.data.Options never touched). Two change the pipeline's shape beside a stage of the same
kind: a text-cleaning map (lower-case, strip, regex_replace of non-letters) inserted as a parallel map right before
the existing parallel tokenizer map that tf.data fuses with .batch(16) (the new map becomes a plain parallel Map
under the MapAndBatch), and a fixed colour adjustment (saturation, hue, brightness) moved from a parallel map after
.batch(8) to a per-image parallel map before it, while the parallel JPEG decode stays before it (the moved map is now
the MapAndBatch, the decode a plain Map under it). The other two keep the shape: a random saturation added to the
existing batched augmentation map (flip, brightness, contrast) after .batch(16) of the decoded images, and a parallel
interleave over 32 in-memory shards (each a from_tensor_slices with a small map) whose cycle_length was lowered from
32 to 4. Helpers: HELPERS8, run after the benchmark's HELPERS (it uses JPEGS); about 0.05 s to set up, nothing
written to disk.

Sized only by plain timing of each pair alone in one process (200 pulls to warm up, then 4 alternating turns of
about 1.5 s each, ratio of the median turn throughputs), on 2 cores shared with other work (load 2-6 while sizing).
Regressed/healthy throughput: clean_before_tokenize 0.75, 0.80; colour_per_image 0.81, 0.72 (with two colour ops it
was 0.79, 0.91, with contrast as the third 0.66, 0.69); saturation_in_augment 0.84, 0.78, 0.69; interleave_cycle_
shrunk 0.72, 0.71, 0.84. Healthy pipelines 350-1,100 pulls a second. Dropped while sizing: a 5x5 and a 3x3
depthwise Gaussian blur in the augmentation (0.20, 0.55), a gamma correction there (0.80, 0.65), a larger
interleave cycle (4 -> 32 was faster, 1.38; 16 -> 8 also faster), a lighter cleaning map (0.62, noise).

Stage names seen with the profiler (Iterator:: events of 200 pulls after 50, in key form; the planted stage marked *;
every pipeline also has Prefetch at the top and ForeverRepeat/TensorSlice or Range at the bottom, never planted):
  clean_before_tokenize   A: Prefetch/MapAndBatch (tokenizer)
                          B: Prefetch/MapAndBatch (tokenizer), *Prefetch/MapAndBatch/Map (cleaning)
  colour_per_image        A: Prefetch/Map (colour per batch), Prefetch/Map/MapAndBatch (decode)
                          B: *Prefetch/MapAndBatch (colour per image), Prefetch/MapAndBatch/Map (decode)
  saturation_in_augment   A and B: *Prefetch/Map (augmentation; slower in B), Prefetch/Map/MapAndBatch (decode)
  interleave_cycle_shrunk A and B: Prefetch/Batch, *Prefetch/Batch/Interleave (ParallelInterleaveV4),
                          Prefetch/Batch/Interleave/Map and .../Map/TensorSlice (each shard's own map and
                          slices, raw Iterator::...::ParallelInterleaveV4[i]::Map), Prefetch/Batch/Interleave/
                          ForeverRepeat/Range (the shard indices; seen in B's sample only)
(colour_per_image was profiled with its two-op colour functions; the brightness added after does not change names).

The predicates (HELDOUT8, on the named stage's own name): Map for clean_before_tokenize and saturation_in_augment
(the only plain Map in B is the planted one; the unchanged tokenizer and decode are MapAndBatch); MapAndBatch for
colour_per_image (the unchanged decode is a plain Map in B); Interleave for interleave_cycle_shrunk (not the
per-shard Map, Batch, Range nor TensorSlice). Own names tell the planted stage apart in all four, so PATH_JUDGES8
only repeats them on the whole path, pinned to the depth seen in B: Prefetch/MapAndBatch/Map, Prefetch/MapAndBatch,
Prefetch/Map, Prefetch/Batch/Interleave.
"""
from __future__ import annotations
from collections.abc import Callable

HELPERS8 = '''

H8_WORDS = np.array(["Great", "movie", "THE", "plot", "was", "slow", "but", "acting", "good", "ending", "weak", "fun"])
H8_LINES = [" ".join(H8_WORDS[(np.arange(40) * (i % 11 + 1) + i) % 12]) + "  " for i in range(2000)]


def h8_clean(line):
    line = tf.strings.strip(tf.strings.lower(line))
    return tf.strings.regex_replace(line, "[^a-z ]", "")


def h8_tokenize(line):
    words = tf.strings.split(line)
    ids = tf.strings.to_hash_bucket_fast(tf.strings.ngrams(words, (1, 2), separator=" "), 20000)
    return tf.pad(ids, [[0, 80 - tf.shape(ids)[0]]])[:80]


def h8_decode(jpeg):
    return tf.cast(tf.io.decode_jpeg(jpeg, channels=3), tf.float32) / 255.0


def h8_colour_batch(images):
    return tf.image.adjust_brightness(tf.image.adjust_hue(tf.image.adjust_saturation(images, 1.3), 0.05), 0.05)


def h8_colour_image(image):
    return tf.image.adjust_brightness(tf.image.adjust_hue(tf.image.adjust_saturation(image, 1.3), 0.05), 0.05)


def h8_augment(images):
    images = tf.image.random_flip_left_right(tf.cast(images, tf.float32) / 255.0)
    return tf.image.random_contrast(tf.image.random_brightness(images, 0.1), 0.8, 1.2)


def h8_augment_saturation(images):
    return tf.image.random_saturation(h8_augment(images), 0.8, 1.2)


H8_SHARDS = tf.constant(np.random.default_rng(82).random((32, 500, 64), dtype=np.float32))


def h8_shard(i):
    return tf.data.Dataset.from_tensor_slices(H8_SHARDS[i]).map(lambda r: r * 2.0 - 1.0)
'''

_H8_DECODE = "tf.data.Dataset.from_tensor_slices(JPEGS).repeat().map(h8_decode, num_parallel_calls=tf.data.AUTOTUNE)"

HELDOUT8: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "clean_before_tokenize": (
        "a text-cleaning map (lower-case, strip, regex_replace of non-letters) inserted as a parallel map right before "
        "the parallel tokenizer (hashed 1- and 2-grams of 40-word lines, padded to 80) and .batch(16)",
        "tf.data.Dataset.from_tensor_slices(H8_LINES).repeat().map(h8_tokenize, num_parallel_calls=tf.data.AUTOTUNE)"
        ".batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(H8_LINES).repeat().map(h8_clean, num_parallel_calls=tf.data.AUTOTUNE)"
        ".map(h8_tokenize, num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: stage == "Map"),
    "colour_per_image": (
        "a fixed colour adjustment (saturation, hue, brightness) moved from a parallel map over each batch of 8 "
        "decoded 64x64 images to a parallel per-image map before .batch(8), after the unchanged parallel JPEG decode",
        f"{_H8_DECODE}.batch(8).map(h8_colour_batch, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        f"{_H8_DECODE}.map(h8_colour_image, num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)",
        8, lambda stage: stage == "MapAndBatch"),
    "saturation_in_augment": (
        "a random saturation (an RGB-HSV round trip) added to the existing parallel augmentation (flip, brightness, "
        "contrast) of each batch of 16 decoded 64x64 images",
        f"{_H8_DECODE}.batch(16).map(h8_augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        f"{_H8_DECODE}.batch(16).map(h8_augment_saturation, num_parallel_calls=tf.data.AUTOTUNE)"
        ".prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: stage == "Map"),
    "interleave_cycle_shrunk": (
        "a parallel interleave over 32 in-memory shards (500 records of 64 floats, each through a small map) whose "
        "cycle_length was lowered from 32 to 4, before .batch(32)",
        "tf.data.Dataset.range(32).repeat().interleave(h8_shard, cycle_length=32, num_parallel_calls=tf.data.AUTOTUNE)"
        ".batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.range(32).repeat().interleave(h8_shard, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE)"
        ".batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: stage == "Interleave"),
}

PATH_JUDGES8: dict[str, Callable[[str], bool]] = {
    "clean_before_tokenize": lambda path: path == "Prefetch/MapAndBatch/Map",
    "colour_per_image": lambda path: path == "Prefetch/MapAndBatch",
    "saturation_in_augment": lambda path: path == "Prefetch/Map",
    "interleave_cycle_shrunk": lambda path: path == "Prefetch/Batch/Interleave",
}
