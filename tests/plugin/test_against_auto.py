"""--tfperf-against=auto through pytest: the revision said once, and every way of finding none said in one line
with the stored gate judging instead (never a traceback, never a silent pass); a baseline tree whose tests do not
import, in one line too.

The workloads are cheap Python calls; what regresses is memory a call holds
(deterministic), never a timing. The look-up's cases on their own are
tests/unit/test_baseline_revision.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CI_VARIABLES = ("GITHUB_BASE_REF", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "CI_MERGE_REQUEST_DIFF_BASE_SHA",
                "GITHUB_STEP_SUMMARY")
MODULE = "def test_x(tfperf):\n    tfperf(lambda: sum(range(1000)), items=1)\n"
FAST = ("--tfperf", "--tfperf-budget=0.1", "--tfperf-no-watchdog")
FALLBACK_NOTICE = "test_x.py::test_x: judged by the stored gate, not beside a baseline revision " \
                  "(--tfperf-against=auto found none)"


@pytest.fixture(autouse=True)
def no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests fake the CI variables they need; the ones of a CI running them must not leak in."""
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "advice.detachedHead=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def test_in_a_pull_request_the_merge_base_is_found_said_once_and_measured_beside(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_x=MODULE)
    git(pytester.path, "init", "-q", "-b", "main")
    base = commit_all(pytester.path, "base")
    git(pytester.path, "clone", "-q", "--bare", str(pytester.path), str(tmp_path / "origin.git"))
    git(pytester.path, "remote", "add", "origin", f"file://{tmp_path / 'origin.git'}")
    git(pytester.path, "checkout", "-q", "-b", "change")
    pytester.makepyfile(test_x=MODULE + "# a change\n")
    commit_all(pytester.path, "change")
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_BASE_REF", "main")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    result = pytester.runpytest(*FAST, "--tfperf-against=auto", "--tfperf-markdown=tfperf.md")
    out = result.stdout.str()
    # The subject is the base found, said and measured beside; whether an unchanged 10 us step stays green is
    # the gate's measured rate (benchmarks/paired_pipelines.py), which a test must not fail by chance (CI once
    # read -29% and -19% here, in-process coordinator and all).
    assert result.ret in (0, 1), out
    said = (f"--tfperf-against=auto: {base[:12]}, the merge base of HEAD with origin/main (GitHub Actions pull "
            "request into main, GITHUB_BASE_REF); fetched first: git fetch --no-tags origin "
            "+refs/heads/main:refs/remotes/origin/main")
    assert out.count(said) == 1  # the header; the table's verdicts name the revision
    assert f"tfperf: {said}" in out
    assert f"vs {base[:12]}" in out
    assert "judged by the stored gate" not in out
    # The reviewer's page says what the verdicts were measured against; the step summary gets the same page.
    assert f"> {said}" in (pytester.path / "tfperf.md").read_text()
    assert (pytester.path / "tfperf.md").read_text() in summary.read_text()


def no_git(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def no_history(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(path, "init", "-q")


def detached_head(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(path, "init", "-q", "-b", "trunk")
    commit_all(path, "one")
    git(path, "checkout", "-q", "--detach")


def base_branch_missing(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(path, "init", "-q", "-b", "main")
    commit_all(path, "one")
    git(path, "clone", "-q", "--bare", str(path), str(path / "origin.git"))
    git(path, "remote", "add", "origin", f"file://{path / 'origin.git'}")
    monkeypatch.setenv("GITHUB_BASE_REF", "release-9")


def no_merge_base(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "README").write_text("another project\n")
    commit_all(other, "unrelated")
    git(path, "init", "-q", "-b", "work")
    (path / ".gitignore").write_text("other/\n")
    commit_all(path, "one")
    git(path, "remote", "add", "origin", f"file://{other}")
    monkeypatch.setenv("CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "main")


@pytest.mark.parametrize(("situation", "said"), [
    (no_git, "--tfperf-against=auto needs git, which is not installed (or not on PATH): install git, or pass the "
             "baseline's code as --tfperf-against=DIR"),
    (no_history, "--tfperf-against=auto: the repository has no commit yet, so there is no baseline to measure "
                 "against: commit the baseline first, or pass --tfperf-against=DIR"),
    (detached_head, "--tfperf-against=auto: HEAD is detached (no branch, so no upstream), and none of origin/main, "
                    "origin/master, main, master exists: pass --tfperf-against=REV naming the baseline revision"),
    (base_branch_missing, "--tfperf-against=auto: origin/release-9 is not in this checkout (git fetch failed: "
                          "fatal: couldn't find remote ref refs/heads/release-9): run git fetch --no-tags origin "
                          "+refs/heads/release-9:refs/remotes/origin/release-9 before pytest, or pass "
                          "--tfperf-against=REV"),
    (no_merge_base, "--tfperf-against=auto: HEAD and origin/main have no commit in common (unrelated histories): "
                    "pass --tfperf-against=REV naming the baseline revision"),
], ids=["no_git", "no_history", "detached_head", "base_branch_missing", "no_merge_base"])
def test_no_baseline_revision_is_one_line_and_the_stored_gate_judges(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, situation, said: str) -> None:  # type: ignore[no-untyped-def]
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_x=MODULE)
    situation(pytester.path, monkeypatch)

    result = pytester.runpytest(*FAST, "--tfperf-against=auto", "--tfperf-markdown=tfperf.md")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out  # no stored baseline either: measured and reported, not gated
    lines = out.splitlines()
    assert f"tfperf: {said}; the tests are judged by the stored gate (stored baselines) instead" in lines  # header
    assert f"{said}; every test was judged by the stored gate (stored baselines) instead" in lines  # summary
    assert FALLBACK_NOTICE in lines
    assert "1 test(s) have no baseline yet" in out
    assert "Traceback" not in out
    assert f"> {said}; every test was judged by the stored gate" in (pytester.path / "tfperf.md").read_text()


GROWS = """
HELD = []

def test_x(tfperf):
    def work():
        HELD.append(b"\\x01" * ({mib} * 1024 * 1024))  # written byte by byte: resident
        del HELD[:-1]
    tfperf(work, items=1)
"""


def test_the_stored_gate_that_judges_instead_still_fails_a_regression(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")  # not a git repository: auto finds nothing
    pytester.makepyfile(test_x=GROWS.format(mib=2))
    assert pytester.runpytest(*FAST, "--tfperf-update", "--tfperf-runs=1").ret == 0
    pytester.makepyfile(test_x=GROWS.format(mib=256))

    result = pytester.runpytest(*FAST, "--tfperf-against=auto")
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "peak_rss_hwm[host]" in out
    assert FALLBACK_NOTICE in out.splitlines()
    assert "is not inside a git repository" in out


def test_a_baseline_revision_whose_tests_do_not_import_is_said_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_x=MODULE)
    pytester.makeconftest("import module_the_old_code_needed\n")
    git(pytester.path, "init", "-q", "-b", "main")
    commit_all(pytester.path, "a baseline whose conftest does not import here")
    pytester.makeconftest("")
    commit_all(pytester.path, "the fix")

    result = pytester.runpytest(*FAST, "--tfperf-against=HEAD~1")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert ("test_x.py::test_x: not measured beside HEAD~1: the partner session in HEAD~1 could not start: its tests "
            "do not import in that revision (conftest.py: ModuleNotFoundError: No module named "
            "'module_the_old_code_needed'): install what that revision imports, or pass --tfperf-against=REV naming a "
            "revision whose tests import; judged as without --tfperf-against") in out.splitlines()
    assert "Traceback" not in out and "import module_the_old_code_needed" not in out


def test_a_named_revision_needs_git_and_stops_the_run_when_it_is_missing(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_x=MODULE)
    no_git(pytester.path, monkeypatch)
    result = pytester.runpytest("--tfperf", "--tfperf-against=origin/main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tfperf-against=origin/main: not a directory, and git, which would read it as a "
                                 "revision, is not installed (or not on PATH): install git*"])
