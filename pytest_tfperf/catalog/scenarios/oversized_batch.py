"""6. An oversized batch, and gradient accumulation as the fix.

The mistake: choosing the batch size without regard to memory. Activations
and their gradients grow linearly with the batch, so a batch too large for the
device fails with an out-of-memory error, or, on a host, pushes the machine
into swap until it freezes. The fix reaches the same effective batch by
accumulating gradients over several micro-batches and applying them once:
the same update, at a fraction of the peak memory, for some speed.

Three helpers make the mistake measurable (``batch_budget``): the peak of one
step against the batch size (a straight line), a memory budget that fails a
step with its batch size, peak, budget and device instead of crashing the
session, and a search for the largest batch that fits a budget.

The peak compared is the transient one: what a step allocates above the
memory already in use when it starts (the weights, the input batch, and the
fix's gradient accumulators, which are state like the weights).
"""

from __future__ import annotations

from pytest_tfperf.catalog.batch_budget import MemoryBudgetExceeded
from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick
# The model lives below both this scenario and the worker that runs its GPU step (catalog.trainer).
from pytest_tfperf.catalog.trainer import Sizes, Trainer

KEY = "oversized_batch"
TITLE = "One oversized batch vs gradient accumulation over micro-batches"
METRIC = Metric.TF_PEAK
COMPARISONS = (
    # Margin set by the margins' rule (catalog.effects.margin_from_ratios) from 7 fresh main-job processes
    # on the loaded 2-core VM: benchmarks/results/catalog_margins.json, from
    # `python benchmarks/catalog_margins.py collect` and `... summarise`. 3.06-3.68x there; the bound (2.06x) is
    # above the 2x this scenario stands for, so the margin stays 2x.
    Comparison("anti", "fix", min_effect=2.0,
               measured_here="3.2-3.7x in 3 runs on the quiet 2-core machine, 2.8-3.7x in 8 busy "
                             "ones (default size: about 60-88 vs 19-23 MiB); 4.3x at the small size; 3.06-3.68x "
                             "in 7 fresh main-job processes"),
)

def sizes_for(size: CatalogSize) -> Sizes:
    return pick(size,
                small=Sizes(effective_batch=4096, micro_batches=16, hidden=512),
                default=Sizes(effective_batch=4096, micro_batches=8, hidden=1024),
                large=Sizes(effective_batch=32768, micro_batches=8, hidden=4096))


def build(size: CatalogSize) -> Scenario:
    sizes = sizes_for(size)
    big, small = Trainer(sizes, seed=0), Trainer(sizes, seed=0)
    x, y = big.data(sizes.effective_batch)
    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=sizes.effective_batch,
        variants=(
            Variant("anti", big.one_big_step(x, y), f"one step on a batch of {sizes.effective_batch}"),
            Variant("fix", small.accumulated_step(x, y),
                    f"gradients of {sizes.micro_batches} micro-batches of {sizes.micro_batch} summed, applied once"),
        ),
        comparisons=COMPARISONS,
        functions=(big.train_step, small.accumulate, small.apply_accumulated),
        sizes=(("effective batch", sizes.effective_batch), ("micro-batches", sizes.micro_batches),
               ("hidden units", sizes.hidden)),
    )


def step_under_gpu_cap(batch_size: int, cap_mb: int) -> None:
    """One training step at ``batch_size`` in a process whose GPU memory is capped at ``cap_mb``.

    The cap must be set before TensorFlow touches the GPU, hence the worker
    process. A real ``ResourceExhaustedError`` there becomes the same clear
    ``MemoryBudgetExceeded`` as the CPU budget raises.
    """
    from pytest_tfperf.catalog.worker import ConfiguredProcess, OutOfDeviceMemory

    process = ConfiguredProcess("capped", workload="gpu_train_step", size=batch_size, gpu_memory_limit_mb=cap_mb)
    try:
        process.wait_ready()
        process.run()
    except OutOfDeviceMemory as exc:
        raise MemoryBudgetExceeded(batch_size=batch_size, peak_bytes=None, budget_bytes=cap_mb * 2**20,
                                   device="GPU:0", cause=str(exc)) from exc
    finally:
        process.close()
