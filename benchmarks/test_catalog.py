"""The anti-pattern catalog, run from the repository: ``pytest --tfperf benchmarks/``.

The tests live in the installed package (``pytest --tfperf --pyargs
pytest_tfperf.catalog`` runs the same ones); importing them here makes pytest
collect them under ``benchmarks/`` too.
"""

from __future__ import annotations

from pytest_tfperf.catalog.test_catalog import *  # noqa: F403
