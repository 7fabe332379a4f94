"""10. Thread configuration: TensorFlow starved of its op thread pools.

The mistake: ``tf.config.threading.set_intra_op_parallelism_threads(1)`` and
``set_inter_op_parallelism_threads(1)``, copied from a snippet meant for
deterministic debugging or for sharing a machine, left in a training job. One
intra-op thread means every matmul and convolution runs on one core however
many the machine has. The fix leaves both at 0, TensorFlow's default: as many
threads as cores.

Both settings only take effect before TensorFlow starts, so each variant runs
in its own worker process, configured at launch, and the measuring process
drives it one iteration at a time (see ``catalog.worker``). The workload is a
chain of CPU matmuls: thread pools govern CPU ops, on a GPU machine too.
"""

from __future__ import annotations

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick
from pytest_tfperf.catalog.worker import ConfiguredProcess, start_all

KEY = "thread_starvation"
TITLE = "Inter- and intra-op parallelism starved (1 thread) vs TensorFlow's default"
METRIC = Metric.THROUGHPUT
COMPARISONS = (
    # Margin set by the margins' rule (catalog.effects.margin_from_ratios) from 7 fresh main-job processes
    # on the loaded 2-core VM: benchmarks/results/catalog_margins.json, from
    # `python benchmarks/catalog_margins.py collect` and `... summarise`. In none of them could the machine give the
    # fix its cores (it got 0.17-0.62, none idle), so no run would have been judged and the rule has no
    # distribution: the margin is its floor, 1.1x. 1.3x, set by hand, went red once at 1.24x.
    Comparison("anti", "fix", min_effect=1.1,
               measured_here="1.79-1.88x in 3 runs on the quiet 2-core machine; 1.42-1.99x in 5 "
                             "busier ones, once 1.24x; 0.96-1.03x in 3 runs where other processes used 0.9-1.3 "
                             "of the 2 cores (not judged)"),
)
# The effect is the fix using the cores the anti-pattern leaves idle: with other
# processes busy on them, there is nothing to show (the test then says so). The
# number is the cores the fix's calls must get for its gain to show (about 2 on
# the quiet 2-core machine, where the fix runs 1.8x the anti-pattern's speed):
# below it, with no core idle to take, a miss is reported, not failed.
NEEDS_IDLE_CORES = 1.5


def build(size: CatalogSize) -> Scenario:
    side = pick(size, small=256, default=1024, large=2048)
    starved = ConfiguredProcess("anti", workload="cpu_matmul", size=side, inter_op_threads=1, intra_op_threads=1)
    default = ConfiguredProcess("fix", workload="cpu_matmul", size=side)
    start_all([starved, default])

    def close() -> None:
        starved.close()
        default.close()

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=1,
        variants=(
            Variant("anti", starved.run, "inter_op=1, intra_op=1, set before TensorFlow starts"),
            Variant("fix", default.run, "inter_op=0, intra_op=0: TensorFlow's default, one thread per core"),
        ),
        comparisons=COMPARISONS,
        sizes=(("matrix side", side),),
        close=close,
        core_use=lambda: {"anti": starved.usage(), "fix": default.usage()},
    )
