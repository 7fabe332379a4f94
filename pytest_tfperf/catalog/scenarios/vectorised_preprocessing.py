"""4. Preprocessing one element at a time instead of one batch at a time.

The mistake: ``dataset.map(normalise).batch(n)`` calls the preprocessing
function once per element. Each call carries a fixed scheduling cost (the
tf.data guide puts it around 10 microseconds) that dwarfs cheap per-element
work; a Python loop over the elements of a batch is the same mistake, only
slower. The fix is the guide's vectorised map: ``batch(n)`` first, then
``map(normalise)`` once per batch, with the same function, since its ops
broadcast over the batch dimension.

Both variants use TensorFlow's default tf.data optimisations (the per-element
map is even parallelised for free); vectorising still wins by a wide margin.
"""

from __future__ import annotations

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick

KEY = "vectorised_preprocessing"
TITLE = "Per-element map vs vectorised map (batch, then map)"
METRIC = Metric.THROUGHPUT
COMPARISONS = (
    # Margin set by the margins' rule (catalog.effects.margin_from_ratios) from 7 fresh main-job processes
    # on the loaded 2-core VM: benchmarks/results/catalog_margins.json, from
    # `python benchmarks/catalog_margins.py collect` and `... summarise`. 12.4-21.3x there; the bound is 4.84x.
    Comparison("anti", "fix", min_effect=4.8,
               measured_here="20.1-25.3x in 3 runs on the quiet 2-core machine (rounds 19-29x); "
                             "19.7-25.8x in 8 runs with other processes using about 1 core; 12.4-21.3x in 7 fresh "
                             "main-job processes with other processes using 1.1-1.5 cores"),
)


def build(size: CatalogSize) -> Scenario:
    import numpy as np
    import tensorflow as tf

    batch = pick(size, small=64, default=256, large=1024)
    features = 64
    table = np.random.default_rng(1).standard_normal((batch * 16, features), dtype=np.float32)
    mean = tf.constant(table.mean(axis=0))
    std = tf.constant(table.std(axis=0))

    def normalise(x: tf.Tensor) -> tf.Tensor:
        # The same function serves one row or a whole batch: every op broadcasts.
        z = (x - mean) / std
        return tf.clip_by_value(z, -3.0, 3.0) * tf.math.log1p(tf.abs(z))

    rows = tf.data.Dataset.from_tensor_slices(table).repeat()
    per_element = iter(rows.map(normalise).batch(batch))
    vectorised = iter(rows.batch(batch).map(normalise))

    def next_batch_of(batches):  # noqa: ANN001, ANN202 - a closure over an iterator
        def pull() -> object:
            return next(batches).numpy()

        return pull

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=batch,
        variants=(
            Variant("anti", next_batch_of(per_element), "map(normalise) per element, then batch(n)"),
            Variant("fix", next_batch_of(vectorised), "batch(n), then map(normalise) once per batch"),
        ),
        comparisons=COMPARISONS,
        sizes=(("rows per batch", batch), ("features", features)),
    )
