"""11. GPU memory configuration: TensorFlow's default grab of all GPU memory vs memory growth or a cap.

The mistake: leaving TensorFlow's default on a shared GPU. At start-up it maps
nearly all of the device's memory, whatever the model needs, so a second
process on the same GPU (another job, a data loader, an evaluation run) fails
with an out-of-memory error, and monitoring shows a full GPU that explains
nothing. The fixes: ``tf.config.experimental.set_memory_growth(gpu, True)``
makes TensorFlow take memory as it needs it, and
``tf.config.set_logical_device_configuration(gpu, [LogicalDeviceConfiguration(memory_limit=...)])``
caps it. Both must be set before TensorFlow touches the GPU, so each variant
runs in its own worker process.

The metric is the device memory each process holds after the same small
workload (NVML, per process): the default holds most of the GPU, memory
growth and the cap hold what the work needs. GPU only: on a CPU the scenario
is skipped, since these settings do not exist there.
"""

from __future__ import annotations

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick
from pytest_tfperf.catalog.worker import ConfiguredProcess

KEY = "gpu_memory_config"
TITLE = "GPU memory: TensorFlow's default (map nearly all) vs memory growth or a memory cap"
METRIC = Metric.DEVICE_RESERVED
NEEDS_GPU = "GPU memory growth and memory caps only exist on a GPU; this machine has none"
# Not yet measured on a GPU: the default maps nearly all of it, the fixes a few hundred MiB.
COMPARISONS = (
    Comparison("anti", "fix", min_effect=4.0, measured_here="not measured yet: no GPU on the reference machine"),
    Comparison("anti", "fix_cap", min_effect=4.0, measured_here="not measured yet: no GPU on the reference machine"),
)
CAP_MB = 2048


def build(size: CatalogSize) -> Scenario:
    side = pick(size, small=1024, default=2048, large=4096)
    # One after the other: a process on TensorFlow's default would leave the
    # others no memory to start with, which is the very problem shown here.
    processes: list[ConfiguredProcess] = []
    held: dict[str, float | None] = {}

    def measured(name: str, **settings: object) -> ConfiguredProcess:
        process = ConfiguredProcess(name, workload="gpu_matmul", size=side, **settings)  # type: ignore[arg-type]
        processes.append(process)
        process.wait_ready()
        process.run()
        memory = process.memory()
        held[name] = memory.get("nvml_process_used_bytes")
        return process

    try:
        growth = measured("fix", gpu_memory_growth=True)
        capped = measured("fix_cap", gpu_memory_limit_mb=CAP_MB)
        default = measured("anti", gpu_memory_growth=None)
    except BaseException:
        for process in processes:
            process.close()
        raise

    def close() -> None:
        for process in processes:
            process.close()

    def holding(name: str):  # noqa: ANN202
        return lambda: held[name]

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=1,
        variants=(
            Variant("anti", default.run, "TensorFlow's default: nearly all GPU memory mapped at start",
                    observe=holding("anti")),
            Variant("fix", growth.run, "set_memory_growth(gpu, True): memory taken as needed",
                    observe=holding("fix")),
            Variant("fix_cap", capped.run, f"memory_limit={CAP_MB} MB: a hard cap", observe=holding("fix_cap")),
        ),
        comparisons=COMPARISONS,
        sizes=(("matrix side", side), ("cap MB", CAP_MB)),
        close=close,
    )
