"""The scenario modules, in catalog order.

Each has ``KEY``, ``TITLE``, ``METRIC``, ``COMPARISONS`` and ``build(size)``,
and may declare ``NEEDS_GPU`` (the reason to skip without one),
``NEEDS_IDLE_CORES`` (the cores its fix must get for its effect to show: a
miss while the machine could not give them is reported, not failed; see
``machine_load.busy_machine_reason``) and ``TFPERF_MARKER`` (``@pytest.mark.tfperf`` settings for its test).
"""

from __future__ import annotations

import importlib
from types import ModuleType

MODULES = (
    "allocation_in_loop",
    "host_to_device",
    "input_pipeline",
    "vectorised_preprocessing",
    "session_churn",
    "oversized_batch",
    "eager_memory_growth",
    "retracing",
    "numerical_instability",
    "thread_starvation",
    "gpu_memory_config",
    "keras_retracing",  # 12, added after the first eleven so that their numbers stay
)


def load(key: str) -> ModuleType:
    if key not in MODULES:
        raise KeyError(f"no catalog scenario {key!r}; known: {', '.join(MODULES)}")
    return importlib.import_module(f"{__name__}.{key}")
