"""tfperf-bisect end to end: real git repositories made here, real step sessions beside GOOD, the user's tree untouched.

Each repository's test is a cheap Python loop whose size is set per commit;
planted slowdowns are 10x and 1000x and the tolerance is 90% (the plugin
tests' fast settings), so nothing here depends on the speed of the machine.
How well the search does on real, 10-20% TensorFlow slowdowns is measured in
benchmarks/bisect_validation.py.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_tfperf.bisect.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, main
from pytest_tfperf.bisect.select_plugin import ONLY_ENV
from pytest_tfperf.bisect.steps import SELECT_PLUGIN, StepRunner, Worktrees, commit_info, first_parent_range

# A red explained step profiles one pair of processes: how many pairs an explanation tests across is
# test_explain_against.py's (three cost about 30 s more a red test).
FAST = ["--tfperf-budget=0.3", "--tfperf-tolerance=90%", "--tfperf-explain-pairs=1"]
BASE, SLOW10, SLOW1000 = 1_000, 10_000, 1_000_000

MODULE = """# commit {index}
N = {n}

def test_loop(tfperf):
    tfperf(lambda: sum(range(N)), items=1)
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def make_repo(path: Path, sizes: list[int | None], special: dict[int, str] | None = None) -> list[str]:
    """One commit per entry: the loop's size (None: the test file deleted); ``special`` replaces a commit's module."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "pytest.ini").write_text("[pytest]\n")
    shas = []
    for index, n in enumerate(sizes):
        module = path / "test_work.py"
        text = (special or {}).get(index)
        if n is None:
            module.unlink(missing_ok=True)
        else:
            module.write_text(text if text is not None else MODULE.format(index=index, n=n))
        (path / "history.txt").write_text(f"commit {index}\n")
        git(path, "add", "-A")
        git(path, "commit", "-qm", f"commit {index}")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def bisect(repo: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), out=out, cwd=repo)
    return code, out.getvalue()


def worktrees(repo: Path) -> list[str]:
    return [ln for ln in git(repo, "worktree", "list").splitlines() if ln]


# A session run with --tfperf-explain stops at once: the explained step fails, as where the profiler is unusable.
NO_EXPLAIN_CONFTEST = """import pytest

def pytest_configure(config):
    if config.getoption("--tfperf-explain"):
        raise pytest.UsageError("the profiler is unusable on this runner")
"""


def test_the_first_bad_commit_is_found_and_the_dirty_checkout_is_left_as_it_was(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "conftest.py").write_text(NO_EXPLAIN_CONFTEST)
    shas = make_repo(repo, [BASE] * 5 + [SLOW1000] * 3)  # commit 5 makes test_loop 1000x slower
    (repo / "test_work.py").write_text("uncommitted edit\n")  # a dirty tree: must survive untouched
    (repo / "scratch.txt").write_text("untracked\n")
    status, head = git(repo, "status", "--porcelain"), git(repo, "rev-parse", "HEAD")

    code, out = bisect(repo, "--json", str(tmp_path / "b.json"), shas[0], "HEAD", "--", *FAST, "test_work.py")

    assert code == EXIT_OK, out
    assert "about 5 paired steps, then one explained step (BAD against GOOD first" in out.splitlines()[0]
    assert "about 5 paired steps of about" in out  # costed once the first step is measured
    date = git(repo, "log", "-1", "--format=%aI", shas[5])
    assert f"first bad commit: {shas[5]}\n  commit 5\n  author date {date}\n" in out
    assert re.search(r"test_work.py::test_loop: throughput -\d+\.\d% \(99% bounds .*\) against GOOD, paired verdict "
                     r"REGRESSED: throughput: .*\n", out), out
    # The explained step (against commit 4, in the range) failed: one line, the result stands.
    why = [line for line in out.splitlines() if line.startswith("  no explanation against its parent")]
    assert why and why[0].startswith(f"  no explanation against its parent {shas[4][:10]}: "), out
    assert "the profiler is unusable on this runner" in why[0], out
    assert re.search(r"paired steps \(planned about 5\) over 7 commits, then one explained step, in \d+ s \(search "
                     r"\d+ s, explained step \d+ s\)", out)
    assert "| step | commit | subject | verdict against GOOD | throughput change (99% bounds) | time |" in out
    assert f"| 1 | {shas[7][:10]} | commit 7 | BAD (regressed) |" in out
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["outcome"] == "found" and doc["first_bad"]["sha"] == shas[5] and doc["first_bad"]["author_date"] == date
    assert doc["explanation"]["against_parent"]["sha"] == shas[4] and doc["explanation"]["tests"] == []
    assert doc["explanation"]["reason"] == ("the explained session wrote no results (usage error: ERROR: the "
                                            "profiler is unusable on this runner)")
    assert doc["bad"] == {"rev": "HEAD", "sha": shas[7]}
    table = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(table) == len(doc["steps"]) and doc["steps"][0]["verdict"] == "bad"
    assert [s["commit"][:10] for s in doc["steps"]] == [line.split(" | ")[1] for line in table]
    assert f"{len(doc['steps'])} paired steps (planned about 5) over 7 commits, then one explained step, in" in out
    # The user's checkout: same HEAD, same edits, no worktree left behind.
    assert git(repo, "status", "--porcelain") == status and git(repo, "rev-parse", "HEAD") == head
    assert (repo / "test_work.py").read_text() == "uncommitted edit\n"
    assert len(worktrees(repo)) == 1


TF_MODULE = """# commit {index}
import tensorflow as tf

x = tf.random.uniform((64, 64))
big = tf.random.uniform((384, 384))

@tf.function
def step(x):
    with tf.name_scope("body"):
        y = tf.reduce_sum(tf.matmul(x, x))
{planted}    return y

def test_chain(tfperf):
    tfperf(lambda: step(x))
"""
PLANTED = """    with tf.name_scope("planted"):
        y += tf.reduce_sum(tf.matmul(tf.matmul(big, big), big))
"""


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_the_first_bad_commit_is_explained_against_its_parent_by_tensorflows_profile(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    # GOOD, then the commit that plants a named matmul: one paired step finds it, its parent is GOOD.
    shas = make_repo(repo, [BASE, BASE], special={0: TF_MODULE.format(index=0, planted=""),
                                                  1: TF_MODULE.format(index=1, planted=PLANTED)})
    code, out = bisect(repo, "--json", str(tmp_path / "b.json"), shas[0], shas[1], "--", *FAST, "test_work.py")
    assert code == EXIT_OK, out
    assert "about 1 paired step, then one explained step (BAD against GOOD first" in out.splitlines()[0]
    assert f"tfperf-bisect: explaining {shas[1][:10]} against its parent {shas[0][:10]}: one paired session with " \
           "--tfperf-explain of test_work.py::test_chain" in out
    result = out[out.index(f"first bad commit: {shas[1]}"):]
    block = result[:result.index("\n\n")].splitlines()  # the first bad commit's lines, up to the table
    label = block.index(f"  explained against its parent {shas[0][:10]} ('commit 0'), one session with "
                        "--tfperf-explain:")
    assert block[label + 1] == "    test_work.py::test_chain:"
    assert block[label + 2].startswith("      where the time went: +")
    assert any(re.match(r"        planted \(MatMul family\) (appeared|grew) \+", ln) for ln in block[label + 3:])
    assert not any("tensorboard --logdir" in ln for ln in block)  # the raw profiles went with the worktrees
    took = r"(\d+ s|[\d.]+ min)"  # a loaded machine takes minutes: either unit is right
    assert re.search(rf"1 paired step \(planned about 1\) over 1 commits, then one explained step, in {took} "
                     rf"\(search {took}, explained step {took}\)", out)
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["version"] == 2
    explanation = doc["explanation"]
    assert explanation["against_parent"]["sha"] == shas[0] and explanation["reason"] == ""
    [test] = explanation["tests"]
    assert test["test_id"] == "test_work.py::test_chain"
    assert test["lines"] == [ln[6:] for ln in block[label + 2:] if ln.startswith("      ")]
    assert test["explanation"]["causes"][0]["key"] == "layer:planted"
    assert doc["elapsed_s"] == pytest.approx(doc["search_elapsed_s"] + explanation["elapsed_s"], abs=0.01)
    assert len(worktrees(repo)) == 1


def test_commits_that_do_not_import_lack_the_test_or_do_not_build_are_skipped(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    sizes: list[int | None] = [BASE, BASE, BASE, None, BASE, BASE, SLOW1000, SLOW1000]
    shas = make_repo(repo, sizes, special={2: "import no_such_module_here\n"})
    # Commit 2 does not import, commit 3 lacks the test, commit 4 does not build: the search steps around them
    # (the middle, 3, then its neighbours 2 and 4) and still finds commit 6.
    build = (f"{sys.executable} -c \"import pathlib, sys; "
             f"sys.exit('build broken' if 'commit 4' in pathlib.Path('history.txt').read_text() else 0)\"")
    code, out = bisect(repo, "--no-explain", "--build", build, shas[0], shas[7], "--", *FAST, "test_work.py")
    assert code == EXIT_OK, out
    assert f"first bad commit: {shas[6]}" in out
    assert f"{shas[2][:10]} 'commit 2'" in out and "skipped: the selected tests do not exist or do not import here" \
                                                     " (collection failed: ModuleNotFoundError: No module named " \
                                                     "'no_such_module_here')" in out
    assert f"{shas[3][:10]} 'commit 3'" in out and "(usage error: ERROR: file or directory not found: " \
                                                     "test_work.py)" in out
    assert f"{shas[4][:10]} 'commit 4'" in out and "skipped: does not build: the build command exited 1: build " \
                                                     "broken" in out
    assert len(worktrees(repo)) == 1


def test_two_regressions_report_the_first_crossing_and_name_the_other(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_repo(repo, [BASE] * 3 + [SLOW10] * 3 + [SLOW1000] * 2)  # 10x at commit 3, 1000x at commit 6
    code, out = bisect(repo, "--no-explain", "--json", str(tmp_path / "b.json"), shas[0], shas[7], "--", *FAST,
                       "test_work.py")
    assert code == EXIT_OK, out
    assert f"first bad commit: {shas[3]}" in out
    # --no-explain: the commit only, no explained step planned, run or written.
    assert "explained" not in out and "explanation" not in out
    assert re.search(r"\n\d+ paired steps \(planned about \d+\) over 7 commits in \d+ s\n", out)
    assert re.search(r"another regression was seen: test_work.py::test_loop measured -(99\.9|100\.0)% at "
                     rf"{shas[7][:10]} against -\d+\.\d% at the first bad commit, so a further slowdown lies after", out)
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["explanation"] is None and doc["elapsed_s"] == doc["search_elapsed_s"]
    further = doc["further"][0]
    after, at = shas.index(further["after"]), shas.index(further["at_or_before"])
    assert 3 <= after < 6 <= at


def test_no_regression_means_nothing_to_bisect_after_one_step(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_repo(repo, [BASE] * 6)
    code, out = bisect(repo, "--json", str(tmp_path / "b.json"), shas[0], shas[5], "--", *FAST, "test_work.py")
    assert code == EXIT_OK, out
    assert "BAD is not slower than GOOD: nothing to bisect (no selected test regressed beyond its tolerance" in out
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["outcome"] == "nothing" and len(doc["steps"]) == 1 and doc["message"].startswith(
        "BAD is not slower than GOOD: nothing to bisect")


def test_a_test_good_lacks_cannot_be_bisected_and_says_why(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_repo(repo, [None, BASE, SLOW1000])
    code, out = bisect(repo, shas[0], shas[2], "--", *FAST, "test_work.py")
    assert code == EXIT_ERROR
    assert f"cannot bisect: BAD ({shas[2]}) could not be judged against GOOD ({shas[0]}): not measured beside " \
           "GOOD: no selected test" in out


def test_a_shallow_clone_says_which_fetch_brings_the_history(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    shas = make_repo(origin, [BASE] * 6)
    git(origin, "tag", "v0", shas[0])
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{origin}", str(clone))

    code, out = bisect(clone, shas[0], "HEAD")
    assert code == EXIT_ERROR
    assert out.strip() == (f"tfperf-bisect: error: GOOD {shas[0]} is not in this shallow clone: fetch the history "
                           f"first, e.g. git fetch --unshallow (or git fetch origin {shas[0]} for a branch or tag)")

    git(clone, "fetch", "-q", "--depth", "1", "origin", "tag", "v0")  # GOOD is here now, its history still cut
    code, out = bisect(clone, "v0", "HEAD")
    assert code == EXIT_ERROR
    date = git(origin, "log", "-1", "--format=%cI", shas[0])[:10]
    assert out.strip() == ("tfperf-bisect: error: this is a shallow clone and its history stops before GOOD (v0): "
                           f"run git fetch --unshallow, or git fetch --shallow-since={date} to fetch only back to "
                           "GOOD (or git fetch --deepen=N with N the commits missing)")


def test_bad_revisions_and_a_good_that_does_not_build_are_one_line_errors(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_repo(repo, [BASE] * 3)
    assert bisect(repo, "no-such-rev", "HEAD") == (
        EXIT_ERROR, f"tfperf-bisect: error: GOOD no-such-rev: not a commit of the repository at {repo}\n")
    assert bisect(repo, shas[2], shas[0])[1] == (
        f"tfperf-bisect: error: GOOD ({shas[2]}) is not an ancestor of BAD ({shas[0]}): bisect needs GOOD in BAD's "
        "history (swap them if BAD is the older one)\n")
    code, out = bisect(repo, "--build", "echo cannot compile; exit 3", shas[0], shas[2])
    assert code == EXIT_ERROR and out.splitlines()[-1] == (
        f"tfperf-bisect: error: GOOD ({shas[0]}) does not build: 'echo cannot compile; exit 3' exited 3: cannot compile")
    assert len(worktrees(repo)) == 1
    assert bisect(tmp_path, "a", "b") == (
        EXIT_ERROR, f"tfperf-bisect: error: {tmp_path} is not inside a git repository: run tfperf-bisect in the "
                    "repository whose history holds the regression\n")


def test_an_explained_step_past_its_limit_is_stopped_and_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shas = make_repo(repo, [BASE, SLOW1000])
    hang = tmp_path / "hanging-python"  # stands in for the step's python: a session that never ends
    # (SIGINT as a terminal gives it: a suite run in the background passes SIGINT on ignored.)
    hang.write_text(f"#!{sys.executable}\nimport signal, time\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                    "time.sleep(60)\n")
    hang.chmod(0o755)
    commits = first_parent_range(repo, shas[0], shas[1], "GOOD", "BAD")
    with Worktrees(repo) as trees:
        runner = StepRunner(repo=repo, worktrees=trees, good_tree=trees.add(shas[0], "good"),
                            pytest_args=("--tfperf-tolerance=90%", "-k", "loop", "test_work.py"), invocation_dir=repo,
                            python=str(hang))
        began = time.monotonic()
        explained = runner.explain(commits[0], commit_info(repo, shas[0]), ["test_work.py::test_loop"],
                                   good_sha=shas[0], timeout_s=1.0)
        assert time.monotonic() - began < 30
        assert len(worktrees(repo)) == 2  # GOOD's, until the search ends; the first bad commit's is removed
    assert explained.reason == "the explained session ran past its limit of 1 s and was stopped"
    assert explained.tests == () and explained.parent.sha == shas[0] and explained.elapsed_s >= 1.0
    assert explained.rerun == (f"git checkout {shas[1][:10]} && pytest --tfperf --tfperf-explain "
                               "--tfperf-against=HEAD~1 --tfperf-tolerance=90% test_work.py::test_loop")
    assert len(worktrees(repo)) == 1


def test_the_explained_step_runs_only_the_tests_it_names(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_sel="""
        import pytest

        def test_a(): pass
        def test_b(): pass
        @pytest.mark.parametrize("n", [1, 2])
        def test_c(n): pass
    """)
    # test_a; test_c[2]'s compare() variant "slow" (its results id test_c[2-slow]); test_b is not named.
    monkeypatch.setenv(ONLY_ENV, "test_sel.py::test_a\ntest_sel.py::test_c[2-slow]\n")
    result = pytester.runpytest("-p", SELECT_PLUGIN, "-v")
    result.assert_outcomes(passed=2, deselected=2)
    result.stdout.fnmatch_lines(["*test_sel.py::test_a PASSED*", "*test_sel.py::test_c?2? PASSED*"])
    monkeypatch.delenv(ONLY_ENV)
    pytester.runpytest("-p", SELECT_PLUGIN).assert_outcomes(passed=4)  # without the variable: nothing deselected


# SIGTERM (a cancelled CI job) takes the same path as Ctrl-C, through its handler: it is sent during the explained
# step below, which checks the same cleanup, so each signal is tested once.
@pytest.mark.parametrize("sig", [signal.SIGINT], ids=["ctrl-c"])
def test_ctrl_c_or_a_cancelled_job_removes_the_worktrees_and_stops_the_step(tmp_path: Path, sig: int) -> None:
    repo = tmp_path / "repo"
    shas = make_repo(repo, [BASE, BASE, SLOW1000])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    # A long budget: the first step is still measuring when Ctrl-C comes.
    proc = subprocess.Popen([sys.executable, "-m", "pytest_tfperf.bisect.cli", shas[0], shas[2], "--",
                             "--tfperf-budget=30", "--tfperf-tolerance=90%", "test_work.py"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # A suite started in the background inherits SIGINT ignored: give the child a terminal's.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while len(worktrees(repo)) < 3 and time.monotonic() < deadline:  # GOOD's and the first step's
        time.sleep(0.2)
    assert len(worktrees(repo)) == 3, "the step never started"
    time.sleep(2.0)  # inside the step's pytest session
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, out
    assert "tfperf-bisect: interrupted: the search stopped and its worktrees were removed (your checkout was not " \
           "touched)" in out
    assert len(worktrees(repo)) == 1
    assert list(scratch.iterdir()) == []  # the temporary directory of the worktrees is gone too


# A session run with --tfperf-explain hangs (until interrupted): Ctrl-C comes during the explained step.
HANGING_EXPLAIN_CONFTEST = """import signal, time

def pytest_configure(config):
    if config.getoption("--tfperf-explain"):
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a suite in the background passes it ignored
        time.sleep(120)
"""


def test_a_cancelled_job_during_the_explained_step_still_prints_the_result(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "conftest.py").write_text(HANGING_EXPLAIN_CONFTEST)
    shas = make_repo(repo, [BASE, SLOW1000])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "pytest_tfperf.bisect.cli", "--json", str(tmp_path / "b.json"),
                             shas[0], shas[1], "--", *FAST, "test_work.py"],
                            cwd=repo, env=dict(os.environ, TMPDIR=str(scratch)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("tfperf-bisect: explaining"):
            break
    time.sleep(1.0)  # inside the explained session
    proc.send_signal(signal.SIGTERM)
    out = "".join(seen) + proc.communicate(timeout=60)[0]
    assert proc.returncode == EXIT_INTERRUPTED, out
    assert f"first bad commit: {shas[1]}" in out
    assert f"  no explanation against its parent {shas[0][:10]}: the explained step was interrupted (Ctrl-C or " \
           "SIGTERM)" in out
    assert out.rstrip().endswith("tfperf-bisect: interrupted during the explained step: the result above stands, "
                                 "its worktrees were removed")
    assert json.loads((tmp_path / "b.json").read_text())["first_bad"]["sha"] == shas[1]
    assert len(worktrees(repo)) == 1
    assert list(scratch.iterdir()) == []  # the temporary directory of the worktrees is gone too


@pytest.mark.parametrize("argv", [["--help"]])
def test_the_command_documents_itself(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    assert "Everything after GOOD and BAD goes to pytest" in capsys.readouterr().out
