"""The anti-pattern catalog in CI: small sizes, every scenario, from the installed package.

Without ``--tfperf`` each scenario runs every variant once through the
fixture and then checks the effects that need no clock (peak memory, growth,
traces, a NaN loss) with a few direct calls. A second run measures the
deterministic scenarios through ``--tfperf`` with a short budget, so the path
from the harness's ``Measurement`` to the catalog's verdict is exercised too.
Throughput margins are only asserted by ``pytest --tfperf benchmarks/`` on a
quiet machine: timing thresholds do not belong in CI's unit tests.
"""

from __future__ import annotations

import pytest

from pytest_tfperf.catalog.scenarios import MODULES

pytestmark = pytest.mark.filterwarnings("default")

GPU_ONLY_TESTS = 2  # gpu_memory_config, and the oversized batch under a real GPU cap


@pytest.fixture
def small_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFPERF_CATALOG_SIZE", "small")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")


def _outcomes(result: pytest.RunResult) -> dict[str, int]:
    outcomes = result.parseoutcomes()
    assert not outcomes.get("failed") and not outcomes.get("errors"), result.stdout.str()[-4000:]
    return outcomes


def test_every_scenario_runs_and_shows_its_effect_without_measuring(pytester: pytest.Pytester,
                                                                     small_catalog: None) -> None:
    result = pytester.runpytest_subprocess("--pyargs", "pytest_tfperf.catalog", "-p", "no:cacheprovider", "-rs")
    outcomes = _outcomes(result)
    total = len(MODULES) + 5  # one parametrised test per scenario, four oversized-batch tests, one NaN test
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == total
    # A CPU runner skips the GPU-only tests, and says why; a GPU runner runs them.
    if outcomes.get("skipped"):
        assert outcomes["skipped"] == GPU_ONLY_TESTS
        result.stdout.fnmatch_lines(["*SKIPPED*GPU*"])


def test_deterministic_effects_are_judged_from_the_harness_measurements(pytester: pytest.Pytester,
                                                                         small_catalog: None) -> None:
    result = pytester.runpytest_subprocess(
        "--pyargs", "pytest_tfperf.catalog", "-p", "no:cacheprovider", "--tfperf", "--tfperf-budget", "0.3",
        # Not the retracing scenarios: their verdicts come from the quick check with or without --tfperf
        # (test_catalog.py says why), which the run above already makes, and their measured leak check
        # costs more than the rest of this run; the main job (benchmarks/) measures them.
        "-k", "test_fix_beats_anti_pattern and (oversized_batch or eager_memory_growth or numerical_instability)")
    outcomes = _outcomes(result)
    assert outcomes.get("passed") == 3
