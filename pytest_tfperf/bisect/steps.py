"""``tfperf-bisect``'s git and processes: the range, the worktrees, and one step as one paired pytest session.

A step is the gate itself: ``pytest --tfperf --tfperf-against=<GOOD's tree>``
run in a worktree of the step's commit, so each verdict is the paired rule
with the gate's confirmation beside a fresh partner process, read back from
``--tfperf-json`` (``judgement_from_results``). Nothing here measures.

Once the first bad commit is found, one more session explains it
(``StepRunner.explain``): the first bad commit's worktree beside its parent's,
under ``--tfperf-explain``, the regressed tests only (``bisect.select_plugin``), its
explanations read back from the same results file. It is bounded in time and
never fails the search: when it cannot explain, it says why.

The user's checkout is never touched: GOOD and every step get a ``git
worktree`` under a temporary directory of their own (``Worktrees``), each
step's removed when it is judged and all of them, with the directory, when
the search ends, is interrupted (Ctrl-C) or fails.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from pytest_tfperf.bisect.search import Commit, ExplainedTest, Judgement, PairedChange, ParentExplanation
from pytest_tfperf.bisect.select_plugin import ONLY_ENV
from pytest_tfperf.session import git_tree
from pytest_tfperf.session.git_tree import argument_in_tree, mapped_directory, pytest_command, tree_environment
from pytest_tfperf.storage.fields import StorageError
from pytest_tfperf.storage.results_json import ResultsDocument, load_results

# pytest's exit codes after which no results can be expected: interrupted (collection errors: a test module
# that does not import), internal error, usage error (a path that does not exist), no tests collected.
SELECT_PLUGIN = "pytest_tfperf.bisect.select_plugin"  # the explained step runs the regressed tests only
_NOT_COLLECTED = {2: "collection failed", 3: "pytest crashed", 4: "usage error", 5: "no tests collected"}


class BisectError(Exception):
    """The search cannot run (bad revisions, a shallow clone, no git): one line for the user."""


_NO_GIT = "git is not installed: tfperf-bisect needs it to check out commits"


@contextmanager
def _said_as_bisect_errors() -> Iterator[None]:
    """``session/git_tree``'s errors, in tfperf-bisect's words: one line for the user (``BisectError``)."""
    try:
        yield
    except git_tree.GitMissing:
        raise BisectError(_NO_GIT) from None
    except git_tree.GitError as exc:
        raise BisectError(str(exc)) from None


def git(repo: Path, *args: str) -> str:
    with _said_as_bisect_errors():
        return git_tree.git(repo, *args)


def repository_root(start: Path) -> Path:
    """The repository holding ``start``; BisectError outside one (or without git)."""
    root = git_tree.repository_root(start)
    if root is None:
        raise BisectError(f"{start} is not inside a git repository: run tfperf-bisect in the repository "
                          "whose history holds the regression")
    return root


def is_shallow(repo: Path) -> bool:
    return git(repo, "rev-parse", "--is-shallow-repository").strip() == "true"


def resolve(repo: Path, rev: str, role: str) -> str:
    """The commit a revision names; in a shallow clone, which ``git fetch`` brings it."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except BisectError:
        if is_shallow(repo):
            raise BisectError(f"{role} {rev} is not in this shallow clone: fetch the history first, "
                              f"e.g. git fetch --unshallow (or git fetch origin {rev} for a branch or tag)") from None
        raise BisectError(f"{role} {rev}: not a commit of the repository at {repo}") from None


def first_parent_range(repo: Path, good: str, bad: str, good_rev: str, bad_rev: str) -> list[Commit]:
    """The first-parent commits after GOOD up to BAD, oldest first; why not, if GOOD is not an ancestor of BAD."""
    with _said_as_bisect_errors():
        ancestor = git_tree.run_git(repo, "merge-base", "--is-ancestor", good, bad)
    if ancestor.returncode != 0:
        if is_shallow(repo):
            date = git(repo, "log", "-1", "--format=%cI", good).strip()[:10]
            raise BisectError(
                f"this is a shallow clone and its history stops before GOOD ({good_rev}): run "
                f"git fetch --unshallow, or git fetch --shallow-since={date} to fetch only back to GOOD "
                "(or git fetch --deepen=N with N the commits missing)")
        raise BisectError(f"GOOD ({good_rev}) is not an ancestor of BAD ({bad_rev}): bisect needs GOOD in BAD's "
                          "history (swap them if BAD is the older one)")
    out = git(repo, "log", "--first-parent", "--reverse", "--format=%H%x00%s%x00%aI", f"{good}..{bad}")
    commits = [Commit(*line.split("\x00", 2)) for line in out.splitlines() if line]
    if not commits:
        raise BisectError(f"GOOD ({good_rev}) and BAD ({bad_rev}) are the same commit: nothing to bisect")
    return commits


def commit_info(repo: Path, sha: str) -> Commit:
    return Commit(*git(repo, "log", "-1", "--format=%H%x00%s%x00%aI", sha).rstrip("\n").split("\x00", 2))


class Worktrees:
    """Detached worktrees under one temporary directory, all removed on ``close`` (also after Ctrl-C)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.root = Path(tempfile.mkdtemp(prefix="tfperf-bisect-"))
        self._paths: list[Path] = []

    def add(self, sha: str, name: str) -> Path:
        path = self.root / name
        self._paths.append(path)
        with _said_as_bisect_errors():
            # --force: a step's name is used again (a commit judged twice); git may still have it registered.
            return git_tree.add_worktree(self.repo, path, sha, force=True)

    def remove(self, path: Path) -> None:
        git_tree.remove_worktree(self.repo, path)
        if path in self._paths:
            self._paths.remove(path)

    def close(self) -> None:
        for path in list(self._paths):
            self.remove(path)
        git_tree.prune_worktrees(self.repo)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class StepTimeout(Exception):
    """A step's command ran past its time limit; its process group was stopped."""


def _run(cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str], shell: bool = False,
         timeout_s: float | None = None) -> tuple[int, str]:
    """Run a command in its own process group; on any interruption the whole group is killed before re-raising.

    Past ``timeout_s`` the group is stopped as on Ctrl-C and ``StepTimeout`` raised.
    """
    proc = subprocess.Popen(cmd[0] if shell else list(cmd), cwd=cwd, env=dict(env), shell=shell,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        raise StepTimeout(f"ran past its limit of {timeout_s:.0f} s and was stopped") from None
    except BaseException:
        # Ctrl-C reaches this process only (the step has its own session): pass it on to the step and its
        # partner so pytest ends them as it does on Ctrl-C, then kill what is left after a grace period.
        _stop_group(proc)
        raise
    return proc.returncode, out


def _stop_group(proc: subprocess.Popen[str], grace_s: float = 10.0) -> None:
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.communicate(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def why_not_collected(output: str) -> str:
    """The line of pytest's output that says why nothing ran (an import error, a missing path)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for pattern in (r"^E\s+\w*(Error|Exception)\b", r"file or directory not found", r"^ERROR", r"no tests ran"):
        hit = next((ln for ln in lines if re.search(pattern, ln)), None)
        if hit is not None:
            return re.sub(r"^E\s+", "", hit)[:300]
    return (lines[-1] if lines else "no output")[:300]


def _test_change(test_id: str, verdict: Mapping[str, object]) -> PairedChange:
    metrics = [m for m in verdict.get("metrics", []) if isinstance(m, Mapping)]  # type: ignore[attr-defined,union-attr]
    throughput = next((m for m in metrics if m.get("metric") == "throughput"), None)
    regressed = next((m for m in metrics if m.get("status") == "regressed"), None)
    shown = regressed or throughput or {}

    def number(key: str) -> float | None:
        value = (throughput or {}).get(key)
        return float(value) if isinstance(value, (int, float)) else None

    return PairedChange(test_id=test_id, status=str(verdict.get("status", "unavailable")),
                        change=number("relative_change"), ci_low=number("ci_low"), ci_high=number("ci_high"),
                        message=str(shown.get("message", "")), threshold=number("decision_threshold"))


def _rules_out_a_slowdown(test: PairedChange) -> bool:
    """A noisy verdict whose 99% interval still lies wholly above the decision threshold: not slower, for sure."""
    return test.ci_low is not None and test.threshold is not None and test.ci_low > test.threshold


def judgement_from_results(doc: ResultsDocument, output: str, expected: Sequence[str] | None) -> Judgement:
    """A step's judgement from its session's results: bad if a selected test regressed beside GOOD.

    Only verdicts measured beside GOOD count (a test GOOD lacks is judged
    without the partner, against stored baselines: not a bisect verdict).
    ``expected`` are the tests BAD was judged on; one of them not judged here
    (missing, failing before measuring, its partner lost) makes the step a
    skip unless another one regressed.
    """
    tests = []
    for test_id in doc.test_ids:
        verdict = doc.verdict(test_id)
        if verdict is None or not doc.compared_with.get(test_id, "").startswith("measured beside"):
            continue
        tests.append(_test_change(test_id, verdict))
    judged = {t.test_id for t in tests}
    if expected is not None:
        tests = [t for t in tests if t.test_id in set(expected)]
    if any(t.status == "regressed" for t in tests):
        return Judgement("bad", tests=tuple(tests))
    missing = [t for t in (expected or ()) if t not in judged]
    if not tests or missing:
        notice = next((ln.strip() for ln in output.splitlines() if "not measured beside" in ln
                       or "measured beside" in ln and "figures were lost" in ln), "")
        what = ", ".join(missing) if missing else "no selected test"
        reason = f"not measured beside GOOD: {what}" + (f" ({notice})" if notice else
                                                         f" ({why_not_collected(output)})")
        return Judgement("skip", reason=reason, tests=tuple(tests))
    # "Noisy": the comparison could not have caught a slowdown of the full tolerance. For the search that is
    # no answer, unless the interval itself rules out a slowdown beyond the decision threshold.
    noisy = [t for t in tests if t.status == "noisy" and not _rules_out_a_slowdown(t)]
    if noisy:
        return Judgement("skip", reason=f"too noisy to decide: {noisy[0].message}", tests=tuple(tests),
                         undecided=True)
    return Judgement("good", tests=tuple(tests))


@dataclass
class StepRunner:
    """Judges one commit: a worktree of it, the build command, one paired pytest session beside GOOD."""

    repo: Path
    worktrees: Worktrees
    good_tree: Path
    pytest_args: tuple[str, ...]
    invocation_dir: Path  # where the user ran the command: the same directory is used in every tree
    build: str | None = None
    base_env: Mapping[str, str] | None = None
    expected: tuple[str, ...] | None = None  # set after BAD's step: the tests it was judged on
    python: str = sys.executable
    last_output: str = ""

    def build_tree(self, tree: Path) -> tuple[int, str]:
        assert self.build is not None
        return _run([self.build], cwd=tree, env=self._env(tree), shell=True)

    def _env(self, tree: Path) -> dict[str, str]:
        env = tree_environment(tree, dict(self.base_env if self.base_env is not None else os.environ))
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # Whatever a step leaves in its temporary directory (a killed partner's scratch) goes with the worktrees.
        scratch = self.worktrees.root / "tmp"
        scratch.mkdir(exist_ok=True)
        env["TMPDIR"] = str(scratch)
        return env

    def __call__(self, commit: Commit) -> Judgement:
        """The commit's judgement; a verdict too noisy to decide is measured once more (a fresh session)."""
        tree = self.worktrees.add(commit.sha, f"step-{commit.short}")
        try:
            first = self._judge(tree, build=True)
            if not first.undecided:
                return first
            again = self._judge(tree, build=False)
            if again.kind == "skip":
                return dataclasses.replace(again, reason=f"measured twice, {again.reason}", measurements=2)
            return dataclasses.replace(again, measurements=2)
        finally:
            self.worktrees.remove(tree)

    def _judge(self, tree: Path, *, build: bool) -> Judgement:
        if self.build and build:
            code, out = self.build_tree(tree)
            if code != 0:
                last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
                return Judgement("skip", reason=f"does not build: the build command exited {code}: {last.strip()[:200]}")
        # A search step only needs the verdict: explanations (on by default) would profile every red step; the
        # one explained step comes after (``explain``). The ini form, which every version reads, not the option.
        with self._session(tree, self.good_tree, extra=("-o", "tfperf_explain=false")) as (code, out, results):
            if code in _NOT_COLLECTED or not results.exists():
                why = _NOT_COLLECTED.get(code, f"exit {code}, no results written")
                return Judgement("skip", reason=f"the selected tests do not exist or do not import here "
                                                f"({why}: {why_not_collected(out)})")
            try:
                doc = load_results(results)
            except StorageError as exc:
                return Judgement("skip", reason=f"its results could not be read: {exc}")
            return judgement_from_results(doc, out, self.expected)

    @contextmanager
    def _session(self, tree: Path, against: Path, *, extra: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 timeout_s: float | None = None) -> Iterator[tuple[int, str, Path]]:
        """One paired session of ``tree`` beside ``against``: (exit code, output, its results file), the scratch
        folder removed afterwards."""
        scratch = self.worktrees.root / f"out-{tree.name}"
        scratch.mkdir(exist_ok=True)
        try:
            results = scratch / "results.json"
            (scratch / "baselines").mkdir(exist_ok=True)  # empty: no stored verdicts, nothing written into the tree
            args = [argument_in_tree(a, self.repo, tree) for a in self.pytest_args]
            cmd = pytest_command(self.python, "--tfperf", f"--tfperf-against={against}", f"--tfperf-json={results}",
                                 f"--tfperf-baseline-dir={scratch / 'baselines'}", *extra, *args)
            code, out = _run(cmd, cwd=mapped_directory(self.invocation_dir, self.repo, tree),
                             env={**self._env(tree), **(env or {})}, timeout_s=timeout_s)
            self.last_output = out
            yield code, out, results
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def explain(self, first_bad: Commit, parent: Commit, tests: Sequence[str], *, good_sha: str,
                timeout_s: float, clock: Callable[[], float] = time.monotonic) -> ParentExplanation:
        """The explained step: ``first_bad`` measured beside ``parent`` under ``--tfperf-explain``, ``tests`` only.

        Never raises for the step's own trouble (a build that fails, a session
        that crashes or runs past ``timeout_s``, no explanation written): the
        result then says why in ``reason``. Ctrl-C still propagates.
        """
        began = clock()
        rerun = rerun_command(first_bad, tests, self.pytest_args)

        def none(reason: str) -> ParentExplanation:
            return ParentExplanation(parent=parent, elapsed_s=clock() - began, reason=reason, rerun=rerun)

        tree = self.worktrees.add(first_bad.sha, f"explain-{first_bad.short}")
        parent_tree = self.good_tree if parent.sha == good_sha else \
            self.worktrees.add(parent.sha, f"parent-{parent.short}")
        try:
            if self.build:
                for built, what in ((tree, "the first bad commit"), (parent_tree, "its parent")):
                    if built == self.good_tree:
                        continue  # built before the search
                    code, out = self.build_tree(built)
                    if code != 0:
                        last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
                        return none(f"{what} does not build here: the build command exited {code}: "
                                    f"{last.strip()[:200]}")
            try:
                with self._session(tree, parent_tree, extra=("--tfperf-explain", "-p", SELECT_PLUGIN),
                                   env={ONLY_ENV: "\n".join(tests)}, timeout_s=timeout_s) as (code, out, results):
                    if not results.exists():
                        why = _NOT_COLLECTED.get(code, f"exit {code}")
                        return none(f"the explained session wrote no results ({why}: {why_not_collected(out)})")
                    try:
                        doc = load_results(results)
                    except StorageError as exc:
                        return none(f"the explained session's results could not be read: {exc}")
            except StepTimeout as exc:
                return none(f"the explained session {exc}")
            explained = tuple(_explained_test(doc, test_id) for test_id in tests)
            if not any(t.detail is not None for t in explained):
                reasons = {t.lines[0] for t in explained if t.lines}
                if len(reasons) == 1:  # the same reason for every test (the profiler is unavailable): one line
                    return none(next(iter(reasons)).removeprefix("no explanation: "))
            return ParentExplanation(parent=parent, elapsed_s=clock() - began, tests=explained, rerun=rerun)
        finally:
            self.worktrees.remove(tree)
            if parent_tree != self.good_tree:
                self.worktrees.remove(parent_tree)


def rerun_command(first_bad: Commit, tests: Sequence[str], pytest_args: Sequence[str] = ()) -> str:
    """The explained step by hand, in a checkout of the first bad commit (the raw profiles then stay).

    Of the user's pytest arguments only the ``--tfperf-x=value`` ones are carried (tolerance, budget): they
    stand alone, where a path or ``-k`` and its value would widen or narrow the regressed tests named here.
    """
    options = [a for a in pytest_args if a.startswith("--tfperf-") and "=" in a
               and not a.startswith(("--tfperf-json=", "--tfperf-against=", "--tfperf-baseline-dir="))]
    return (f"git checkout {first_bad.short} && pytest --tfperf --tfperf-explain --tfperf-against=HEAD~1 "
            + " ".join(shlex.quote(a) for a in [*options, *tests]))


def _without_logdirs(value: Any) -> Any:
    """The explanation object with the raw profiles' folders emptied: they were in the removed worktrees.

    ``value`` is any JSON value of that object, and comes back as the same kind.
    """
    if isinstance(value, Mapping):
        return {k: (None if k.endswith("logdir") else _without_logdirs(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_logdirs(v) for v in value]
    return value


def _explanation_lines(lines: Sequence[str]) -> tuple[str, ...]:
    """The explanation's lines without those naming raw profiles: they were in the step's worktree, now removed."""
    return tuple(ln for ln in lines if not ln.strip().startswith("raw profile"))


def _explained_test(doc: ResultsDocument, test_id: str) -> ExplainedTest:
    explanation = doc.explanations.get(test_id)
    if explanation is not None:
        lines = [str(ln) for ln in explanation.get("lines", []) if isinstance(ln, str)]
        # "lines" are kept once, outside (without the raw profiles' lines); the rest is the results JSON's object.
        detail = _without_logdirs({k: v for k, v in explanation.items() if k != "lines"}) \
            if explanation.get("reason") is None else None
        return ExplainedTest(test_id=test_id, lines=_explanation_lines(lines) or ("no explanation: no lines",),
                             detail=detail)
    verdict = doc.verdict(test_id)
    if verdict is None or not doc.compared_with.get(test_id, "").startswith("measured beside"):
        return ExplainedTest(test_id=test_id, lines=("no explanation: not measured beside the parent",))
    change = _test_change(test_id, verdict)
    if change.status != "regressed":
        measured = f" (throughput {change.change * 100:+.1f}%)" if change.change is not None else ""
        return ExplainedTest(test_id=test_id, lines=(
            f"no explanation: not slower than its parent beyond the tolerance{measured}, verdict {change.status}: "
            "the slowdown against GOOD may have come in smaller steps before it",))
    return ExplainedTest(test_id=test_id, lines=("no explanation: its regression against the parent was not in "
                                                 "throughput (only throughput is explained by time)",))
