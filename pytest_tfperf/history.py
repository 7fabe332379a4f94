"""The run history's documented reading functions, ``pytest_tfperf.history.load_history`` and ``metric_trend``.

They live in ``storage.history_csv``; this path is the one docs/explanation/gates.md shows users.
"""

from __future__ import annotations

from pytest_tfperf.storage.history_csv import load_history, metric_trend

__all__ = ["load_history", "metric_trend"]
