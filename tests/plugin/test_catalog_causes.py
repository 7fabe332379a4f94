"""The catalog's explanations name their causes: the issue's three examples, on real TensorFlow.

Each anti-pattern is explained against its fix as ``--tfperf-explain`` explains a failed
``compare(reference=fix)`` (``catalog.causes.explain_comparison``): the allocation op in
``allocation_in_loop`` as the top cause, the sequential map in ``input_pipeline`` among the stages named. ``session_churn``'s cost, the Session's
construction, is no op TensorFlow's profiler traces: the explanation must say so by naming no op for it and
leaving the change in its remainder, not by blaming the graph's MatMul. ``benchmarks/catalog_causes.py``
runs every entry.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from pytest_tfperf.catalog.causes import (  # noqa: E402
    CAUSES, explain_comparison, named_anywhere, names_its_cause, top_cause,
)
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
    why = (CAUSES[key].says, top_cause(d), "\n".join(d["lines"]))
    if key == "input_pipeline":
        # At CI size its effect is 0.3-0.4 ms in 3.5 ms on this 2-core VM (the fix's parallel map finds no idle
        # core), as small as a layer's own noise, so the top cause is not always it (2 of 3 processes in
        # benchmarks/results/catalog_causes.md); the explanation names the sequential map in all of them.
        assert named_anywhere(key, d), why
    else:
        assert names_its_cause(key, d), why
