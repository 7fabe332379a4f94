"""What a tf.data pipeline is made of, read from the dataset object, for advice that fits it.

A ``tf.data.Dataset`` keeps its input datasets (``_inputs()``), and its class
names the transformation (``_ParallelMapDataset``, ``_PrefetchDataset``,
``CacheDataset``...). Walking back from the dataset a test iterates gives the
chain from source to end; ``options()`` tells which of TensorFlow's own
static optimisations (``map_parallelization``, ``inject_prefetch``) are
switched off. These are TensorFlow internals, read by duck typing: anything
unexpected gives ``None`` and the diagnosis falls back to general advice.
No TensorFlow import here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# TensorFlow 2.21's defaults for the options read here: on unless set False.
_AUTO_FIXES = ("map_parallelization", "inject_prefetch", "map_and_batch_fusion", "parallel_batch")
_MAX_NODES = 200  # a pipeline is tens of transformations; stop walking a cyclic or odd object


@dataclass(frozen=True, slots=True)
class PipelineShape:
    """The transformations of one dataset, source first, and what they imply for input-bound advice."""

    transformations: tuple[str, ...]  # "range", "cache", "shuffle", "parallel_map", "batch", "prefetch", ...
    auto_fixes_off: tuple[str, ...] = ()  # TensorFlow's static optimisations explicitly switched off
    # options().threading.private_threadpool_size when set: 1 means no stage can run in parallel
    threadpool_size: int | None = None
    autotune_off: bool = False  # options().autotune.enabled is False: AUTOTUNE values are not tuned

    def has(self, *names: str) -> bool:
        return any(t in names for t in self.transformations)

    @property
    def prefetches(self) -> bool:
        return self.has("prefetch")

    @property
    def parallel_map(self) -> bool:
        return self.has("parallel_map", "parallel_interleave", "parallel_batch", "map_and_batch")

    @property
    def sequential_map(self) -> bool:
        return self.has("map")

    @property
    def caches(self) -> bool:
        return self.has("cache")

    @property
    def repeats(self) -> bool:
        return self.has("repeat")

    @property
    def prefetch_injected(self) -> bool:
        """TensorFlow adds a prefetch at the end by itself unless told not to."""
        return not self.prefetches and "inject_prefetch" not in self.auto_fixes_off

    def describe(self) -> str:
        return " -> ".join(self.transformations) if self.transformations else "(unknown)"


def _name(obj: object) -> str:
    """``_ParallelMapDataset`` -> ``parallel_map``; ``CacheDataset`` -> ``cache``."""
    raw = type(obj).__name__.lstrip("_")
    raw = re.sub(r"(DatasetV[12]|Dataset)$", "", raw) or raw
    return re.sub(r"(?<!^)(?=[A-Z])", "_", raw).lower()


def shape_of(dataset: object) -> PipelineShape | None:
    """The transformations of ``dataset`` (a ``tf.data.Dataset``), or ``None`` for anything else."""
    inputs = getattr(dataset, "_inputs", None)
    if not callable(inputs) or not callable(getattr(dataset, "options", None)):
        return None
    chain: list[str] = []
    node: object | None = dataset
    seen = 0
    try:
        while node is not None and seen < _MAX_NODES:
            seen += 1
            name = _name(node)
            if name != "options":  # with_options() adds a node that transforms nothing
                chain.append(name)
            parents = list(node._inputs())  # type: ignore[attr-defined]
            # Zips and concatenations have several inputs; follow the first,
            # which is enough to tell a map or a prefetch on the main path.
            node = parents[0] if parents else None
        options = dataset.options()  # type: ignore[attr-defined]
        optimisation = options.experimental_optimization
        off = tuple(name for name in _AUTO_FIXES if getattr(optimisation, name, None) is False)
        pool = getattr(getattr(options, "threading", None), "private_threadpool_size", None)
        autotune = getattr(getattr(options, "autotune", None), "enabled", None)
    except Exception:  # noqa: BLE001 - private API: a surprise means "unknown", never a failed test
        return None
    return PipelineShape(transformations=tuple(reversed(chain)), auto_fixes_off=off,
                         threadpool_size=pool if isinstance(pool, int) and pool > 0 else None,
                         autotune_off=autotune is False)
