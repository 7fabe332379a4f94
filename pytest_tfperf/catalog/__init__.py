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

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import SIZE_ENV_VAR, CatalogSize, resolve_size

__all__ = ["SIZE_ENV_VAR", "CatalogSize", "Comparison", "Metric", "Scenario", "Variant", "resolve_size"]
