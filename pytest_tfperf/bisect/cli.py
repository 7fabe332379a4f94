"""``tfperf-bisect GOOD BAD [PYTEST ARGS...]``: the first commit that made the selected tests slower.

A binary search over the first-parent commits after GOOD up to BAD
(``bisect.search``), each step one ``pytest --tfperf
--tfperf-against=GOOD`` session of that commit's worktree
(``bisect.steps``): the paired rule with the gate's confirmation
policy. The checkout it runs in is never touched. The first bad commit is
then explained against its parent: one more session, under
``--tfperf-explain``, of the regressed tests (``--no-explain`` skips it; when
it cannot explain, one line says why and the result stands).

Exit status: 0 the search ended (first bad commit found, or nothing to
bisect, or the candidates named when skips hid it); 2 it could not run (bad
revisions, a shallow clone, BAD could not be judged, a GOOD that does not
build); 130 interrupted by Ctrl-C or SIGTERM (its worktrees removed; during
the explained step, after the result is printed).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TextIO

from pytest_tfperf.bisect.search import (
    BisectResult,
    Commit,
    Judgement,
    ParentExplanation,
    Step,
    bisect,
    parent_of,
    planned_steps,
)
from pytest_tfperf.bisect.report_text import duration, plan_line, result_dict, result_lines, step_line
from pytest_tfperf.bisect.steps import (
    BisectError,
    StepRunner,
    Worktrees,
    commit_info,
    first_parent_range,
    repository_root,
    resolve,
)
from pytest_tfperf.storage.atomic_files import atomic_write_text

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
# The explained step's limit: generous (it measures the regressed tests once more, confirms, then profiles both
# sides one after the other), but a bound, so a hung profiler never holds the search's result back.
EXPLAIN_TIMEOUT_BASE_S = 300.0
EXPLAIN_TIMEOUT_STEPS = 3.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfperf-bisect",
        description="Find the first commit between GOOD and BAD (first-parent history) at which the selected "
                    "tests got slower: each step runs pytest --tfperf --tfperf-against=GOOD in a worktree of "
                    "that commit and reads the paired verdict. Your checkout is not touched.",
        epilog="Everything after GOOD and BAD goes to pytest: test paths, -k, --tfperf-tolerance=10%, "
               "--tfperf-budget=1 ... exit status: 0 search ended, 2 could not search, 130 interrupted",
    )
    parser.add_argument("--json", metavar="PATH", type=Path, default=None,
                        help="write the result (first bad commit, verdict, every step) as JSON")
    parser.add_argument("--build", metavar="CMD", default=None,
                        help="shell command run in each commit's worktree before measuring (e.g. "
                             "'pip install -e . --no-deps'); a commit where it fails is skipped")
    parser.add_argument("--no-explain", action="store_true",
                        help="only find the commit: skip the explained step (the first bad commit measured beside "
                             "its parent under --tfperf-explain, which says where the time went)")
    parser.add_argument("good", metavar="GOOD", help="a revision that is not slow (the reference of every step)")
    parser.add_argument("bad", metavar="BAD", help="a revision that is slow (HEAD, main, a release branch)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="PYTEST ARGS",
                        help="the selection and options for pytest (a leading -- is dropped)")
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, cwd: Path | None = None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    pytest_args = tuple(args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args)

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    here = (cwd or Path.cwd()).resolve()
    try:
        repo = repository_root(here)
        good_sha = resolve(repo, args.good, "GOOD")
        bad_sha = resolve(repo, args.bad, "BAD")
        commits = first_parent_range(repo, good_sha, bad_sha, args.good, args.bad)
    except BisectError as exc:
        say(f"tfperf-bisect: error: {exc}")
        return EXIT_ERROR
    explain = not args.no_explain
    say(f"tfperf-bisect: {plan_line(args.good, args.bad, len(commits), planned_steps(len(commits)), explain=explain)}")
    worktrees = Worktrees(repo)
    # A cancelled CI job sends SIGTERM: clean up as for Ctrl-C. (Off the main thread, signals cannot be set.)
    previous = _on_sigterm_interrupt()
    try:
        result = _search(args, repo, here, good_sha, commits, pytest_args, worktrees, say)
    except KeyboardInterrupt:
        worktrees.close()
        say("tfperf-bisect: interrupted: the search stopped and its worktrees were removed "
            "(your checkout was not touched)")
        return EXIT_INTERRUPTED
    except BisectError as exc:
        worktrees.close()
        say(f"tfperf-bisect: error: {exc}")
        return EXIT_ERROR
    finally:
        worktrees.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]
    bisected, explanation, interrupted = result
    for line in result_lines(bisected, args.good, args.bad, explanation):
        say(line)
    if args.json is not None:
        doc = result_dict(bisected, args.good, args.bad, good_sha=good_sha, bad_sha=bad_sha, selection=pytest_args,
                          explanation=explanation)
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(args.json, json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            say(f"tfperf-bisect: error: --json {args.json}: {exc}")
            return EXIT_ERROR
    if interrupted:
        say("tfperf-bisect: interrupted during the explained step: the result above stands, its worktrees were "
            "removed")
        return EXIT_INTERRUPTED
    return EXIT_ERROR if bisected.outcome == "untestable" else EXIT_OK


def _on_sigterm_interrupt() -> object:
    """SIGTERM raises KeyboardInterrupt from here on; returns the handler it replaced (None off the main thread)."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, interrupt)


def _search(args: argparse.Namespace, repo: Path, here: Path, good_sha: str, commits: list[Commit],
            pytest_args: tuple[str, ...], worktrees: Worktrees,
            say: Callable[[str], None]) -> tuple[BisectResult, ParentExplanation | None, bool]:
    """The search, then (unless --no-explain) the explained step: (result, explanation, interrupted in it)."""
    good_tree = worktrees.add(good_sha, "good")
    runner = StepRunner(repo=repo, worktrees=worktrees, good_tree=good_tree, pytest_args=pytest_args,
                        invocation_dir=here, build=args.build)
    if args.build:
        code, output = runner.build_tree(good_tree)
        if code != 0:
            last = next((ln for ln in reversed(output.splitlines()) if ln.strip()), "no output")
            raise BisectError(f"GOOD ({args.good}) does not build: {args.build!r} exited {code}: {last.strip()[:200]}")

    def judge(commit: Commit) -> Judgement:
        judgement = runner(commit)
        if runner.expected is None and judgement.kind == "bad":
            # The search follows the tests that regressed at BAD; the others are measured but do not decide.
            runner.expected = tuple(t.test_id for t in judgement.tests if t.status == "regressed")
        return judgement

    def on_step(step: Step) -> None:
        say(f"tfperf-bisect: {step_line(step)}")
        if step.number == 1 and step.judgement.kind == "bad":
            plan = plan_line(args.good, args.bad, len(commits), planned_steps(len(commits)), step.elapsed_s,
                             explain=not args.no_explain)
            say(f"tfperf-bisect: {plan}")

    result = bisect(commits, judge, on_step=on_step)
    parent = None if args.no_explain else parent_of(result, commits, commit_info(repo, good_sha))
    if parent is None or result.first_bad is None or result.verdict is None:
        return result, None, False
    tests = [t.test_id for t in result.verdict.tests if t.status == "regressed"]
    timeout_s = EXPLAIN_TIMEOUT_BASE_S + EXPLAIN_TIMEOUT_STEPS * max(s.elapsed_s for s in result.steps)
    say(f"tfperf-bisect: explaining {result.first_bad.short} against its parent {parent.short}: one paired session "
        f"with --tfperf-explain of {', '.join(tests)} (at most {duration(timeout_s)})")
    began = time.monotonic()
    interrupted = False
    try:
        explanation = runner.explain(result.first_bad, parent, tests, good_sha=good_sha, timeout_s=timeout_s)
    except KeyboardInterrupt:
        # The search's result is known: Ctrl-C in the explained step loses the explanation only.
        interrupted = True
        explanation = ParentExplanation(parent=parent, elapsed_s=time.monotonic() - began,
                                        reason="the explained step was interrupted (Ctrl-C or SIGTERM)")
    except BisectError as exc:  # a worktree that git could not add
        explanation = ParentExplanation(parent=parent, elapsed_s=time.monotonic() - began, reason=str(exc))
    said = f"no explanation: {explanation.reason}" if explanation.reason else \
        "done (its lines are under the first bad commit below)"
    say(f"tfperf-bisect: explained step: {said} [{duration(explanation.elapsed_s)}]")
    return result, explanation, interrupted


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
