"""What the loop keeps of one variant while it measures, in buffers made before the rounds begin.

The measurer must not show up in what it measures: a round stores its samples
into slots that exist already (``SampleBuffer``), so nothing is allocated
inside it.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_tfperf.measuring.memory_growth import GrowthRecorder
from pytest_tfperf.measuring.workload import Workload
from pytest_tfperf.model import TraceEvent
from pytest_tfperf.probes import gpu_busy


class SampleBuffer:
    """Per-iteration nanoseconds in a flat ``array('q')``, its room made before any round starts.

    Appending to a Python list inside a round grew the very RSS high-water mark
    the round measures: the list's pointer array grows by reallocation, and
    every sample above 256 ns is an int object of its own (a no-op workload
    showed its RSS peak rising 15-18 MiB per round, ``sum(range(1000))`` 1 MiB).
    Here a round only stores into slots that exist already: 8 bytes a sample,
    converted, not kept as objects; ``array('q', [0]) * n`` writes every slot,
    so the pages are resident before the probes are reset (a lazily zeroed
    buffer would fault them in during the round and show up all the same).
    """

    __slots__ = ("data", "count")

    def __init__(self) -> None:
        self.data: array[int] = array("q")
        self.count = 0

    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more samples; call it outside any measured round."""
        missing = self.count + extra - len(self.data)
        if missing > 0:
            self.data.extend(array("q", [0]) * missing)

    def put(self, value: int) -> None:
        self.data[self.count] = value
        self.count += 1

    def values(self, start: int = 0) -> tuple[int, ...]:
        # Through a view: slicing the array itself would copy it first.
        return tuple(memoryview(self.data)[start:self.count])


@dataclass
class VariantState:
    """What the loop keeps of one variant (or one phase of it) while it measures."""

    name: str
    workload: Workload
    label: str = ""  # how the phase names it: the variant's name, or "dataset alone" / "step alone"
    share: float = 1.0  # of the budget
    aux_of: str | None = None  # set for the dataset-alone / step-alone phases of a pull+step variant
    prepare: Callable[[], None] | None = None  # untimed, before the first call
    cleanup: Callable[[], None] | None = None  # untimed, after the last round
    growth: GrowthRecorder | None = None
    typical_ns: float | None = None
    first_call_ns: int = 0
    estimate_ns: float = 0.0
    samples: SampleBuffer = field(default_factory=SampleBuffer)
    waits: SampleBuffer = field(default_factory=SampleBuffer)  # only pull+step workloads fill it
    round_sizes: list[int] = field(default_factory=list)
    per_probe_rounds: list[list[int | None]] = field(default_factory=list)
    per_probe_baseline: list[int | None] = field(default_factory=list)
    per_probe_starts: list[list[int | None]] = field(default_factory=list)
    busy_rounds: list[tuple[gpu_busy.BusyReading, ...]] = field(default_factory=list)  # per round, per NVML probe
    iteration_index: int = 0
    traces_first_call: int | None = None
    traces_steady: int | None = None
    trace_events: list[TraceEvent] = field(default_factory=list)  # causes of steady traces, where seen
    restart_marks: list[int] = field(default_factory=list)  # indices into samples of pulls that restarted
