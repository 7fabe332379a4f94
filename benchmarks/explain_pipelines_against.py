"""Default-option tf.data regressions explained on the user's own path: ``pytest --tfperf --tfperf-against``.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/explain_pipelines_against.py [--sessions 3]

Issue 26 asks that four pipeline regressions users make, with TensorFlow's
default options (autotune, the injected prefetch, map parallelization), have
the stage behind them named first, in each of 3 fresh processes: a map that
lost its vectorisation, a dropped ``.cache()``, a slow Python source and a
sequential Python map. ``explain_heldout.py`` ran the same four in its own
harness (three arms alternating in one profiler session); this script runs
them the way a user does: a throwaway git repository per case, revision A the
healthy pipeline, revision B the regression, and ``pytest --tfperf
--tfperf-against=HEAD~1`` on B (explanations are on by default for a red
verdict), each session a fresh pair of processes. The test pulls the
pipeline with ``tfperf.iterate``; nothing in it changes tf.data's options.

The judge was written before the first run and is not changed after it: the
cause the report leads with (``reports.explain_headline``: the stage behind
the consumer's wait, else the top cause, else the stage that moved with the
largest own change) must be the planted stage, read from the stage's own name (the last
element of its path, so that a source below a planted map does not count).
Writes ``benchmarks/results/explain_pipelines_against.{json,md}``.

``--plain CASE ...`` instead times each case's healthy and regressed
pipelines in one process, taking turns (4 turns of 3,000 pulls each after
500 unmeasured), with no plugin: how much slower the regression is where
nothing but the pipeline runs (``..._plain.{json,md}``).
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
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from explain_pipelines_heldout5_cases import HELDOUT5, HELPERS5
from explain_pipelines_heldout6_cases import HELDOUT6, HELPERS6, PATH_JUDGES6
from explain_pipelines_heldout7_cases import HELDOUT7, HELPERS7, PATH_JUDGES7
from explain_pipelines_heldout8_cases import HELDOUT8, HELPERS8, PATH_JUDGES8

ROOT = Path(__file__).resolve().parents[1]

COMMON = '''
import time
import numpy as np
import tensorflow as tf

ROWS = np.random.default_rng(1).random((20000, 64), dtype=np.float32)


def busy(ms):
    end = time.perf_counter() + ms / 1e3
    scratch = np.arange(500, dtype=np.float64)
    while time.perf_counter() < end:  # parsing or augmentation work in Python
        np.sort(scratch)


def normalise(t):
    t = (t - tf.reduce_mean(t, axis=-1, keepdims=True)) / (tf.math.reduce_std(t, axis=-1, keepdims=True) + 1e-6)
    return tf.math.tanh(t) * 2.0 + tf.math.sqrt(tf.abs(t) + 1.0)
'''

# case: (what, healthy pipeline, regressed pipeline, items per element, the planted stage's own name)
CASES: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "lost_vectorisation": (
        "a normalising map moved before .batch(32): per element instead of vectorised",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().batch(32).map(normalise).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(normalise).batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "dropped_cache": (
        "a 0.15 ms py_function parse whose .cache() was dropped",
        "tf.data.Dataset.range(64).map(lambda i: tf.py_function(parse, [i], tf.int64)).cache().batch(8).repeat()"
        ".prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.range(64).map(lambda i: tf.py_function(parse, [i], tf.int64)).batch(8).repeat()"
        ".prefetch(tf.data.AUTOTUNE)",
        8, lambda stage: ("Map" in stage and "FlatMap" not in stage) or "Cache" in stage),
    "slow_source": (
        "records from a Python generator doing parsing work instead of from_tensor_slices",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: r * 2.0, num_parallel_calls=tf.data.AUTOTUNE)"
        ".batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((64,), tf.float32)).repeat()"
        ".map(lambda r: r * 2.0, num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Generator" in stage or "FlatMap" in stage),
    "sequential_py_map": (
        "a py_function map that waits on I/O (0.15 ms) without num_parallel_calls (sequential)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: tf.py_function(augment, [r], tf.float32), "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: tf.py_function(augment, [r], tf.float32))"
        ".batch(8).prefetch(tf.data.AUTOTUNE)",
        8, lambda stage: "Map" in stage and "FlatMap" not in stage),
}

# Written after the own-change rule (commit fe2649a) was chosen on CASES' first run, before any run of these:
# the figures of the rule are read on these, which nothing was chosen on.
HELDOUT: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "interleave_sequential": (
        "an interleave over 8 shards that lost num_parallel_calls, each shard's records read with a 0.1 ms wait",
        "tf.data.Dataset.range(8).interleave(shard, cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE).repeat()"
        ".batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.range(8).interleave(shard, cycle_length=8).repeat().batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Interleave" in stage),
    "filter_in_python": (
        "a filter whose predicate became a py_function doing 0.1 ms of work per record",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().filter(lambda r: r[0] >= 0.0).batch(16)"
        ".prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().filter(lambda r: tf.reshape(tf.py_function(keep, [r], tf.bool), []))"
        ".batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Filter" in stage),
    "heavier_vectorised_map": (
        "a batched augmentation map (after .batch) that now does four times the math",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().batch(64).map(augment_batch, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().batch(64).map(lambda b: augment_batch(b, 4 * 40), "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        64, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "slower_parallel_py_map": (
        "a parallel py_function decode whose Python work doubled (0.1 ms -> 0.2 ms a record)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: tf.py_function(decode, [r, 0.1], "
        "tf.float32), num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: tf.py_function(decode, [r, 0.2], "
        "tf.float32), num_parallel_calls=tf.data.AUTOTUNE).batch(8).prefetch(tf.data.AUTOTUNE)",
        8, lambda stage: "Map" in stage and "FlatMap" not in stage),
}

# Written after the settling of explain/settle.py (commit 2f71255) was chosen on HELDOUT's run, before any run of
# these: the settling and the own-change rule are read on these, which nothing was chosen on.
HELDOUT2: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "unbatch_rebatch": (
        "records batched by 4, unbatched and batched again by 32 (a leftover of an old reader)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: r * 2.0, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().map(lambda r: r * 2.0, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(4).unbatch().batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: stage == "Unbatch"),
    "zip_slow_labels": (
        "features zipped with labels that now come from a Python generator (0.1 ms a label)",
        "tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(ROWS), tf.data.Dataset.from_tensor_slices(LABELS)))"
        ".repeat().batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.zip((tf.data.Dataset.from_tensor_slices(ROWS), tf.data.Dataset.from_generator(labels, "
        "output_signature=tf.TensorSpec((), tf.int64)))).repeat().batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Generator" in stage or "FlatMap" in stage),
    "jpeg_resize_upsampled": (
        "a parallel JPEG decode whose resize now goes through 224x224 before the 32x32 the model takes",
        "tf.data.Dataset.from_tensor_slices(JPEGS).repeat().map(lambda j: decode_jpeg(j, 32), "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(JPEGS).repeat().map(lambda j: decode_jpeg(j, 224, 32), "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(16).prefetch(tf.data.AUTOTUNE)",
        16, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "csv_decoded_per_line": (
        "CSV lines decoded one by one before .batch(64) instead of per batch after it",
        "tf.data.Dataset.from_tensor_slices(LINES).repeat().batch(64).map(parse_csv, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(LINES).repeat().map(parse_csv, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(64).prefetch(tf.data.AUTOTUNE)",
        64, lambda stage: "Map" in stage and "FlatMap" not in stage),
}

# Written after the settling moved inside the pass (commit 4e20e78), chosen on HELDOUT2's run, before any run of
# these.
HELDOUT3: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "tokenize_in_python": (
        "text lines tokenized and hashed in a Python map per line instead of tf.strings per batch",
        "tf.data.Dataset.from_tensor_slices(TEXT).repeat().batch(32).map(tokens_tf, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(TEXT).repeat().map(tokens_py, num_parallel_calls=tf.data.AUTOTUNE)"
        ".batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "window_flat_map": (
        "batches of 8 built through .window(8).flat_map(...) instead of .batch(8)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().batch(8).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().window(8).flat_map(lambda w: w.batch(8))"
        ".prefetch(tf.data.AUTOTUNE)",
        8, lambda stage: "FlatMap" in stage or "Window" in stage),
    "augment_per_image": (
        "random crops and flips per 32x32 image before .batch(32) instead of per batch after it",
        "tf.data.Dataset.from_tensor_slices(IMAGES).repeat().batch(32).map(augment_images, "
        "num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(IMAGES).repeat().map(augment_image, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "python_source": (
        "records yielded by a plain Python generator over a NumPy array instead of from_tensor_slices",
        "tf.data.Dataset.from_tensor_slices(ROWS).repeat().batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec((64,), tf.float32)).repeat()"
        ".batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "Generator" in stage or "FlatMap" in stage),
}

# Written after c599814, before any run of these, with the judge beside each, by a helper that read only the two
# benchmarks (not the explanation's code, its docs nor its results); sized with --plain only.
HELDOUT4: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    "example_parse_in_python": (
        "serialized tf.train.Example records (a 128x128 JPEG and a label) parsed by a py_function (protobuf in "
        "Python) instead of tf.io.parse_single_example, before the same JPEG decode, in the same parallel map",
        "tf.data.Dataset.from_tensor_slices(EXAMPLES).repeat().map(parse_example, num_parallel_calls=tf.data.AUTOTUNE)"
        ".batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(EXAMPLES).repeat().map(parse_example_py, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "Map" in stage and "FlatMap" not in stage),
    "padded_to_max_length": (
        "variable-length token sequences (8 to 128 tokens of 16 features) padded_batch'ed to a fixed 2048 tokens "
        "instead of to the longest in the batch",
        "tf.data.Dataset.from_tensor_slices(SPANS).repeat().map(sequence, num_parallel_calls=tf.data.AUTOTUNE)"
        ".padded_batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(SPANS).repeat().map(sequence, num_parallel_calls=tf.data.AUTOTUNE)"
        ".padded_batch(32, padded_shapes=(2048, 16)).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "PaddedBatch" in stage),
    "flat_map_unbatch": (
        "blocks of 64 records split back into records by flat_map(Dataset.from_tensor_slices) instead of .unbatch()",
        "tf.data.Dataset.from_tensor_slices(BLOCKS).repeat().unbatch().batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices(BLOCKS).repeat().flat_map(tf.data.Dataset.from_tensor_slices)"
        ".batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: "FlatMap" in stage),
    "one_hot_targets": (
        "next-item targets over a 20,000-item catalogue one-hot encoded record by record in the parallel map "
        "instead of kept as sparse ids (80 KB a record to build and batch)",
        "tf.data.Dataset.from_tensor_slices((ROWS, ITEM_IDS)).repeat().map(with_item_id, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        "tf.data.Dataset.from_tensor_slices((ROWS, ITEM_IDS)).repeat().map(with_one_hot_item, "
        "num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE)",
        32, lambda stage: ("Map" in stage and "FlatMap" not in stage) or stage in ("Batch", "BatchV2")),
}

ALL = {**CASES, **HELDOUT, **HELDOUT2, **HELDOUT3, **HELDOUT4, **HELDOUT5, **HELDOUT6, **HELDOUT7, **HELDOUT8}
# The later sets' own helper code, and their judges on the named stage's whole path (where its own name cannot tell
# the planted stage from an unchanged one).
SET_HELPERS = ((HELDOUT5, HELPERS5), (HELDOUT6, HELPERS6), (HELDOUT7, HELPERS7), (HELDOUT8, HELPERS8))
PATH_JUDGES = {**PATH_JUDGES6, **PATH_JUDGES7, **PATH_JUDGES8}

# Unchanged pipelines through the plugin's own path (``--set aa``): revision B is revision A with a comment added,
# and every verdict is explained as if it were red (``explain_models_against.FORCE_CONFTEST``), its five pairs of
# processes profiled, so that what the explanation blames on unchanged code is counted. The healthy pipelines of
# the held-out sets 3 and 4 (none of them a pipeline any rule was chosen on), each distinct one once.
AA_FROM = ("tokenize_in_python", "window_flat_map", "augment_per_image", "example_parse_in_python",
           "padded_to_max_length", "flat_map_unbatch", "one_hot_targets")
AA: dict[str, tuple[str, str, str, int, Callable[[str], bool]]] = {
    f"aa_{name}": (f"A/A: the healthy pipeline of {name}", ALL[name][1], ALL[name][1], ALL[name][3],
                   lambda stage: False)
    for name in AA_FROM}
ALL.update(AA)

HELPERS = '''

def parse(i):
    busy(0.15)
    return i


def gen():
    for row in ROWS:
        busy(0.05)
        yield row


def augment(r):
    time.sleep(0.15e-3)  # reading a file: the GIL released, so a parallel map overlaps it
    return r


def shard(i):
    def records():
        for row in ROWS[:2000]:
            time.sleep(0.1e-3)  # reading a file: the GIL released, so a parallel interleave overlaps it
            yield row
    return tf.data.Dataset.from_generator(records, output_signature=tf.TensorSpec((64,), tf.float32))


def keep(r):
    busy(0.1)
    return bool(r[0] >= 0.0)


def augment_batch(b, rounds=40):
    for _ in range(rounds):
        b = tf.math.tanh(b * 1.01 + 0.01)
    return b


def decode(r, ms):
    busy(float(ms))
    return r


LABELS = np.arange(20000, dtype=np.int64) % 10
JPEGS = [tf.io.encode_jpeg(tf.cast(tf.random.uniform((64, 64, 3), 0, 255, seed=i), tf.uint8)).numpy()
         for i in range(64)]
LINES = [",".join(f"{v:.4f}" for v in row) for row in ROWS[:2000, :16]]


def labels():
    for label in LABELS:
        busy(0.1)
        yield label


def decode_jpeg(j, size, final=None):
    image = tf.image.resize(tf.io.decode_jpeg(j, channels=3), (size, size))
    return image if final is None else tf.image.resize(image, (final, final))


def parse_csv(line):
    return tf.stack(tf.io.decode_csv(line, [0.0] * 16), axis=-1)


WORDS = np.array(["the", "model", "data", "pipeline", "tensor", "batch", "layer", "step"])
TEXT = [" ".join(WORDS[(np.arange(24) * (i + 3)) % 8]) for i in range(2000)]
IMAGES = np.random.default_rng(2).random((512, 32, 32, 3), dtype=np.float32)


def tokens_tf(lines):
    return tf.strings.to_hash_bucket_fast(tf.strings.split(lines).to_tensor("", shape=(None, 24)), 1000)


def _tokens(line):
    return np.array([hash(w) % 1000 for w in line.numpy().decode().split()][:24], dtype=np.int64)


def tokens_py(line):
    out = tf.py_function(_tokens, [line], tf.int64)
    out.set_shape((24,))
    return out


def augment_images(images):
    images = tf.image.random_crop(tf.image.resize_with_crop_or_pad(images, 36, 36), (tf.shape(images)[0], 32, 32, 3))
    return tf.image.random_flip_left_right(images)


def augment_image(image):
    image = tf.image.random_crop(tf.image.resize_with_crop_or_pad(image, 36, 36), (32, 32, 3))
    return tf.image.random_flip_left_right(image)


def rows():
    yield from ROWS


def _example(jpeg, label):
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))})).SerializeToString()


EXAMPLE_JPEGS = [tf.io.encode_jpeg(tf.cast(tf.random.uniform((128, 128, 3), 0, 255, seed=i), tf.uint8)).numpy()
                 for i in range(32)]
EXAMPLES = [_example(EXAMPLE_JPEGS[i % 32], int(LABELS[i])) for i in range(512)]
EXAMPLE_SPEC = {"image": tf.io.FixedLenFeature((), tf.string), "label": tf.io.FixedLenFeature((), tf.int64)}


def decode_example_image(jpeg):
    return tf.image.resize(tf.io.decode_jpeg(jpeg, channels=3), (64, 64)) / 255.0


def parse_example(record):
    parsed = tf.io.parse_single_example(record, EXAMPLE_SPEC)
    return decode_example_image(parsed["image"]), parsed["label"]


def _parse_py(record):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    return feature["image"].bytes_list.value[0], np.int64(feature["label"].int64_list.value[0])


def parse_example_py(record):
    jpeg, label = tf.py_function(_parse_py, [record], (tf.string, tf.int64))
    jpeg.set_shape(())
    label.set_shape(())
    return decode_example_image(jpeg), label


_LENGTHS = np.random.default_rng(4).integers(8, 129, 2000)
SPANS = (np.cumsum(_LENGTHS) - _LENGTHS, _LENGTHS)
TOKENS = tf.constant(np.random.default_rng(5).random((int(_LENGTHS.sum()), 16), dtype=np.float32))


def sequence(start, length):
    return TOKENS[start:start + length]

BLOCKS = ROWS[:19968].reshape(312, 64, 64)
ITEM_IDS = np.random.default_rng(6).integers(0, 20000, 20000)


def with_item_id(r, item):
    return r * 2.0, item


def with_one_hot_item(r, item):
    return r * 2.0, tf.one_hot(item, 20000)
'''

TEST = '''
from pipeline import build, ITEMS


def test_pipeline(tfperf):
    tfperf.iterate(build(), items=ITEMS)
'''


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@example", *args], cwd=repo, check=True,
                   capture_output=True)


def pipeline_module(expression: str, items: int, extra: str = "") -> str:
    return f"{COMMON}{HELPERS}{extra}\nITEMS = {items}\n\n\ndef build():\n    return {expression}\n"


def make_repo(repo: Path, case: str) -> None:
    _, healthy, regressed, items, _ = ALL[case]
    extra = "".join(helpers for cases, helpers in SET_HELPERS if case in cases)  # a set's own, in its cases only
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "test_pipeline.py").write_text(TEST)
    (repo / "pipeline.py").write_text(pipeline_module(healthy, items, extra))
    (repo / "pytest.ini").write_text("[pytest]\nfilterwarnings = ignore\n")
    (repo / ".gitignore").write_text(".tfperf/\n*.json\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "A: healthy")
    (repo / "pipeline.py").write_text(pipeline_module(regressed, items, extra)
                                      + ("\n# revision B\n" if case in AA else ""))
    git(repo, "commit", "-qam", f"B: {case}")


def named_first(data: Mapping[str, Any] | None) -> str | None:
    """The key of what the report's headline leads with (``reports.explain_headline``'s order, steps 1, 3, 4)."""
    item = named_first_item(data)
    return None if item is None else str(item.get("key") or item.get("label"))


def named_first_item(data: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """What the report's headline leads with, as the JSON holds it (key, kind, label...)."""
    if not isinstance(data, Mapping):
        return None
    causes = [c for c in data.get("causes") or [] if isinstance(c, Mapping)]
    paced = data.get("paced_by")
    if causes and causes[0].get("kind") == "input wait" and isinstance(paced, Mapping):
        return paced
    if causes:
        return causes[0]
    pipeline = [c for c in data.get("pipeline") or [] if isinstance(c, Mapping)]
    return pipeline[0] if pipeline else None


# An op of a tf.data function is labelled with the stage whose function ran it (since e447314)
_FUNCTION_STAGE = re.compile(r"in the function of tf\.data stage (\S+)$|of it in stage (\S+)'s$")


def named_stage_path(item: Mapping[str, Any] | None) -> str:
    """The path of the stage the headline names: a stage's own, or the one whose function ran the op it names."""
    if item is None:
        return ""
    key, label = str(item.get("key") or ""), str(item.get("label") or "")
    if key.startswith("stage:"):
        return key[len("stage:"):]
    found = _FUNCTION_STAGE.search(label) if item.get("kind") == "tf.data work" else None
    return (found.group(1) or found.group(2)) if found else ""


def planted_named(case: str, path: str) -> bool:
    """The case's judge on the named stage: on its whole path where the case judges paths (PATH_JUDGES6..8), else on
    its own name (the last element of the path)."""
    if not path:
        return False
    if case in PATH_JUDGES:
        return bool(PATH_JUDGES[case](path))
    return bool(ALL[case][4](path.split("/")[-1]))


def stage_name(key: str | None) -> str:
    """A stage's own name: the last element of its path (``stage:Prefetch/MapAndBatch`` -> ``MapAndBatch``)."""
    if not key or not key.startswith("stage:"):
        return ""
    return key.split("/")[-1]


def said_nothing_moved(lines: list[str]) -> bool:
    """The explanation said no op or stage moved beyond its noise (``Attribution.nothing_moved``'s wording)."""
    return any("no op or stage moved beyond its noise" in line for line in lines)


def find_explanation(doc: Any) -> Mapping[str, Any] | None:
    if isinstance(doc, Mapping):
        if isinstance(doc.get("explanation"), Mapping):
            return doc["explanation"]
        for value in doc.values():
            found = find_explanation(value)
            if found is not None:
                return found
    elif isinstance(doc, list):
        for value in doc:
            found = find_explanation(value)
            if found is not None:
                return found
    return None


def session(repo: Path, case: str, index: int, keep: Path | None = None) -> dict[str, Any]:
    out = repo / f"results-{index}.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf", "--tfperf-against=HEAD~1",
               "--tfperf-json", str(out), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    if keep is not None or case in AA:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from explain_models_against import FORCE_CONFTEST, KEEP_CONFTEST

        (repo / "conftest.py").write_text((KEEP_CONFTEST if keep is not None else "")
                                          + (FORCE_CONFTEST if case in AA else ""))
        if keep is not None:
            env["TFPERF_KEEP_PROFILES"] = str(keep / case / str(index))
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - started
    doc = json.loads(out.read_text()) if out.exists() else None
    data = find_explanation(doc)
    first = named_first(data)
    verdict = next((line.strip() for line in proc.stdout.splitlines() if "throughput" in line and "%" in line), "")
    lines = list(data.get("lines") or []) if isinstance(data, Mapping) else []
    return {"case": case, "session": index, "returncode": proc.returncode, "wall_s": round(wall, 1),
            "load": round(os.getloadavg()[0], 2), "verdict": verdict, "red": proc.returncode == 1,
            "explained": isinstance(data, Mapping) and "causes" in data, "named_first": first,
            "stage": stage_name(first), "planted_first": bool(ALL[case][4](stage_name(first))),
            "named_stage": named_stage_path(named_first_item(data)),
            "planted_named_first": planted_named(case, named_stage_path(named_first_item(data))),
            "nothing_moved": said_nothing_moved(lines),
            "blamed": blamed(data),
            "lines": lines, "tail": "" if lines else (proc.stdout + proc.stderr)[-3000:]}


def blamed(data: Mapping[str, Any] | None) -> list[str]:
    """What an explanation put beyond its noise: its causes, then the pipeline's stages and functions."""
    if not isinstance(data, Mapping):
        return []
    return [str(c.get("key") or c.get("label")) for part in ("causes", "pipeline")
            for c in data.get(part) or [] if isinstance(c, Mapping)]


def plain(cases: list[str], out: Path, turns: int = 4, pulls: int = 3000, warm: int = 500) -> list[str]:
    """Each case's two pipelines pulled in one process, taking turns; microseconds per pull, per turn."""
    namespace: dict[str, Any] = {}
    # a set's helpers build tables and data, or write shard files: only for a set asked for
    extra = "".join(helpers for set_cases, helpers in SET_HELPERS if set(cases) & set(set_cases))
    exec(COMMON + HELPERS + extra, namespace)  # noqa: S102 - this file's own pipeline helpers
    rows: dict[str, dict[str, list[float]]] = {}
    for case in cases:
        _, healthy, regressed, _, _ = ALL[case]
        iterators = {side: iter(eval(expr, namespace))  # noqa: S307 - this file's own expressions
                     for side, expr in (("healthy", healthy), ("regressed", regressed))}
        for it in iterators.values():
            for _ in range(warm):
                next(it)
        rows[case] = {side: [] for side in iterators}
        for _ in range(turns):
            for side, it in iterators.items():
                started = time.perf_counter()
                for _ in range(pulls):
                    next(it)
                rows[case][side].append((time.perf_counter() - started) / pulls * 1e6)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    Path(str(out) + ".json").write_text(json.dumps({"measured_at": when, "us_per_pull": rows,
                                                    "load_average_1min": round(os.getloadavg()[0], 2)}, indent=1))
    md = [f"# The pipelines alone, in one process, taking turns ({when}, load {os.getloadavg()[0]:.1f})", "",
          f"`.venv/bin/python benchmarks/explain_pipelines_against.py --plain {' '.join(cases)}`", "",
          "| case | healthy µs/pull (per turn) | regressed µs/pull (per turn) | regressed/healthy per turn |",
          "|---|---|---|---|"]
    for case, r in rows.items():
        ratios = ", ".join(f"{b / a:.2f}" for a, b in zip(r["healthy"], r["regressed"]))
        md.append(f"| {case} | {', '.join(f'{v:.0f}' for v in r['healthy'])} | "
                  f"{', '.join(f'{v:.0f}' for v in r['regressed'])} | {ratios} |")
    Path(str(out) + ".md").write_text("\n".join(md) + "\n")
    return md


def _emit(report: dict[str, Any], out: Path, title: str, summary: str, columns: list[str],
          cells: Callable[[dict[str, Any]], list[str]]) -> list[str]:
    """The JSON and the Markdown table of a run: a row per session, its verdict first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(str(out) + ".json").write_text(json.dumps(report, indent=1) + "\n")
    md = [f"# {title} (commit {report['commit']})", "",
          f"`{report['command']}`, {report['started']} to {report['finished']}, {report['cores']} CPUs", "",
          f"- {summary}", "", "| case | session | verdict | " + " | ".join(columns) + " |",
          "|---|---|---|" + "---|" * len(columns)]
    for r in report["runs"]:
        verdict = re.sub(r"\s+", " ", r["verdict"])[:80].replace("|", "/")
        md.append(f"| {r['case']} | {r['session']} | {verdict or ('rc ' + str(r['returncode']))} | "
                  + " | ".join(cells(r)) + " |")
    Path(str(out) + ".md").write_text("\n".join(md) + "\n")
    return md


def write(report: dict[str, Any], out: Path) -> list[str]:
    """The JSON and the Markdown table of a run (its summary computed from its runs). An A/A run counts how many
    explanations (each verdict explained as if red) blamed anything on unchanged code."""
    runs = report["runs"]
    if runs and all(r["case"] in AA for r in runs):
        explained = [r for r in runs if r["explained"]]
        s = report["summary"] = {"sessions": len(runs), "red": sum(r["red"] for r in runs),
                                 "explained": len(explained), "blamed": sum(bool(r["blamed"]) for r in explained)}
        return _emit(report, out, "Unchanged default-option pipelines explained under --tfperf-against",
                     f"explanations (every verdict explained as if red): {s['explained']} of {s['sessions']} "
                     f"sessions; anything blamed on the unchanged code: {s['blamed']} of {s['explained']}; red "
                     f"verdicts (false alarms of the gate): {s['red']}", ["blamed", "load"],
                     lambda r: [", ".join(f"`{b}`" for b in r["blamed"]) or "-", str(r["load"])])
    red = [r for r in runs if r["red"]]
    s = report["summary"] = {"sessions": len(runs), "red": len(red), "explained": sum(r["explained"] for r in red),
                             "planted_first": sum(r["planted_first"] for r in red),
                             "planted_named_first": sum(r.get("planted_named_first", False) for r in red),
                             "nothing_moved": sum(r["nothing_moved"] for r in red)}
    return _emit(report, out, "Default-option pipelines explained under --tfperf-against",
                 f"red verdicts: {s['red']} of {s['sessions']} sessions; explained {s['explained']}; the planted "
                 f"stage first {s['planted_first']} of {s['red']} by the headline's key, "
                 f"{s['planted_named_first']} of {s['red']} by the stage it names (its own, or the one whose "
                 f"function ran the op it names); \"nothing moved\" {s['nothing_moved']}",
                 ["named first", "its stage", "planted first (key)", "planted first (stage named)", "load"],
                 lambda r: [f"`{r['named_first']}`", f"`{r.get('named_stage', '')}`", str(r["planted_first"]),
                            str(r.get("planted_named_first", "")), str(r["load"])])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--set", choices=("dev", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6",
                                          "heldout7", "heldout8", "aa"),
                        default="dev",
                        help="dev: the four cases the own-change rule was chosen on; heldout: four written after it "
                             "(the settling chosen on their run); heldout2: four written after the settling (its "
                             "move inside the pass chosen on their run); heldout3: four written after that; "
                             "heldout4: four written after c599814, before any run of them; "
                             "heldout5: six written after "
                             "d5890e3 by a writer who read none of the rules, before any run of them "
                             "(benchmarks/explain_pipelines_heldout5_cases.py); heldout6: six written after "
                             "7236bc9 likewise (benchmarks/explain_pipelines_heldout6_cases.py); heldout7: six written beside "
                             "7794b36 likewise, four of them a stage inserted beside one of its kind "
                             "(benchmarks/explain_pipelines_heldout7_cases.py); heldout8: four written after 0bc035d likewise "
                             "(benchmarks/explain_pipelines_heldout8_cases.py); aa: the healthy "
                             "pipelines of heldout3 and heldout4 on both sides, every verdict explained as if red")
    parser.add_argument("--cases", nargs="*", help="these cases only (default: the set's)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "explain_pipelines_against")
    parser.add_argument("--keep-profiles", type=Path, metavar="DIR",
                        help="keep each explanation's compact profiles (every pair's) under DIR/<case>/<session>/ "
                             "(an absolute path)")
    parser.add_argument("--summarise", type=Path, metavar="JSON",
                        help="only write the Markdown again from a results file (flags read again from its lines)")
    parser.add_argument("--plain", nargs="+", metavar="CASE", choices=list(ALL),
                        help="only time these cases' two pipelines in one process, taking turns, without the plugin")
    args = parser.parse_args()
    if args.plain:
        print("\n".join(plain(args.plain, Path(str(args.out) + "_plain"))))
        return 0
    if args.summarise:
        report = json.loads(args.summarise.read_text())
        for r in report["runs"]:
            r["nothing_moved"] = said_nothing_moved(r["lines"])
        write(report, Path(str(args.summarise).removesuffix(".json")))
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tfperf-pipe-against-") as tmp:
        sets = {"dev": CASES, "heldout": HELDOUT, "heldout2": HELDOUT2, "heldout3": HELDOUT3, "heldout4": HELDOUT4,
                "heldout5": HELDOUT5, "heldout6": HELDOUT6, "heldout7": HELDOUT7, "heldout8": HELDOUT8, "aa": AA}
        for case in args.cases or list(sets[args.set]):
            repo = Path(tmp) / case
            make_repo(repo, case)
            for i in range(args.sessions):
                r = session(repo, case, i, args.keep_profiles)
                runs.append(r)
                print(f"{case} {i}: rc {r['returncode']} {r['verdict'][:90]!r} first {r['named_first']!r} "
                      f"planted {r['planted_first']} {r['wall_s']} s load {r['load']}", flush=True)
    finished = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = {"commit": commit, "started": started, "finished": finished, "cores": os.cpu_count(),
              "command": "PYTHONPATH=$PWD .venv/bin/python benchmarks/explain_pipelines_against.py "
                         f"--sessions {args.sessions} --set {args.set}"
                         + (f" --keep-profiles {args.keep_profiles}" if args.keep_profiles else ""), "runs": runs}
    print("\n".join(write(report, args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
