"""Explanations on by default, with their cost bounded: a passing test is never profiled (stored gate), a suite
without TensorFlow never imports it for a profile, and a profiler whose stop hangs gives one line while the
verdict stands. The pair and --tfperf-against defaults: test_explain_orchestration.py, test_explain_against.py."""

from __future__ import annotations

import json

import numpy  # noqa: F401  (loaded before the in-process runs: see test_gate_and_outputs.py)
import pandas  # noqa: F401
import pytest

from tests.plugin.test_explain_orchestration import CONFTEST, FAST, WORKLOAD, profiled, run

PAIR = """
def work(n):
    return sum(i * i for i in range(n))

def test_paired(tfperf):
    tfperf.compare({"main": lambda: work(2000), "slow": lambda: work(40000)}, reference="main")
"""


def test_a_passing_test_under_the_stored_gate_is_not_profiled(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(WORKLOAD)
    run(pytester, "--tfperf-update").assert_outcomes(passed=1)
    assert profiled(pytester) == ["baseline"]
    run(pytester).assert_outcomes(passed=1)
    assert profiled(pytester) == ["baseline"]  # nothing more: the test passed


def test_a_suite_without_tensorflow_gets_one_line_and_never_imports_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
import json, sys

def pytest_sessionfinish(session):
    with open("loaded.json", "w") as fh:
        json.dump("tensorflow" in sys.modules, fh)
""")
    pytester.makepyfile(PAIR)
    result = pytester.runpytest_subprocess(*FAST, timeout=300)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_paired[[]slow[]]: performance regressed against variant 'main'*",
                                 "*  no explanation: the pair could not be profiled: the test did not load "
                                 "TensorFlow: its profiler has nothing to see"])
    assert json.loads((pytester.path / "loaded.json").read_text()) is False


HANGING_STOP = """
import threading
from types import SimpleNamespace
import pytest
from pytest_tfperf.profiling import capture

capture.DEFAULT_STOP_TIMEOUT_S = 0.2
NEVER = threading.Event()

class Trace:
    def __init__(self, name, **stats):
        pass
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False

experimental = SimpleNamespace(start=lambda logdir, options=None: None, stop=NEVER.wait, Trace=Trace,
                               ProfilerOptions=lambda **kw: None)
FAKE_TF = SimpleNamespace(profiler=SimpleNamespace(experimental=experimental))

@pytest.fixture(autouse=True)
def _hanging_profiler(monkeypatch):
    monkeypatch.setattr(capture, "_profiler_module", lambda: FAKE_TF)
"""


def test_a_profiler_stop_that_never_returns_is_one_line_and_the_verdict_stands(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HANGING_STOP)
    pytester.makepyfile(PAIR)
    result = pytester.runpytest_subprocess(*FAST, "--tfperf-json=out.json", timeout=300)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_paired[[]slow[]]: performance regressed against variant 'main'*",
                                 "*  no explanation: the pair could not be profiled: stopping the profiler took "
                                 "longer than 0.2 s (tf.profiler.experimental.stop() had not returned; no profile)"])
    tests = json.loads((pytester.path / "out.json").read_text())["tests"]
    (slow,) = [k for k in tests if k.endswith("[slow]")]
    assert tests[slow]["explanation"]["reason"].startswith("the pair could not be profiled: stopping the profiler")
