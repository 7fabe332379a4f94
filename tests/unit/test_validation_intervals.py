"""benchmarks/validation/intervals.py: the Wilson interval the validation studies report hit rates with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "validation" / "intervals.py"


@pytest.fixture(scope="module")
def intervals():  # noqa: ANN201 - a module loaded from its file: benchmarks/ is not a package
    spec = importlib.util.spec_from_file_location("validation_intervals", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wilson_interval_matches_the_research_figures(intervals) -> None:  # noqa: ANN001
    low, high = intervals.wilson_interval(0, 300)
    assert low == 0.0 and high == pytest.approx(0.0126, abs=1e-4)
    low, high = intervals.wilson_interval(2, 200)
    assert low == pytest.approx(0.0028, abs=1e-4) and high == pytest.approx(0.0357, abs=1e-4)
    low, high = intervals.wilson_interval(50, 50)
    assert high == 1.0 and low == pytest.approx(1 - intervals.wilson_interval(0, 50)[1])
    with pytest.raises(ValueError, match="successes"):
        intervals.wilson_interval(3, 2)
