"""What a catalog scenario is: an anti-pattern, its fix, and the margin between them.

Plain data and no TensorFlow: the scenario modules build the workloads (with
TensorFlow imported inside their ``build`` functions) and describe them with
these classes; ``effects`` judges the measurements against the margins.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_tfperf.catalog.machine_load import CoreUse


class Metric(str, enum.Enum):
    """The quantity an article is about, and so the one a scenario gates on."""

    THROUGHPUT = "throughput"  # items/s; effect = fix / anti, best round of each
    TF_PEAK = "tf_allocator_peak"  # bytes above what was in use at the start; effect = anti / fix
    GROWTH = "memory_growth"  # share of one iteration's output kept, per iteration; effect = anti - fix
    TRACES = "traces"  # tf.function traces per steady-state iteration; effect = anti - fix
    FIRST_NON_FINITE = "first_non_finite_iteration"  # effect = the anti's loss goes NaN/Inf, the fix's never
    DEVICE_RESERVED = "device_memory_reserved"  # bytes the process holds on the GPU; effect = anti / fix


@dataclass(frozen=True, slots=True)
class Comparison:
    """One anti-pattern variant against one fix variant.

    ``min_effect`` is the gate; for a timing or peak-memory effect it is set by
    the margins' rule (``effects.margin_from_ratios``) from the effect's
    distribution over many fresh processes of the main job on the reference
    machine (2-core CPU; ``benchmarks/results/catalog_margins.json``), and
    ``measured_here`` says what that distribution was. An ungated comparison is only
    reported: TensorFlow's automatic optimisations, for instance, fix some
    mistakes some of the time, and saying how much is the honest answer.
    """

    anti: str
    fix: str
    min_effect: float
    measured_here: str
    gated: bool = True
    # The gate on a GPU, once measured there; until then a timing or peak-memory
    # gate relaxes to "the fix is at least not worse" (see Scenario.on_gpu).
    min_effect_gpu: float | None = None


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of doing the work: ``run()`` performs one iteration.

    ``observe`` gives the scenario's own reading of its metric after the
    measurement (a growth slope, an iteration where the loss went NaN), for
    metrics the timing harness does not collect by itself.
    """

    name: str
    run: Callable[[], object]
    summary: str
    observe: Callable[[], float | None] | None = None


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Scenario:
    """An anti-pattern and its fix, built and ready to measure."""

    key: str
    title: str
    metric: Metric
    items_per_iteration: float
    variants: tuple[Variant, ...]
    comparisons: tuple[Comparison, ...]
    # tf.function objects the variants call, so that their traces are counted.
    functions: tuple[object, ...] = ()
    sizes: tuple[tuple[str, float], ...] = ()  # what "small" or "default" meant here, for the report
    close: Callable[[], None] = field(default=_nothing)
    # Per variant, the cores its calls got (machine_load.CoreUse), for the scenarios whose gain is using
    # idle cores: read after the measurement, before close().
    core_use: Callable[[], Mapping[str, CoreUse]] | None = None

    def __post_init__(self) -> None:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"scenario {self.key}: variant names repeat: {names}")
        for c in self.comparisons:
            for name in (c.anti, c.fix):
                if name not in names:
                    raise ValueError(f"scenario {self.key}: comparison names unknown variant {name!r}; known: {names}")
        if self.items_per_iteration <= 0:
            raise ValueError(f"scenario {self.key}: items_per_iteration must be positive")

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"scenario {self.key} has no variant {name!r}")

    def workloads(self) -> dict[str, Callable[[], object]]:
        return {v.name: v.run for v in self.variants}

    def on_gpu(self) -> Scenario:
        """The same scenario with the gates that apply on a GPU.

        The margins were measured on a 2-core CPU. Counts (traces, NaN
        iterations, growth as a share of the output) do not depend on the
        device and keep their gates; a speed or peak-memory ratio does, so
        without a GPU measurement (``min_effect_gpu``) it only has to show
        that the fix is not worse.
        """
        if self.metric not in DEVICE_DEPENDENT_METRICS:
            return self
        comparisons = tuple(
            dataclasses.replace(c, min_effect=c.min_effect_gpu, measured_here=c.measured_here + " (CPU); GPU gate")
            if c.min_effect_gpu is not None else
            dataclasses.replace(c, min_effect=min(c.min_effect, UNMEASURED_GPU_MIN_EFFECT),
                                measured_here=c.measured_here + " (CPU); not yet measured on a GPU")
            for c in self.comparisons
        )
        return dataclasses.replace(self, comparisons=comparisons)


DEVICE_DEPENDENT_METRICS = frozenset({Metric.THROUGHPUT, Metric.TF_PEAK})
UNMEASURED_GPU_MIN_EFFECT = 1.0
