"""Catch the 'stall' that is really a NaN: a loss that stopped being finite.

With ``@pytest.mark.tfperf(check_finite=True)`` every value the workload
returns is checked; the first NaN or Inf fails the test with its iteration.
Checking forces the value to the host (a device sync), so it is opt-in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


class NonFiniteError(Exception):
    """The workload returned a NaN or infinite value."""

    def __init__(self, iteration: int, where: str, value: float) -> None:
        super().__init__(
            f"non-finite value at iteration {iteration} (counting the first call as 0): {where} = {value}. "
            "A loss that turns NaN often looks like a stall; typical causes are a learning rate too large, "
            "missing gradient clipping, or a log/division of zero."
        )
        self.iteration = iteration
        self.where = where
        self.value = value


def check_finite(iteration: int, output: object) -> None:
    """Raise ``NonFiniteError`` if ``output`` holds a non-finite number."""
    for where, value in _scalars(output, "output"):
        if not math.isfinite(value):
            raise NonFiniteError(iteration, where, value)


def _scalars(obj: Any, where: str) -> list[tuple[str, float]]:
    if obj is None or isinstance(obj, (str, bytes)):
        return []
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [(where, float(obj))]
    if isinstance(obj, Mapping):
        out: list[tuple[str, float]] = []
        for key, value in obj.items():
            out += _scalars(value, f"{where}[{key!r}]")
        return out
    if isinstance(obj, Sequence):
        out = []
        for i, value in enumerate(obj):
            out += _scalars(value, f"{where}[{i}]")
        return out
    numpy_method = getattr(obj, "numpy", None)
    if callable(numpy_method):  # a TensorFlow tensor or variable
        obj = numpy_method()
    if hasattr(obj, "dtype") and hasattr(obj, "shape"):
        import numpy as np

        arr = np.asarray(obj)
        if arr.dtype.kind not in "fc":
            return []
        bad = ~np.isfinite(arr)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0]) if arr.ndim else ()
            label = f"{where}{list(idx) if idx else ''}"
            return [(label, float(arr[idx] if idx else arr))]
        return []
    return []
