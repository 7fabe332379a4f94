"""A conftest for pytest sessions whose tests are about something other than memory growth.

Before a memory-growth warning the measuring loop runs the workload longer, untimed, to confirm it:
at least ``CONFIRM_MIN_ITERATIONS`` calls for up to ``CONFIRM_MIN_S`` seconds (``measuring/memory_growth``).
Every retracing workload grows (each trace is kept), and at 0.05 to 0.12 s a Keras recompile that is
12 s of every such test here. The sessions that assert traces, not growth, write this conftest to
confirm within the test's own budget instead (or, where other tests in the session assert "no warning",
load ``short_growth_confirmation_for`` their retracing tests only); the confirmation itself stays tested in
tests/unit/test_runner.py and test_diagnostics_memory_growth.py, and on real TensorFlow by the leak tests
(test_diagnostics_plugin.py's test_leaks, the real-model suite's kept outputs), whose sessions keep the defaults.
"""

from __future__ import annotations

SHORT = {"CONFIRM_MIN_ITERATIONS": 10, "CONFIRM_PAST_ITERATIONS": 0, "CONFIRM_MIN_S": 0.0,
         "CONFIRM_BUDGET_MULTIPLE": 1.0}

SHORT_GROWTH_CONFIRMATION = f"""
from pytest_tfperf.measuring import memory_growth

for name, value in {SHORT!r}.items():
    assert hasattr(memory_growth, name), name  # renamed? then this conftest no longer shortens anything
    setattr(memory_growth, name, value)
"""


def short_growth_confirmation_for(*test_names: str) -> str:
    """A ``-p`` plugin: the same short confirmation, only while the named tests run (the others keep the
    defaults, as a session that asserts "no warning" on healthy workloads must)."""
    return f"""
import pytest
from pytest_tfperf.measuring import memory_growth

SHORT = {SHORT!r}
TESTS = {set(test_names)!r}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if item.name not in TESTS:
        return (yield)
    saved = {{name: getattr(memory_growth, name) for name in SHORT}}  # AttributeError if one was renamed
    for name, value in SHORT.items():
        setattr(memory_growth, name, value)
    try:
        return (yield)
    finally:
        for name, value in saved.items():
            setattr(memory_growth, name, value)
"""
