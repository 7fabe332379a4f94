"""`pytest --tfperf` end to end with pure-Python workloads: budgets, baselines, the gate and its outputs.

Workloads here are plain Python so the runs are fast and need no TensorFlow;
slowdowns are made large (3x to 10x) so that the verdicts do not depend on this
machine's noise. The statistics behind the verdicts are tested in tests/unit.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# numpy and pandas are imported by the gate and the history during the
# in-process runs below; pytester unloads modules first imported inside a run,
# and numpy cannot be loaded twice in one process, so load them here first.
import numpy  # noqa: F401
import pandas  # noqa: F401
import pytest

from pytest_tfperf.storage.baseline_store import BaselineStore
from pytest_tfperf.storage.results_json import SCHEMA_VERSION as RESULTS_SCHEMA_VERSION
from pytest_tfperf.storage.results_json import load_results

WORKLOAD = """
import os
import pytest

N = int(os.environ.get("WORK_N", "2000"))

def work():
    return sum(i * i for i in range(N))

def test_fast(tfperf):
    tfperf(work, items=N)

def test_other(tfperf):
    tfperf(lambda: sum(range(500)))
"""

# A wide tolerance (decisions at 45%) keeps this 2-core VM's noise out of the verdicts of
# unchanged tests: its host slows whole processes by up to half for seconds at a time
# (benchmarks/validation_study.py). Baselines are refreshed in 5 processes: with fewer, the bound
# that a run and its confirmation must both cross lies 16 (4 runs) to 50 (3 runs) spreads below the
# level (stored_rule.bound_factor), beyond any slowdown a test can plant. The slowdowns these tests
# make on purpose are 1000x: a baseline's runs on a loaded 2-core VM spread so much that the gate may
# only catch 10x or more.
FAST = ["--tfperf", "--tfperf-budget=0.3", "--tfperf-tolerance=90%", "--tfperf-runs=5"]
SLOWER = 2_000_000  # WORK_N for a 1000x slowdown of test_fast (items fixed at 2000)

# The confirming process is a partner session (TFPERF_PARTNER_FDS is set in it): these switches break it there
# only, never in the session under test. Unbroken it is WORKLOAD with items fixed at 2000.
BREAKABLE = WORKLOAD.replace("import pytest\n", """import pytest

if os.environ.get("TFPERF_PARTNER_FDS") and os.environ.get("BREAK_CONFIRMATION") == "exit":
    os._exit(3)  # the fresh process dies before it can measure anything
""", 1).replace("tfperf(work, items=N)", "tfperf(work, items=2000)")


def run(pytester: pytest.Pytester, *args: str, work_n: int = 2000) -> pytest.RunResult:
    os.environ["WORK_N"] = str(work_n)
    try:
        return pytester.runpytest_inprocess(*FAST, *args)
    finally:
        del os.environ["WORK_N"]


_REFRESHED: dict[str, Path] = {}  # a test module's source -> its baseline folder, refreshed once in this module


def refreshed(pytester: pytest.Pytester, source: str, tests: int) -> Path:
    """``source`` as test_work.py with its baselines refreshed; the baseline folder.

    A refresh is 5 pytest processes: the real one runs in the first test that asks for this source, and the
    others start from a copy of its folder, since what they check comes after the refresh. What a refresh
    itself writes is checked by test_update_then_regression_fails_exactly_the_slower_test.
    """
    pytester.makepyfile(test_work=source)
    directory = pytester.path / "benchmarks" / "baselines"
    if source not in _REFRESHED:
        run(pytester, "--tfperf-update").assert_outcomes(passed=tests)
        kept = pytester.path.parent / f"refreshed-{len(_REFRESHED)}"
        shutil.copytree(directory, kept)
        _REFRESHED[source] = kept
    else:
        shutil.copytree(_REFRESHED[source], directory)
    return directory


def test_budgets_fail_only_the_test_that_crosses_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.tfperf(min_throughput=1e15)
        def test_too_slow(tfperf):
            tfperf(lambda: sum(range(100)), items=1)

        @pytest.mark.tfperf(min_throughput=1.0, max_peak_rss_bytes=1 << 40)
        def test_within(tfperf):
            tfperf(lambda: sum(range(100)), items=1)
        """
    )
    result = pytester.runpytest_inprocess(*FAST)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*test_too_slow: limit crossed*",
        "*throughput*measured*limit 1,000,000,000,000,000.0 items/s*",
    ])
    result.stdout.fnmatch_lines(["*FAILED*test_too_slow*"])


def test_budgets_are_not_checked_in_smoke_mode(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.tfperf(min_throughput=1e15)
        def test_too_slow(tfperf):
            tfperf(lambda: None)
        """
    )
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


def test_no_baseline_is_reported_not_failed_unless_strict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKLOAD)
    result = run(pytester)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 test(s) have no baseline yet*not gated*--tfperf-update*"])
    strict = run(pytester, "--tfperf-strict")
    strict.assert_outcomes(failed=2)
    strict.stdout.fnmatch_lines(["*baseline required by --tfperf-strict*"])


def test_update_then_regression_fails_exactly_the_slower_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKLOAD)
    run(pytester, "--tfperf-update").assert_outcomes(passed=2)
    baselines = sorted(p.name for p in (pytester.path / "benchmarks" / "baselines").glob("*.json"))
    assert len(baselines) == 2
    assert (pytester.path / "benchmarks" / "baselines" / "history.csv").exists()

    store = BaselineStore(pytester.path / "benchmarks" / "baselines")
    for test in ("test_fast", "test_other"):
        (entry,) = json.loads(store.path_for(f"{pytester.path.name[:-1]}.py::{test}").read_text())["entries"].values()
        assert [r["kind"] for r in entry["runs"]] == ["refresh"] * 5  # one run per process

    # A thousand times the work for the same number of items: a 1000x slowdown of test_fast only,
    # failing by default, after a fresh process confirmed it.
    pytester.makepyfile(WORKLOAD.replace("tfperf(work, items=N)", "tfperf(work, items=2000)"))
    result = run(pytester, work_n=SLOWER)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*::test_fast: performance regressed against its baseline",
        "*throughput: * items/s -> * items/s (-*%, 99% CI *): slower than the baseline: this process ran *% and "
        "a fresh process *% slower than the baseline, both below its bound; the baseline's runs vary by *% "
        "between processes (5 baseline runs)*against this baseline, slowdowns of * or more are caught here*",
        "*compared against the baseline recorded for environment fingerprint *",
        "*refresh the baseline: pytest --tfperf --tfperf-update *::test_fast",
        "*test_fast*REGRESSED*",
        "*test_other*ok*",
        "*test_fast: a regression in this process was measured again in a fresh process: confirmed",
        "stored baselines: against their runs, slowdowns of * to * (median *) are caught on this machine",
        "FAILED *::test_fast*",
    ])
    assert "FAILED" not in "".join(line for line in result.outlines if "test_other" in line)


PAIR = """
import os

N = int(os.environ.get("WORK_N", "2000"))
# In the confirming process the changed variant goes by another name when asked: its test id is not measured there.
CHANGED = "renamed" if os.environ.get("TFPERF_PARTNER_FDS") and os.environ.get("BREAK_CONFIRMATION") else "changed"

def test_pair(tfperf):
    tfperf.compare({"steady": lambda: sum(i * i for i in range(2000)),
                    CHANGED: lambda: sum(i * i for i in range(N))}, items=2000)
"""


def test_a_variant_of_compare_that_regresses_is_confirmed_in_a_fresh_process(pytester: pytest.Pytester) -> None:
    # The fresh process measures the whole tfperf.compare() test; each variant is judged on its own run there.
    refreshed(pytester, PAIR, 1)
    result = run(pytester, work_n=SLOWER)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*::test_pair[[]changed[]]: performance regressed against its baseline",
        "*this process ran *% and a fresh process *% slower than the baseline, both below its bound*",
    ])
    result.stdout.fnmatch_lines(["*test_pair[[]changed[]]: a regression in this process was measured again in a "
                                 "fresh process: confirmed"])
    assert "test_pair[steady]: performance regressed" not in result.stdout.str()


def test_refresh_keeps_other_tests_baselines(pytester: pytest.Pytester) -> None:
    directory = refreshed(pytester, WORKLOAD, 2)
    before = {p.name: p.read_text() for p in directory.glob("*.json")}
    run(pytester, "--tfperf-update", "-k", "test_fast").assert_outcomes(passed=1, deselected=1)
    after = {p.name: p.read_text() for p in directory.glob("*.json")}
    assert before.keys() == after.keys()
    store = BaselineStore(directory)
    other = store.path_for("test_work.py::test_other").name
    fast = store.path_for("test_work.py::test_fast").name
    assert after[other] == before[other]
    assert after[fast] != before[fast]


def test_a_corrupted_baseline_fails_its_test_with_a_clear_message_and_is_not_overwritten(
        pytester: pytest.Pytester) -> None:
    store = BaselineStore(refreshed(pytester, WORKLOAD, 2))
    fast = store.path_for("test_work.py::test_fast")
    truncated = fast.read_text()[:200]
    fast.write_text(truncated)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_fast: its baseline file cannot be used*", f"*{fast.name}*"])
    update = run(pytester, "--tfperf-update")
    assert update.ret != 0
    assert fast.read_text() == truncated  # never silently replaced


def test_json_results_hold_samples_environment_and_verdicts(pytester: pytest.Pytester) -> None:
    refreshed(pytester, WORKLOAD, 2)
    out = pytester.path / "results.json"
    run(pytester, f"--tfperf-json={out}").assert_outcomes(passed=2)
    doc = load_results(out)
    assert set(doc.test_ids) == {"test_work.py::test_fast", "test_work.py::test_other"}
    m = doc.measurement("test_work.py::test_fast")
    assert m is not None and m.timings.iterations > 10 and m.timings.items_per_iteration == 2000
    verdict = doc.verdict("test_work.py::test_fast")
    assert verdict is not None and verdict["status"] in {"unchanged", "improved", "noisy", "regressed"}
    raw = json.loads(out.read_text())
    assert raw["schema"] == "pytest-tfperf/results" and raw["schema_version"] == RESULTS_SCHEMA_VERSION
    assert raw["environment"]["hard"]["cpu.cores"]


def test_markdown_summary_and_github_step_summary(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(WORKLOAD)
    step_summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    md = pytester.path / "summary.md"
    run(pytester, f"--tfperf-markdown={md}").assert_outcomes(passed=2)
    text = md.read_text()
    assert "| test | throughput | change vs baseline | catches | peak TF | verdict |" in text
    assert "test_fast" in text and "no baseline" in text
    assert step_summary.read_text() == text


def test_figures_go_to_junit_xml(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKLOAD)
    xml = pytester.path / "junit.xml"
    run(pytester, f"--junitxml={xml}").assert_outcomes(passed=2)
    text = xml.read_text()
    assert 'name="tfperf_throughput_per_s"' in text
    assert 'name="tfperf_verdict" value="no baseline"' in text


def test_compare_variants_are_gated_separately(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_pair(tfperf):
            res = tfperf.compare({"anti": lambda: sum(range(3000)), "fix": lambda: sum(range(300))})
            assert res["fix"].throughput > res["anti"].throughput
        """
    )
    # One process: a refresh's extra processes measure compare variants too, and their runs are judged in
    # test_a_variant_of_compare_that_regresses_is_confirmed_in_a_fresh_process.
    result = run(pytester, "--tfperf-update", "--tfperf-runs=1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_pair[[]anti[]]*", "*test_pair[[]fix[]]*"])
    assert len(list((pytester.path / "benchmarks" / "baselines").glob("*.json"))) == 2


def test_baseline_dir_from_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntfperf_baseline_dir = perf/base\n")
    pytester.makepyfile(WORKLOAD)
    run(pytester, "--tfperf-update").assert_outcomes(passed=2)
    assert len(list((pytester.path / "perf" / "base").glob("*.json"))) == 2
    assert not (pytester.path / "benchmarks").exists()


def test_a_baseline_dir_that_becomes_unwritable_during_the_run_fails_the_run_with_a_reason(
        pytester: pytest.Pytester) -> None:
    # Writable when the session began (it was checked then), blocked by the time baselines are written:
    # the run still fails with the reason, not silently.
    pytester.makepyfile("""
        def test_x(tfperf):
            with open("late", "w") as fh:
                fh.write("a file where the baseline directory goes, made after the session began")
            tfperf(lambda: sum(range(500)))
        """)
    result = run(pytester, "--tfperf-update", "--tfperf-baseline-dir=late/baselines")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["ERROR: cannot create the baseline directory *late/baselines*"])


def test_a_budget_without_a_figure_is_said_not_skipped(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.tfperf(max_peak_device_bytes=2**30)
        def test_gpu_budget_on_cpu(tfperf):
            tfperf(lambda: None)
        """
    )
    result = pytester.runpytest_inprocess(*FAST)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_gpu_budget_on_cpu: limit not checked: max_peak_device_bytes*"])


def test_paired_gate_fails_the_slower_variant_against_its_reference(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def work(n):
            return sum(i * i for i in range(n))

        def test_paired(tfperf):
            tfperf.compare({"main": lambda: work(2000), "same": lambda: work(2000), "slow": lambda: work(6000)},
                           reference="main")
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*test_paired[[]slow[]]: performance regressed against variant 'main', measured beside it",
        "*throughput:*slower*",
        "*compared round by round with 'main' in this run*no stored baseline is involved",
    ])
    text = result.stdout.str()
    assert "test_paired[same]: performance regressed" not in text
    result.stdout.fnmatch_lines(["*test_paired[[]same[]]*ok vs main*", "*test_paired[[]slow[]]*REGRESSED vs main*"])


def test_paired_reference_must_be_a_variant(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_bad(tfperf):
            tfperf.compare({"a": lambda: None, "b": lambda: None}, reference="main")
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*reference must be one of at least two variants*"])


def test_stored_throughput_regression_only_warns_when_asked(pytester: pytest.Pytester) -> None:
    refreshed(pytester, BREAKABLE, 2)  # unbroken: BREAK_CONFIRMATION is not set
    result = run(pytester, "--tfperf-throughput-gate=warn", work_n=SLOWER)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*test_fast*slower (warning)*",
        "*::test_fast: warning: throughput: * items/s -> * items/s*slower than the baseline*",
        "throughput warnings are not failures under --tfperf-throughput-gate=warn*",
    ])
    assert "fresh process" not in result.stdout.str()  # a warning is not worth a confirmation


def test_a_one_run_baseline_says_it_cannot_judge_throughput(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKLOAD.replace("tfperf(work, items=N)", "tfperf(work, items=2000)"))
    run(pytester, "--tfperf-update", "--tfperf-runs=1").assert_outcomes(passed=2)
    result = run(pytester, work_n=SLOWER, )
    result.assert_outcomes(passed=2)  # a 1000x slowdown, and nothing to judge it by: said, not guessed
    result.stdout.fnmatch_lines([
        "*test_fast*none*noisy*",
        "2 stored baseline(s) have too few runs to judge throughput: refresh them with pytest --tfperf "
        "--tfperf-update*",
    ])


def test_recorded_runs_go_to_the_history_and_leave_baselines_alone(pytester: pytest.Pytester) -> None:
    directory = refreshed(pytester, WORKLOAD, 2)
    before = {p.name: p.read_text() for p in directory.glob("*.json")}
    for _ in range(2):
        result = run(pytester, "--tfperf-record")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["this run recorded in *history.csv for 2 test(s); baselines unchanged"])
    assert {p.name: p.read_text() for p in directory.glob("*.json")} == before
    from pytest_tfperf.storage.history_csv import read_history_rows, recorded_runs

    recorded = recorded_runs(read_history_rows(directory / "history.csv"))
    assert sorted(len(v) for v in recorded.values()) == [2, 2]  # two recorded runs of each test
    # The next gated run uses them: its verdict counts them beside the baseline's runs.
    result = run(pytester, "--tfperf-json=out.json")
    verdict = load_results(pytester.path / "out.json").verdict("test_work.py::test_fast")
    assert verdict is not None
    (throughput,) = [m for m in verdict["metrics"] if m["metric"] == "throughput"]
    assert (throughput["baseline_runs"], throughput["history_runs"]) == (5, 2)


def test_throughput_gate_option_is_validated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess("--tfperf-throughput-gate=maybe")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*argument --tfperf-throughput-gate: invalid choice: 'maybe'*"])


def test_junit_figures_belong_to_their_own_test_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_x(tfperf):
            tfperf.compare({"a": lambda: None, "b": lambda: None})

        def test_x2(tfperf):
            tfperf(lambda: None)
        """
    )
    xml = pytester.path / "junit.xml"
    run(pytester, f"--junitxml={xml}").assert_outcomes(passed=2)
    text = xml.read_text()
    x2 = text.split('name="test_x2"', 1)[1].split("</testcase>", 1)[0]
    assert 'name="tfperf_throughput_per_s"' in x2
    assert 'name="a:tfperf_throughput_per_s"' not in x2
    x = text.split('name="test_x"', 1)[1].split("</testcase>", 1)[0]
    assert 'name="a:tfperf_throughput_per_s"' in x and 'name="b:tfperf_throughput_per_s"' in x
    assert 'name="2:' not in x  # test_x2's figures are not test_x's


def test_a_broken_history_fails_the_gated_tests_naming_it_and_is_not_rewritten(pytester: pytest.Pytester) -> None:
    history = refreshed(pytester, WORKLOAD, 2) / "history.csv"
    broken = history.read_text() + "2026-11-26T00:00:00Z,run,t::a,throughput_per_s\n"  # a row cut short
    history.write_text(broken)
    result = run(pytester, "--tfperf-record")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*the run history cannot be used, so nothing was compared*",
                                 f"*{history}: line * has 4 fields*"])
    assert history.read_text() == broken  # never rewritten: the tests that could not be judged record nothing


@pytest.mark.parametrize(("option", "given", "why"), [
    pytest.param("--tfperf-html", "/proc/r.html", "creating a file in /proc failed: No such file or directory",
                 marks=pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")),
    ("--tfperf-json", "blocker/out.json", "*blocker is not a directory"),
    ("--tfperf-markdown", "blocker/summary.md", "*blocker is not a directory"),
    ("--tfperf-baseline-dir", "blocker/baselines", "*blocker is not a directory"),
])
def test_an_output_path_that_cannot_be_written_stops_the_run_before_anything_is_measured(
        pytester: pytest.Pytester, option: str, given: str, why: str) -> None:
    pytester.makepyfile("""
        def test_x(tfperf):
            open("measured", "w").close()
            tfperf(lambda: None)
        """)
    (pytester.path / "blocker").write_text("a file where a folder is needed")
    extra = ["--tfperf-update"] if option == "--tfperf-baseline-dir" else []
    result = pytester.runpytest_inprocess(*FAST, *extra, f"{option}={given}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {option}={given}: cannot be written: {why}; nothing was measured: "
                                 "choose a writable path"])
    assert not (pytester.path / "measured").exists()


def test_github_step_summary_that_cannot_be_written_stops_the_run_before_measuring(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("def test_x(tfperf):\n    tfperf(lambda: None)\n")
    (pytester.path / "blocker").write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "blocker" / "summary.md"))
    result = pytester.runpytest_inprocess(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: $GITHUB_STEP_SUMMARY=*blocker/summary.md: cannot be written: "
                                 "*blocker is not a directory*"])


def test_outputs_in_folders_that_do_not_exist_yet_are_written_there(pytester: pytest.Pytester) -> None:
    # The check before measuring tries the nearest folder that exists; the writers create the rest.
    pytester.makepyfile("def test_x(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest_inprocess(*FAST, "--tfperf-json=new/a/out.json", "--tfperf-markdown=new/b/s.md")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "new" / "a" / "out.json").exists() and (pytester.path / "new" / "b" / "s.md").exists()
    assert not list(pytester.path.glob("**/.tfperf-write-check.*"))


def test_a_regression_whose_confirmation_cannot_run_is_reported_unconfirmed_and_fails_nothing(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed(pytester, BREAKABLE, 2)
    monkeypatch.setenv("BREAK_CONFIRMATION", "exit")
    step_summary = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result = run(pytester, work_n=SLOWER, *("--tfperf-json=out.json", "--junitxml=junit.xml",
                                            "--tfperf-markdown=summary.md"))
    result.assert_outcomes(passed=2)  # a 1000x slowdown in one process, and no second process to confirm it
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "*test_fast*unconfirmed*",
        "*::test_fast: unconfirmed, not failed: throughput slower than baseline by *) in this process, and a "
        "regression fails a test only once a fresh process shows it too, but the fresh process could not measure "
        "it: the partner session in * could not start: the other session ended*; run the test again to decide",
    ])
    assert "performance regressed" not in result.stdout.str()
    test_id = "test_work.py::test_fast"
    verdict = load_results(pytester.path / "out.json").verdict(test_id)
    assert verdict is not None and verdict["status"] == "unconfirmed"
    assert verdict["unconfirmed_reason"].startswith("the fresh process could not measure it: the partner session")
    (throughput,) = [m for m in verdict["metrics"] if m["metric"] == "throughput"]
    assert throughput["status"] == "regressed"  # what this process measured, kept
    junit = (pytester.path / "junit.xml").read_text()
    fast = junit.split('name="test_fast"', 1)[1].split("</testcase>", 1)[0]
    assert '<property name="tfperf_verdict" value="unconfirmed"' in fast
    assert '<property name="tfperf_unconfirmed_reason" value="the fresh process could not measure it:' in fast
    for markdown in ((pytester.path / "summary.md").read_text(), step_summary.read_text()):
        assert "| unconfirmed |" in markdown
        assert f"- `{test_id}`: the fresh process could not measure it: the partner session" in markdown


def test_a_compare_variant_the_fresh_process_did_not_measure_is_unconfirmed(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed(pytester, PAIR, 1)
    monkeypatch.setenv("BREAK_CONFIRMATION", "rename")
    result = run(pytester, work_n=SLOWER)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*test_pair[[]changed[]]: unconfirmed, not failed: throughput slower than baseline by *) in this process*"
        "but the fresh process did not measure it (it measured *test_pair[[]renamed[]], *test_pair[[]steady[]]); "
        "run the test again to decide",
    ])
