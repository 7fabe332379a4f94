"""1. A large tensor allocated inside the loop.

The mistake: every iteration calls ``tf.random.normal`` for a tensor that does
not change, so each step pays for allocating and filling tens of MiB before it
does the work it is there for (here, a reduction). To the person watching, the
loop looks slow or "stalls" under memory pressure. The fix creates the tensor
once, before the loop, and every iteration reuses it.

The anti-pattern also holds several full-size buffers at once:
``random.normal`` makes three (normal sample, scaled, shifted) while the
previous iteration's tensor is still alive, 4x the tensor at its peak.
"""

from __future__ import annotations

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, compute_device, pick

KEY = "allocation_in_loop"
TITLE = "Large tensor allocated inside the loop vs once outside it"
METRIC = Metric.THROUGHPUT
COMPARISONS = (
    # Margin set by the margins' rule (catalog.effects.margin_from_ratios) from 7 fresh main-job processes
    # on the loaded 2-core VM: benchmarks/results/catalog_margins.json, from
    # `python benchmarks/catalog_margins.py collect` and `... summarise`. 97-409x there, median 336x; the
    # 99.95% prediction bound for one new process is 11.1x (one run's 97x widens it).
    Comparison("anti", "fix", min_effect=11.0,
               measured_here="118-141x in 3 runs on the quiet 2-core machine (rounds 109-142x); "
                             "131-214x in 9 runs with other processes using about 1 core; 97-409x in 7 fresh "
                             "main-job processes with other processes using 1.4-1.5 cores"),
)


def build(size: CatalogSize) -> Scenario:
    import tensorflow as tf

    elements = pick(size, small=1 << 18, default=1 << 22, large=1 << 26)
    device = compute_device()

    def allocate_every_iteration() -> float:
        with tf.device(device):
            x = tf.random.normal([elements])
            return float(tf.reduce_sum(x))

    with tf.device(device):
        x_once = tf.random.normal([elements])

    def allocate_once() -> float:
        with tf.device(device):
            return float(tf.reduce_sum(x_once))

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=1,
        variants=(
            Variant("anti", allocate_every_iteration, "tf.random.normal of the whole tensor in every iteration"),
            Variant("fix", allocate_once, "the tensor created once, before the loop"),
        ),
        comparisons=COMPARISONS,
        sizes=(("float32 elements", elements),),
    )
