"""Where a partner session runs: the baseline revision's tree, and its environment.

``--tfperf-against`` names a directory or a git revision; a revision is
checked out into a ``git worktree`` made for the run and removed after it.
Test ids and path arguments given to this session are mapped into that tree,
and the partner's ``PYTHONPATH`` points at it (``partner`` runs the session):
the git calls, the worktree and that mapping are ``session/git_tree``'s,
shared with ``tfperf-bisect``; here is what only the partner needs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_tfperf.config import PARTNER_ENV as ENV_FDS
from pytest_tfperf.session.git_tree import (
    GitError,
    GitMissing,
    add_worktree,
    remove_worktree,
    repository_root,
    run_git,
    tree_environment,
)


class PartnerError(Exception):
    """The partner session cannot be used (for one test, or at all)."""


@dataclass(frozen=True, slots=True)
class BaselineTree:
    """A checkout of the baseline code: ``path``; ``worktree_of`` is the repository that made it, if any."""

    path: Path
    worktree_of: Path | None = None

    def remove(self) -> None:
        if self.worktree_of is not None:
            remove_worktree(self.worktree_of, self.path)


_NO_GIT = ("git is not installed, so a revision cannot be checked out; "
           "pass a directory that holds the baseline code instead")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return run_git(repo, *args)
    except GitMissing:
        raise PartnerError(_NO_GIT) from None


def resolve_against(against: str, start: Path) -> tuple[Path | None, Path | None, str]:
    """(directory, None, "") for a directory, or (None, repository, commit) for a git revision; PartnerError if neither."""
    candidate = Path(against).expanduser()
    if not candidate.is_absolute():
        candidate = start / candidate
    if candidate.is_dir():
        return candidate.resolve(), None, ""
    if shutil.which("git") is None:
        raise PartnerError(f"--tfperf-against={against}: not a directory, and git, which would read it as a "
                           "revision, is not installed (or not on PATH): install git, or pass the baseline's code "
                           "as a directory")
    repo = repository_root(start)
    if repo is None:
        raise PartnerError(f"--tfperf-against={against}: not a directory, and {start} is not inside a git "
                           "repository where it could be a revision")
    verified = _git(repo, "rev-parse", "--verify", "--quiet", f"{against}^{{commit}}")
    if verified.returncode != 0:
        raise PartnerError(f"--tfperf-against={against}: neither a directory nor a revision of the git repository "
                           f"at {repo} (for a branch in a shallow CI checkout, fetch it first, e.g. "
                           f"git fetch origin main --depth=1, and pass origin/main)")
    return None, repo, verified.stdout.strip()


def checkout(against: str, start: Path, scratch: Path) -> BaselineTree:
    """The baseline code for ``--tfperf-against``: an existing directory, or a git revision checked out for the run."""
    directory, repo, commit = resolve_against(against, start)
    if directory is not None:
        return BaselineTree(path=directory)
    assert repo is not None
    path = scratch / "baseline-tree"
    try:
        add_worktree(repo, path, commit)
    except GitMissing:
        raise PartnerError(_NO_GIT) from None
    except GitError as exc:
        raise PartnerError(f"--tfperf-against={against}: git worktree add failed: {exc.stderr}") from None
    return BaselineTree(path=path, worktree_of=repo)


def partner_environment(tree: Path, base: dict[str, str], fds: str) -> dict[str, str]:
    """The environment of the partner: its tree's code first on the import path (``tree_environment``)."""
    env = tree_environment(tree, base)
    env[ENV_FDS] = fds
    return env


_WHERE = re.compile(r"ImportError while (?:loading conftest|importing test module) '([^']+)'|ERROR collecting (\S+)")
_WHAT = re.compile(r"^E\s+([A-Za-z_][\w.]*(?:Error|Exception|Exit)\b.*)$")


def import_failure(output: str, tree: Path | None = None) -> str | None:
    """One line for a partner session that stopped because its tests did not import (a conftest or test module
    of the baseline revision that fails to import, or does not parse), read from its pytest output; None for
    any other end. Said instead of pytest's traceback, which is the baseline revision's, not the user's run."""
    where = _WHERE.search(output)
    what = [m.group(1).strip() for m in map(_WHAT.match, output.splitlines()) if m is not None]
    if where is None or not what:
        return None
    path = where.group(1) or where.group(2)
    if tree is not None:
        try:
            path = str(Path(path).relative_to(tree))
        except ValueError:
            pass
    return (f"its tests do not import in that revision ({path}: {what[-1]}): install what that revision "
            "imports, or pass --tfperf-against=REV naming a revision whose tests import")
