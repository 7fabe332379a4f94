from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tfperf.numerics import NonFiniteError, check_finite


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
