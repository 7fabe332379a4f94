"""The anti-pattern catalog: TensorFlow mistakes and their fixes, measured side by side.

Each scenario (``pytest_tfperf.catalog.scenarios.<name>``) documents one
mistake from the articles the project started from, builds the anti-pattern
and its fix as plain callables (``build(size) -> Scenario``), names the metric
the mistake is about and records the margin by which the fix beat it on a
2-core CPU. ``test_catalog`` turns them into tests:

    pytest --tfperf --pyargs pytest_tfperf.catalog

Importing this package imports neither TensorFlow nor NumPy.
"""

from __future__ import annotations

import os

# The memory scenarios read TensorFlow's CPU allocator counters, which only its BFC allocator keeps: on
# CPUs without AVX-512 (oneDNN off by default) TensorFlow uses a plain allocator with none. Ask for BFC
# unless the user chose otherwise; it only takes effect if TensorFlow is not imported yet.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import SIZE_ENV_VAR, CatalogSize, resolve_size

__all__ = ["SIZE_ENV_VAR", "CatalogSize", "Comparison", "Metric", "Scenario", "Variant", "resolve_size"]
