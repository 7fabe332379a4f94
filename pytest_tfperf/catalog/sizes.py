"""How big the catalog's workloads are: small for CI, default for ``--tfperf``, large on a GPU.

``TFPERF_CATALOG_SIZE=small|default|large`` chooses; without it the catalog
runs ``default`` on a CPU and ``large`` when TensorFlow sees a GPU. Each
scenario maps the size to its own numbers (tensor elements, batch size).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

SIZE_ENV_VAR = "TFPERF_CATALOG_SIZE"

T = TypeVar("T")


class CatalogSize(str, enum.Enum):
    SMALL = "small"  # CI smoke runs: each workload well under a second
    DEFAULT = "default"  # `pytest --tfperf` on a 2-core CPU: a few seconds per variant
    LARGE = "large"  # a GPU: enough work per iteration to keep the device busy


def resolve_size(environ: Mapping[str, str] | None = None,
                 gpu_available: Callable[[], bool] | None = None) -> CatalogSize:
    """The size asked for in the environment, else ``large`` on a GPU, else ``default``."""
    env = os.environ if environ is None else environ
    raw = env.get(SIZE_ENV_VAR, "").strip().lower()
    if raw:
        try:
            return CatalogSize(raw)
        except ValueError:
            known = ", ".join(s.value for s in CatalogSize)
            raise ValueError(f"{SIZE_ENV_VAR}={raw!r} is not a catalog size; use one of: {known}") from None
    probe = gpu_available if gpu_available is not None else tensorflow_sees_a_gpu
    return CatalogSize.LARGE if probe() else CatalogSize.DEFAULT


def tensorflow_sees_a_gpu() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def pick(size: CatalogSize, small: T, default: T, large: T) -> T:
    """The scenario's number for this size."""
    return {CatalogSize.SMALL: small, CatalogSize.DEFAULT: default, CatalogSize.LARGE: large}[size]


def compute_device() -> str:
    """Where the catalog's tensors live: the first GPU if there is one, else the CPU."""
    return "/GPU:0" if tensorflow_sees_a_gpu() else "/CPU:0"
