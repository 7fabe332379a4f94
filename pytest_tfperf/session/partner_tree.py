"""Where a partner session runs: the baseline revision's tree, paths mapped into it, and its environment.

``--tfperf-against`` names a directory or a git revision; a revision is
checked out into a ``git worktree`` made for the run and removed after it.
Test ids and path arguments given to this session are mapped into that tree,
and the partner's ``PYTHONPATH`` points at it (``partner`` runs the session).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tfperf.config import PARTNER_ENV as ENV_FDS


class PartnerError(Exception):
    """The partner session cannot be used (for one test, or at all)."""


@dataclass(frozen=True, slots=True)
class BaselineTree:
    """A checkout of the baseline code: ``path``; ``worktree_of`` is the repository that made it, if any."""

    path: Path
    worktree_of: Path | None = None

    def remove(self) -> None:
        if self.worktree_of is not None:
            subprocess.run(["git", "-C", str(self.worktree_of), "worktree", "remove", "--force", str(self.path)],
                           capture_output=True, check=False)
            shutil.rmtree(self.path, ignore_errors=True)


def _git(args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise PartnerError("git is not installed, so a revision cannot be checked out; "
                           "pass a directory that holds the baseline code instead") from None


def repository_root(start: Path) -> Path | None:
    try:
        done = _git(["rev-parse", "--show-toplevel"], start)
    except PartnerError:
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 else None


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
    verified = _git(["rev-parse", "--verify", "--quiet", f"{against}^{{commit}}"], repo)
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
    added = _git(["worktree", "add", "--detach", str(path), commit], repo)
    if added.returncode != 0:
        raise PartnerError(f"--tfperf-against={against}: git worktree add failed: {added.stderr.strip()}")
    return BaselineTree(path=path, worktree_of=repo)


def mapped_directory(invocation_dir: Path, current_root: Path, tree: Path) -> Path:
    """Where in ``tree`` the partner runs: the same place relative to the root as this session."""
    try:
        relative = invocation_dir.resolve().relative_to(current_root.resolve())
    except ValueError:
        return tree
    target = tree / relative
    return target if target.is_dir() else tree


def argument_in_tree(argument: str, current_root: Path, tree: Path) -> str:
    """A path or node id given to this session, pointing into ``tree`` when it named a file of this tree."""
    path, separator, rest = argument.partition("::")
    if not Path(path).is_absolute():
        return argument  # relative: the partner runs in the matching directory of its tree
    try:
        relative = Path(path).resolve().relative_to(current_root.resolve())
    except ValueError:
        return argument
    return str(tree / relative) + separator + rest


def partner_environment(tree: Path, base: dict[str, str], fds: str) -> dict[str, str]:
    """The environment of the partner: its tree's code first on the import path (``tree_environment``)."""
    env = tree_environment(tree, base)
    env[ENV_FDS] = fds
    return env


def tree_environment(tree: Path, base: dict[str, str]) -> dict[str, str]:
    """The environment of a pytest session run in ``tree``: its code first on the import path.

    Except pytest-tfperf itself: when the tree is a checkout of this plugin,
    the session must still load the plugin of this process, which speaks its
    protocol (the catalog then comes from this process's code too). Used for
    the partner and for ``tfperf-bisect``'s steps.
    """
    env = dict(base)
    env.pop(ENV_FDS, None)
    paths = [str(tree)] + ([str(tree / "src")] if (tree / "src").is_dir() else [])
    if (tree / "pytest_tfperf").is_dir():
        import pytest_tfperf

        paths.insert(0, str(Path(pytest_tfperf.__file__).resolve().parent.parent))  # the folder holding this package
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("GITHUB_STEP_SUMMARY", None)  # the summary is the calling session's (or command's) to write
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
