"""``--tfperf-against=auto``: the revision a change is measured against, found the way CI systems and developers mean it.

In a GitHub Actions pull request (``GITHUB_BASE_REF``) it is the merge base
of HEAD with ``origin/<base branch>``; in a GitLab merge request pipeline
(``CI_MERGE_REQUEST_TARGET_BRANCH_NAME``) the merge base with the target
branch, or GitLab's own ``CI_MERGE_REQUEST_DIFF_BASE_SHA`` where the target
cannot be had; elsewhere the merge base with the branch's upstream, else with
``origin/main``, ``origin/master``, ``main`` or ``master``. The merge base, not
the branch's tip: a pull request is judged on what it changes, not on what
landed on the target since it branched off.

CI checkouts are often shallow (one commit deep). What is missing is fetched,
within bounds (the target branch, then the history in a few ``--deepen``
steps); past those, the one ``git fetch`` line that fixes it is said.

Every way this can fail raises ``NoBaselineRevision`` with one line that says
what to do; the plugin then judges by the stored gate and says why
(``plugin._resolve_against``). Nothing here knows pytest.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
REMOTE = "origin"  # the remote that actions/checkout and GitLab runners set up
# Commits fetched in each --deepen step of a shallow checkout: a few hundred cover nearly every pull request,
# and a repository's whole history is never downloaded behind the user's back (the line to do it is said instead).
DEEPEN_STEPS = (50, 250, 1000)
FIRST_DEPTH = 50  # how deep a missing target branch is fetched into a shallow checkout
FETCH_TIMEOUT_S = 300.0
LOCAL_FALLBACKS = ("origin/main", "origin/master", "main", "master")


class NoBaselineRevision(Exception):
    """No baseline revision could be found; the message is one line that says what to do."""


@dataclass(frozen=True, slots=True)
class BaselineRevision:
    """The revision found: ``commit`` (full hash), the branch it is the merge base with, how that was chosen."""

    commit: str
    short: str  # what the partner is given and the reports show (12 hex digits)
    target: str  # "origin/main", or "CI_MERGE_REQUEST_DIFF_BASE_SHA"
    how: str  # "GitHub Actions pull request into main (GITHUB_BASE_REF)"
    fetched: tuple[str, ...] = ()  # the git fetch commands run to find it

    def describe(self) -> str:
        """One line for the terminal header and the Markdown summary."""
        what = (f"the merge base of HEAD with {self.target}" if self.target != "CI_MERGE_REQUEST_DIFF_BASE_SHA"
                else "the merge request's diff base (CI_MERGE_REQUEST_DIFF_BASE_SHA)")
        fetched = f"; fetched first: {'; '.join(self.fetched)}" if self.fetched else ""
        return f"--tfperf-against=auto: {self.short}, {what} ({self.how}){fetched}"


@dataclass(frozen=True, slots=True)
class _Target:
    ref: str  # what the merge base is taken with: "origin/main", "main"
    how: str
    branch: str | None = None  # the remote branch to fetch when ``ref`` is missing (CI only)
    diff_base: str | None = None  # GitLab's merge base, where given


class _Git:
    """git in one directory; a missing git is a NoBaselineRevision."""

    def __init__(self, cwd: Path, executable: str = "git") -> None:
        self.cwd = cwd
        self.executable = executable

    def run(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        # No prompt for credentials (a CI job would hang on it), no pager, no locale-dependent messages to parse.
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", LC_ALL="C")
        try:
            return subprocess.run([self.executable, *args], cwd=self.cwd, env=env, capture_output=True, text=True,
                                  check=False, timeout=timeout_s)
        except FileNotFoundError:
            raise NoBaselineRevision("--tfperf-against=auto needs git, which is not installed (or not on PATH): "
                                     "install git, or pass the baseline's code as --tfperf-against=DIR") from None
        except subprocess.TimeoutExpired:
            raise NoBaselineRevision(f"--tfperf-against=auto: 'git {' '.join(args)}' took over {timeout_s:.0f} s: "
                                     "pass --tfperf-against=REV naming the baseline revision") from None

    def out(self, *args: str) -> str | None:
        done = self.run(*args)
        return done.stdout.strip() if done.returncode == 0 else None

    def commit(self, rev: str) -> str | None:
        return self.out("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")


def find_baseline_revision(start: Path, env: Mapping[str, str], *, fetch: bool = True,
                           git: str = "git") -> BaselineRevision:
    """The baseline revision for ``--tfperf-against=auto`` seen from ``start``; NoBaselineRevision says why not."""
    g = _Git(start, git)
    top = g.run("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise NoBaselineRevision(f"--tfperf-against=auto: {start} is not inside a git repository: run from a "
                                 "git checkout, or pass the baseline's code as --tfperf-against=DIR")
    g = _Git(Path(top.stdout.strip()), git)
    head = g.commit("HEAD")
    if head is None:
        raise NoBaselineRevision("--tfperf-against=auto: the repository has no commit yet, so there is no baseline "
                                 "to measure against: commit the baseline first, or pass --tfperf-against=DIR")
    targets = _targets(g, env)
    if not targets:
        raise NoBaselineRevision(_no_target_message(g))
    fetched: list[str] = []
    same_as_head: list[str] = []
    first_problem: NoBaselineRevision | None = None
    for target in targets:
        try:
            commit, target_name = _merge_base(g, head, target, fetch, fetched)
        except NoBaselineRevision as exc:
            first_problem = first_problem or exc  # a later candidate may still do; else the first one's reason
            continue
        if commit == head and not _tree_changed(g):
            # The target already holds HEAD and nothing is changed on top of it: measuring HEAD beside
            # itself would cost a paired run to say nothing. A branch's upstream is often just its pushed copy,
            # so the next candidate (the main branch) may still hold a baseline.
            same_as_head.append(target.ref)
            continue
        short = g.out("rev-parse", "--short=12", commit) or commit[:12]
        return BaselineRevision(commit=commit, short=short, target=target_name, how=target.how,
                                fetched=tuple(fetched))
    if first_problem is not None and not same_as_head:
        raise first_problem
    raise NoBaselineRevision(f"--tfperf-against=auto: nothing to compare: HEAD is already on "
                             f"{' and '.join(same_as_head)} and the working tree has no change: measure a change "
                             "(commit or edit it on a branch), or pass --tfperf-against=REV")


def _targets(g: _Git, env: Mapping[str, str]) -> list[_Target]:
    """Where the merge base is taken, in order: the CI's target branch, or the upstream and the usual main branches."""
    base_ref = env.get("GITHUB_BASE_REF", "").strip()
    if base_ref:
        return [_Target(f"{REMOTE}/{base_ref}", f"GitHub Actions pull request into {base_ref}, GITHUB_BASE_REF",
                        branch=base_ref)]
    target_branch = env.get("CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "").strip()
    if target_branch:
        diff_base = env.get("CI_MERGE_REQUEST_DIFF_BASE_SHA", "").strip() or None
        return [_Target(f"{REMOTE}/{target_branch}",
                        f"GitLab merge request into {target_branch}, CI_MERGE_REQUEST_TARGET_BRANCH_NAME",
                        branch=target_branch, diff_base=diff_base)]
    found: list[_Target] = []
    upstream = g.out("rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
    if upstream and g.commit(upstream) is not None:
        found.append(_Target(upstream, "the branch's upstream; not in a CI pull request"))
    else:
        upstream = None
    for ref in LOCAL_FALLBACKS:
        if ref != upstream and g.commit(ref) is not None:
            found.append(_Target(ref, "the main branch; not in a CI pull request"
                                 + ("" if upstream else ", and the branch has no upstream")))
    return found


def _no_target_message(g: _Git) -> str:
    detached = g.run("symbolic-ref", "--quiet", "HEAD").returncode != 0
    where = ("HEAD is detached (no branch, so no upstream)" if detached
             else "the branch has no upstream")
    return (f"--tfperf-against=auto: {where}, and none of {', '.join(LOCAL_FALLBACKS)} exists: pass "
            "--tfperf-against=REV naming the baseline revision"
            + ("" if detached else ", or set an upstream: git branch --set-upstream-to=origin/main"))


def _merge_base(g: _Git, head: str, target: _Target, fetch: bool, fetched: list[str]) -> tuple[str, str]:
    """(the merge base of HEAD with the target, what it was taken with), fetching what a CI checkout lacks."""
    shallow = g.out("rev-parse", "--is-shallow-repository") == "true"
    have_target = g.commit(target.ref) is not None
    problem = ""
    if not have_target and target.branch is not None and fetch:
        problem = _fetch(g, fetched, _fetch_branch_args(target.branch, FIRST_DEPTH if shallow else None))
        have_target = g.commit(target.ref) is not None
    if have_target:
        base = g.out("merge-base", head, target.ref)
        if base:
            return base, target.ref
    if target.diff_base is not None:
        # GitLab computed the merge base already: one commit to fetch, where the history may be far deeper.
        if g.commit(target.diff_base) is None and fetch:
            _fetch(g, fetched, ["--no-tags", "--depth=1", REMOTE, target.diff_base])
        if g.commit(target.diff_base) is not None:
            return target.diff_base, "CI_MERGE_REQUEST_DIFF_BASE_SHA"
    if not have_target:
        fix = (f"git fetch --no-tags {REMOTE} +refs/heads/{target.branch}:refs/remotes/{REMOTE}/{target.branch}"
               if target.branch else f"git fetch {REMOTE}")
        because = f" ({problem})" if problem else ""
        raise NoBaselineRevision(f"--tfperf-against=auto: {target.ref} is not in this checkout{because}: "
                                 f"run {fix} before pytest, or pass --tfperf-against=REV")
    if shallow and fetch:
        for step in DEEPEN_STEPS:
            deepened = ["--no-tags", f"--deepen={step}", REMOTE]
            problem = _fetch(g, fetched, deepened + ([_refspec(target.branch)] if target.branch else []))
            if problem:
                break
            base = g.out("merge-base", head, target.ref)
            if base:
                return base, target.ref
    if shallow or g.out("rev-parse", "--is-shallow-repository") == "true":
        branch = target.branch or target.ref.partition("/")[2] or target.ref
        tried = f" (after fetching {sum(DEEPEN_STEPS)} more commits)" if fetch and not problem else ""
        because = f" ({problem})" if problem else ""
        raise NoBaselineRevision(f"--tfperf-against=auto: this shallow checkout holds no common commit of HEAD and "
                                 f"{target.ref}{tried}{because}: run git fetch --unshallow --no-tags {REMOTE} "
                                 f"{branch} before pytest (or check out with fetch-depth: 0 / GIT_DEPTH: 0)")
    raise NoBaselineRevision(f"--tfperf-against=auto: HEAD and {target.ref} have no commit in common (unrelated "
                             "histories): pass --tfperf-against=REV naming the baseline revision")


def _refspec(branch: str) -> str:
    return f"+refs/heads/{branch}:refs/remotes/{REMOTE}/{branch}"


def _fetch_branch_args(branch: str, depth: int | None) -> list[str]:
    return ["--no-tags", *([f"--depth={depth}"] if depth else []), REMOTE, _refspec(branch)]


def _fetch(g: _Git, fetched: list[str], args: Sequence[str]) -> str:
    """Run ``git fetch ARGS``; "" when it worked, else git's last line of complaint."""
    if g.out("remote", "get-url", REMOTE) is None:
        return f"there is no remote named {REMOTE} to fetch it from"
    done = g.run("fetch", "--quiet", *args, timeout_s=FETCH_TIMEOUT_S)
    if done.returncode == 0:
        fetched.append("git fetch " + " ".join(args))  # said in the header: what this run changed in the checkout
        return ""
    lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    return f"git fetch failed: {lines[-1] if lines else f'exit status {done.returncode}'}"


def _tree_changed(g: _Git) -> bool:
    """Whether the working tree differs from HEAD (a change, committed or not, is what gets measured)."""
    status = g.run("status", "--porcelain")
    return status.returncode != 0 or bool(status.stdout.strip())
