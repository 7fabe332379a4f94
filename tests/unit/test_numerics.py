from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tfperf.diagnoses.numerics import NonFiniteError, check_finite


@pytest.mark.parametrize("value", [1.0, 3, {"loss": 0.5}, [1.0, 2.0], np.float32(2.0), np.ones(3), None, "text"])
def test_finite_values_pass(value: object) -> None:
    check_finite(7, value)


@pytest.mark.parametrize(("value", "where"), [
    (math.nan, "output"),
    ({"loss": math.inf}, "output['loss']"),
    ((1.0, np.array([1.0, np.nan])), "output[1][1]"),
    (np.float32("nan"), "output"),
])
def test_first_non_finite_value_names_iteration_and_place(value: object, where: str) -> None:
    with pytest.raises(NonFiniteError) as info:
        check_finite(12, value)
    assert info.value.iteration == 12
    assert info.value.where == where
    assert "iteration 12" in str(info.value) and "learning rate" in str(info.value)


def test_the_measurement_stops_at_the_first_non_finite_loss_with_its_iteration() -> None:
    from pytest_tfperf.measuring import runner
    from pytest_tfperf.measuring.workload import RunSettings, Workload

    calls = {"n": 0}

    def step() -> dict[str, float]:
        calls["n"] += 1
        return {"loss": math.nan if calls["n"] > 37 else 0.5}

    w = Workload(call=step, check_output=check_finite)
    with pytest.raises(NonFiniteError) as info:
        runner.measure({"": w}, RunSettings(budget_s=0.05, rounds=3, warmup_s=0.0), watch=False)
    assert info.value.iteration == 37  # the 38th call; the first call is iteration 0
    assert calls["n"] == 38  # nothing ran after it


def test_a_finite_run_is_not_stopped() -> None:
    from pytest_tfperf.measuring import runner
    from pytest_tfperf.measuring.workload import RunSettings, Workload

    w = Workload(call=lambda: {"loss": 0.5}, check_output=check_finite)
    raw = runner.measure({"": w}, RunSettings(budget_s=0.01, rounds=2, warmup_s=0.0), watch=False)[""]
    assert raw.timings.iterations >= 2
