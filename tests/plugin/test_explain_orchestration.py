"""--tfperf-explain through pytest with a fake profiler (pure-Python workloads, no TensorFlow): when the
profiled passes run, what the failure message and the JSON gain, the refresh storing profiles, the stored
gate's explanation and its line when the baseline holds no profile. The real profiler: test_explain_plugin.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy  # noqa: F401  (loaded before the in-process runs: see test_gate_and_outputs.py)
import pandas  # noqa: F401
import pytest

from pytest_tfperf.storage.baseline_store import BaselineStore

# The profiled pass, faked in every process of the run (the refresh's and the confirmation's too): each call
# is written to profiled.txt; a side that runs the slower code (a variant, or WORK_N raised) has a planted group.
CONFTEST = """
import os
import pytest
from pytest_tfperf.profiling import capture
from pytest_tfperf.profiling.profile_model import Group, Profile

HERE = os.path.dirname(os.path.abspath(__file__))

def fake_profile_step(step, logdir, *, name, windows, iterations, **budget):
    step()
    with open(os.path.join(HERE, "profiled.txt"), "a") as fh:
        fh.write(name + "\\n")
    groups = [Group("layer:body", "layer", "body", ("MatMul",), (0.010, 0.0101, 0.0099, 0.01, 0.01))]
    wall = 0.02
    if name == "variant" or (name == "current" and os.environ.get("WORK_N", "20000") != "20000"):
        groups.append(Group("layer:planted", "layer", "planted", ("MatMul",), (0.05, 0.051, 0.049, 0.05, 0.05)))
        wall = 0.07
    profile = Profile(name=name, iterations=iterations, wall=(wall,) * 5, groups=tuple(groups),
                      other=(0.0,) * 5, smallest_kept=0.0, input_wait=(0.0,) * 5, elements=0.0, logdir=str(logdir))
    return capture.ProfileOutcome(profile, None, str(logdir), 0.0)

def fake_profile_steps(steps, logdir, *, windows, iterations, **budget):
    return {side: fake_profile_step(step, logdir, name=side, windows=windows, iterations=iterations[side])
            for side, step in steps.items()}

@pytest.fixture(autouse=True)
def _fake_profiler(monkeypatch):
    monkeypatch.setattr(capture, "profile_step", fake_profile_step)
    monkeypatch.setattr(capture, "profile_steps", fake_profile_steps)
"""

PAIR = """
def work(n):
    return sum(i * i for i in range(n))

def test_paired(tfperf):
    tfperf.compare({"main": lambda: work(2000), "same": lambda: work(2000), "slow": lambda: work(20000)},
                   reference="main")
"""

WORKLOAD = """
import os

N = int(os.environ.get("WORK_N", "20000"))

def test_fast(tfperf):
    tfperf(lambda: sum(i * i for i in range(N)), items=20000)
"""

FAST = ["--tfperf", "--tfperf-budget=0.3", "--tfperf-tolerance=90%", "--tfperf-runs=3", "-p", "no:cacheprovider"]
# A stored gate refreshed in 3 processes states a limit of 200x or more on a loaded machine (a t quantile with 2
# degrees of freedom at 1 in 10,000), and the planted 100x then passes: the stored-gate tests refresh in 7.
REFRESH = ["--tfperf-runs=7"]


def run(pytester: pytest.Pytester, *args: str, work_n: int = 20000) -> pytest.RunResult:
    os.environ["WORK_N"] = str(work_n)
    try:
        return pytester.runpytest_inprocess(*FAST, *args)
    finally:
        del os.environ["WORK_N"]


def profiled(pytester: pytest.Pytester) -> list[str]:
    path = pytester.path / "profiled.txt"
    return path.read_text().split() if path.exists() else []


def test_a_regressed_variant_is_explained_after_its_measurement_and_the_json_keeps_it(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(PAIR)
    # no option: explanations are on by default
    result = run(pytester, "--tfperf-json=out.json", "--tfperf-markdown=summary.md")
    result.assert_outcomes(failed=1)
    # Only the variant that failed is explained: its reference, then itself; 'same' passed and is not profiled.
    assert profiled(pytester) == ["reference", "variant"]
    result.stdout.fnmatch_lines([
        "*test_paired[[]slow[]]: performance regressed against variant 'main'*",
        "*  where the time went: +*/iteration measured; the profiled pass +50.0 ms*",
        "*    planted (MatMul family) appeared +50.0 ms*",
        "*    raw profile (both sides, alternating windows): tensorboard --logdir */.tfperf/profiles/*test_paired_slow/pair",
    ])
    tests = json.loads((pytester.path / "out.json").read_text())["tests"]
    (slow,) = [k for k in tests if k.endswith("[slow]")]
    assert tests[slow]["explanation"]["causes"][0]["key"] == "layer:planted"
    assert [k for k in tests if "explanation" in tests[k]] == [slow]
    assert "planted (MatMul family) appeared +50.00 ms/iteration" in (pytester.path / "summary.md").read_text()


def test_nothing_is_profiled_on_a_passing_run_nor_with_explanations_turned_off(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(PAIR.replace("work(20000)", "work(2000)"))
    run(pytester).assert_outcomes(passed=1)  # on by default, and a passing test is never profiled
    assert profiled(pytester) == []
    pytester.makepyfile(PAIR)
    result = run(pytester, "--no-tfperf-explain")
    result.assert_outcomes(failed=1)
    assert profiled(pytester) == [] and "where the time went" not in result.stdout.str()
    # --tfperf-explain is still accepted: it means on, the default
    run(pytester, "--tfperf-explain").assert_outcomes(failed=1)
    assert profiled(pytester) == ["reference", "variant"]


def test_the_ini_key_turns_it_off_and_the_option_back_on(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\ntfperf_explain = false\n")
    pytester.makepyfile(PAIR)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert profiled(pytester) == [] and "where the time went" not in result.stdout.str()
    run(pytester, "--tfperf-explain").assert_outcomes(failed=1)
    assert profiled(pytester) == ["reference", "variant"]


def test_the_refresh_stores_profiles_and_a_stored_regression_is_explained_against_them(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(WORKLOAD)
    run(pytester, "--tfperf-update", *REFRESH).assert_outcomes(passed=1)  # explanations on by default: profiles stored
    assert profiled(pytester) == ["baseline"]  # the refresh's first process only
    store = BaselineStore(pytester.path / "benchmarks" / "baselines")
    (test_id,) = store.stored_test_ids()
    data = json.loads(store.path_for(test_id).read_text())
    (entry,) = data["entries"].values()
    assert data["schema_version"] == 3 and entry["profile"]["version"] == 1
    assert entry["profile"]["logdir"] == str(Path(".tfperf/profiles") / test_id.replace("::", "_") / "baseline")

    result = run(pytester, work_n=2_000_000)
    result.assert_outcomes(failed=1)
    assert profiled(pytester) == ["baseline", "current"]
    # the fake wrote no raw profile: as on a clone, where .tfperf/ is absent, the line says how to make one here
    result.stdout.fnmatch_lines([
        "*::test_fast: performance regressed against its baseline",
        "*  where the time went: *",
        "*    planted (MatMul family) appeared +50.0 ms*",
        "*raw profile: tensorboard --logdir */.tfperf/profiles/*/current (current); the baseline's raw profile is "
        "not in this checkout (.tfperf/ stays where the baseline was refreshed): pytest --tfperf "
        "--tfperf-against=* *::test_fast profiles both sides here",
    ])


def test_a_stored_regression_without_a_stored_profile_says_how_to_get_one(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(WORKLOAD)
    run(pytester, "--tfperf-update", "--no-tfperf-explain", *REFRESH).assert_outcomes(passed=1)
    assert profiled(pytester) == []
    result = run(pytester, work_n=2_000_000)
    result.assert_outcomes(failed=1)
    assert profiled(pytester) == []
    result.stdout.fnmatch_lines(["*  no explanation: the baseline holds no profile (refreshed with explanations "
                                 "off, or by an older pytest-tfperf); refresh it with --tfperf-update"])
