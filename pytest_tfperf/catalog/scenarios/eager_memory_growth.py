"""7. Eager memory growth: keeping every iteration's intermediate results alive.

The mistake: in eager mode a tensor lives as long as something refers to it.
Appending each step's output to a list "for later", or creating a new
``tf.Variable`` every step and keeping it, holds one more tensor per
iteration: memory grows steadily until the process is killed or the machine
swaps. The fix keeps only what it needs (here, a running summary updated in
place) and lets the rest go.

The metric is the slope of memory in use over iterations (TensorFlow's
allocator, after every call), not the speed: the fix does a little more work
per step (the summary) and is not faster.
"""

from __future__ import annotations

from pytest_tfperf.catalog.growth import GrowthLedger
from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, compute_device, pick

KEY = "eager_memory_growth"
TITLE = "Intermediate results kept alive across iterations vs released"
METRIC = Metric.GROWTH
# Every measured iteration of the mistakes keeps its output for good: a short
# budget still gives each variant tens of iterations per round for the slope,
# and keeps the memory it piles up (and the process's RSS) small.
TFPERF_MARKER = {"budget_s": 0.5}
# Margins are fractions of one iteration's output, so they hold at every size.
COMPARISONS = (
    Comparison("anti", "fix", min_effect=0.9, measured_here="1.00 vs 0.00 in every run: exact, allocator bytes"),
    Comparison("anti_variables", "fix", min_effect=0.9,
               measured_here="1.00 vs 0.00 in every run: exact, allocator bytes"),
)


def build(size: CatalogSize) -> Scenario:
    import tensorflow as tf

    # The output is 256 KiB at least: smaller tensors are invisible to the
    # default CPU allocator's statistics. The inner dimension sets the work per
    # step, and so how many iterations (and how much retained memory) a
    # measurement of a few seconds accumulates.
    side = pick(size, small=256, default=256, large=2048)
    inner = pick(size, small=1024, default=8192, large=16384)
    device = compute_device()
    memory_device = device.lstrip("/")
    with tf.device(device):
        x = tf.random.stateless_normal([side, inner], seed=[4, 0])
        w = tf.random.stateless_normal([inner, side], seed=[4, 1]) / inner
        summary = tf.Variable(0.0)
    kept_outputs: list[object] = []
    kept_variables: list[object] = []

    def step() -> object:
        return tf.tanh(tf.matmul(x, w))

    def keep_every_output() -> None:
        with tf.device(device):
            kept_outputs.append(step())

    def new_variable_every_iteration() -> None:
        with tf.device(device):
            kept_variables.append(tf.Variable(step()))

    def keep_a_summary() -> None:
        with tf.device(device):
            summary.assign_add(tf.reduce_sum(step()))

    def bytes_in_use() -> int:
        return int(tf.config.experimental.get_memory_info(memory_device)["current"])

    ledger = GrowthLedger(bytes_in_use)
    output_bytes = side * side * 4
    variants = []
    for name, fn, summary_text in (
        ("anti", keep_every_output, "every step's output appended to a Python list"),
        ("anti_variables", new_variable_every_iteration, "a new tf.Variable holding each step's output, kept"),
        ("fix", keep_a_summary, "only a running sum kept, updated in place"),
    ):
        variants.append(Variant(name, ledger.wrap(name, fn), summary_text,
                                observe=_share_of_output(ledger, name, output_bytes)))

    def release() -> None:
        kept_outputs.clear()
        kept_variables.clear()

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=1,
        variants=tuple(variants),
        comparisons=COMPARISONS,
        sizes=(("output bytes per iteration", output_bytes),),
        close=release,
    )


def _share_of_output(ledger: GrowthLedger, name: str, output_bytes: int):  # noqa: ANN202
    """Growth per iteration as a fraction of one iteration's output (1.0: everything kept)."""

    def observe() -> float | None:
        slope = ledger.slope_bytes_per_iteration(name)
        return None if slope is None else slope / output_bytes

    return observe
