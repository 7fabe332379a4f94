"""--tfperf-against end to end: a real partner session in another tree, real pipes, real git.

Regressions are made deterministic (memory that a call adds), so these tests
never depend on the speed of the machine; the throughput side of the paired
rule is validated in benchmarks/validation_against.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tfperf.storage.results_json import load_results

TF_MODULE = """
import pytest
import tensorflow as tf

MIB = 1024 * 1024 // 4  # float32 elements in a MiB

def test_memory(tfperf):
    tfperf(lambda: tf.reduce_sum(tf.ones([{mib} * MIB])))

def test_same(tfperf):
    tfperf(lambda: tf.reduce_sum(tf.ones([256, 256])))
{extra}
"""

ONLY_IN_CHANGE = """
def test_new_only(tfperf):
    tfperf(lambda: tf.reduce_sum(tf.ones([8])))
"""

BROKEN_IN_BASELINE = """
def test_broken_there(tfperf):
    raise RuntimeError("the old code cannot build its input")
"""

FIXED_IN_CHANGE = """
def test_broken_there(tfperf):
    tfperf(lambda: tf.reduce_sum(tf.ones([8])))
"""


def run(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tf_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], object]:
    root = tmp_path_factory.mktemp("against")
    for tree, mib, extra in (("baseline", 4, BROKEN_IN_BASELINE), ("change", 64, ONLY_IN_CHANGE + FIXED_IN_CHANGE)):
        (root / tree).mkdir()
        (root / tree / "test_work.py").write_text(TF_MODULE.format(mib=mib, extra=extra))
        (root / tree / "pytest.ini").write_text("[pytest]\n")
    out = root / "results.json"
    # Explanations are tested on their own (test_explain_against.py); here they would profile every red test.
    proc = run(root / "change", "--tfperf-against=../baseline", "--tfperf-budget=0.3", "--no-tfperf-explain",
               f"--tfperf-json={out}")
    return proc, load_results(out)


def test_memory_that_grew_since_the_other_version_fails_its_test(tf_session) -> None:  # type: ignore[no-untyped-def]
    proc, doc = tf_session
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout
    assert "test_work.py::test_memory: performance regressed against ../baseline, the same test measured beside " \
           "it in a partner session" in proc.stdout
    assert "the two versions taking turns on this machine" in proc.stdout
    verdict = doc.verdict("test_work.py::test_memory")
    memory = next(m for m in verdict["metrics"] if m["metric"] == "peak_tf_allocator[CPU:0]")
    assert memory["status"] == "regressed"
    assert 14.0 < memory["relative_change"] < 16.0  # 4 MiB -> 64 MiB per call


def test_each_measured_test_was_judged_round_by_round_against_the_other_version(tf_session) -> None:  # type: ignore[no-untyped-def]
    proc, doc = tf_session
    verdict = doc.verdict("test_work.py::test_same")
    throughput = next(m for m in verdict["metrics"] if m["metric"] == "throughput")
    # 20 rounds a side, or 10 when the first look found the change already clear; a borderline verdict is
    # looked at again beside the partner (10 or 20 rounds more), pooled.
    rounds = len(doc.measurement("test_work.py::test_same").timings.round_sizes)
    assert rounds in (10, 20, 30, 40)
    assert f"over {rounds} interleaved rounds" in throughput["message"]
    if rounds == 10:
        assert "test_work.py::test_same: 10 rounds a side sufficed: the first look already put the change within " \
               "the decision threshold" in proc.stdout
    assert doc.compared_with["test_work.py::test_same"] == "measured beside ../baseline"
    assert "vs ../baseline" in proc.stdout


def test_tests_the_other_version_lacks_or_breaks_are_measured_alone_with_a_notice(tf_session) -> None:  # type: ignore[no-untyped-def]
    proc, doc = tf_session
    assert "test_work.py::test_new_only: not measured beside ../baseline: ../baseline has no test " \
           "test_work.py::test_new_only; judged as without --tfperf-against" in proc.stdout
    assert "test_work.py::test_broken_there: not measured beside ../baseline: the test failed in ../baseline " \
           "before measuring" in proc.stdout
    assert "the old code cannot build its input" in proc.stdout
    assert doc.verdict("test_work.py::test_new_only") is None  # no stored baseline either: reported, not gated


PY_MODULE = """
import os

HELD = []

def grow(n_mib):
    HELD.append(b"\x01" * (n_mib * 1024 * 1024))  # written byte by byte: resident, not lazily mapped zeros
    del HELD[:-1]

def test_rss(tfperf):
    tfperf(lambda: grow({mib}))

def test_slow(tfperf):
    tfperf(lambda: sum(range({work})))

def test_crashes_there(tfperf):
    calls = iter(range(10**9))
    def work():
        if {crash} and next(calls) == 500:  # past the warm-up (at most 50 calls)
            os._exit(3)  # the old version dies mid-measurement
        return sum(range(1000))
    tfperf(work)

def test_after(tfperf):
    tfperf(lambda: sum(range(1000)))
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def test_against_a_git_revision_checked_out_for_the_run_and_removed_after(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_py.py").write_text(PY_MODULE.format(mib=2, work=1000, crash=True))
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "baseline")
    (tmp_path / "test_py.py").write_text(PY_MODULE.format(mib=256, work=20000, crash=False))
    git(tmp_path, "commit", "-qam", "a change that holds 256 MiB per call and works 20 times as hard")

    own_tmp = tmp_path.parent / f"{tmp_path.name}-tmp"  # the run's own temporary folder: other runs' are not ours
    own_tmp.mkdir()
    proc = run(tmp_path, "--tfperf-against=HEAD~1", "--tfperf-budget=0.2", "--tfperf-no-watchdog", TMPDIR=str(own_tmp))
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "test_py.py::test_rss: performance regressed against HEAD~1" in out
    assert "peak_rss_hwm[host]" in out
    # A throughput regression fails only once confirmed by two fresh pairs of processes, one of each tree in
    # each, in turns (a fresh pair that could not tell at first says "taking turns (measured twice, ...)").
    assert "test_py.py::test_slow: confirmed in two fresh processes, one of each version, taking turns" in out
    assert "test_py.py::test_slow: confirmed again in another two fresh processes, one of each version, taking " \
           "turns" in out
    assert "test_py.py::test_slow: performance regressed against HEAD~1" in out
    # The old version died mid-measurement: that test and the next are judged alone, and say why.
    assert "test_py.py::test_crashes_there: measured beside HEAD~1 but its figures were lost" in out
    assert "test_py.py::test_after: not measured beside HEAD~1" in out
    assert "2 failed, 2 passed" in out
    assert git(tmp_path, "worktree", "list").count("\n") == 0  # only the main tree is left
    assert not [p for p in own_tmp.glob("tfperf-partner-*") if (p / "baseline-tree").exists()]


def test_a_revision_that_does_not_exist_stops_the_run_before_measuring(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest("--tfperf", "--tfperf-against=no-such-branch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tfperf-against=no-such-branch: not a directory*"])


def test_against_needs_measuring_and_is_no_refresh(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest("--tfperf-against=.")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tfperf-against needs --tfperf*"])
    result = pytester.runpytest("--tfperf", "--tfperf-update", "--tfperf-against=.")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*refresh baselines in a run without it*"])
