"""The catalog's explanations name their causes: the issue's three examples, on real TensorFlow.

Each anti-pattern is explained against its fix as ``--tfperf-explain`` explains a failed
``compare(reference=fix)`` (``catalog.causes.explain_comparison``): the allocation op in
``allocation_in_loop``, the sequential map in ``input_pipeline``. ``session_churn``'s cost, the Session's
construction, is no op TensorFlow's profiler traces: the explanation must say so by naming no op for it and
leaving the change in its remainder, not by blaming the graph's MatMul. ``benchmarks/catalog_causes.py``
runs every entry.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from pytest_tfperf.catalog.causes import CAUSES, explain_comparison, names_its_cause, top_cause  # noqa: E402
from pytest_tfperf.catalog.scenarios import load  # noqa: E402
from pytest_tfperf.catalog.sizes import CatalogSize  # noqa: E402


@pytest.mark.parametrize("key", ["allocation_in_loop", "input_pipeline", "session_churn"])
def test_the_explanation_names_the_entrys_cause(key: str, tmp_path) -> None:  # noqa: ANN001
    scenario = load(key).build(CatalogSize.SMALL)
    try:
        comparison = scenario.comparisons[0]  # the gated one: the raw mistake against the fix
        d = explain_comparison(key, scenario.variant(comparison.anti).run, scenario.variant(comparison.fix).run,
                               tmp_path, budget_s=1.0)
    finally:
        scenario.close()
    assert "causes" in d, d["lines"]  # both sides were profiled
    assert names_its_cause(key, d), (CAUSES[key].says, top_cause(d), "\n".join(d["lines"]))
