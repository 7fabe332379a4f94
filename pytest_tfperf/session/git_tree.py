"""Another tree of the user's code and a pytest session run in it: git, worktrees, the child's command and setting.

Two features run the user's tests in a tree other than this session's: the
``--tfperf-against`` partner (``against/partner_tree.py``: the baseline
revision's tree) and ``tfperf-bisect`` (``bisect/steps.py``: a worktree per
step). Both need the same git calls, the same detached worktrees made and
removed, the same child ``pytest`` command (the refresh processes' too) and
the same mapping of paths and environment into the tree: they are here once. Errors are ``GitError``; each
caller words them for its own users (``PartnerError``, ``BisectError``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pytest_tfperf.config import PARTNER_ENV


class GitError(Exception):
    """A git command failed: ``str()`` names it with git's words, ``stderr`` holds git's words alone."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


class GitMissing(GitError):
    """git is not installed (or not on PATH)."""


def run_git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` run in ``repo``, whatever its exit status (the caller reads it); GitMissing without git."""
    try:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise GitMissing("git is not installed") from None


def git(repo: Path, *args: str) -> str:
    """``git ARGS``'s output; GitError naming the command and git's words when it fails."""
    done = run_git(repo, *args)
    if done.returncode != 0:
        stderr = done.stderr.strip()
        raise GitError(f"git {' '.join(args)}: {stderr or f'exit {done.returncode}'}", stderr)
    return done.stdout


def repository_root(start: Path) -> Path | None:
    """The top of the git repository holding ``start``; None outside one, or without git."""
    try:
        done = run_git(start, "rev-parse", "--show-toplevel")
    except GitMissing:
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def add_worktree(repo: Path, path: Path, commit: str, *, force: bool = False) -> Path:
    """A detached worktree of ``commit`` at ``path`` (GitError if git cannot add it); ``remove_worktree`` ends it.

    Detached: no branch is checked out, so the user's branches are never touched or locked. ``force`` adds
    it even where git still has a stale worktree registered at ``path``.
    """
    git(repo, "worktree", "add", "--detach", *(["--force"] if force else []), str(path), commit)
    return path


def remove_worktree(repo: Path, path: Path) -> None:
    """The worktree at ``path`` unregistered and deleted; git's failure is ignored (the folder goes anyway)."""
    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], capture_output=True,
                   check=False)
    shutil.rmtree(path, ignore_errors=True)


def prune_worktrees(repo: Path) -> None:
    """Forget worktrees whose folders are gone (one interrupted before it was removed)."""
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, check=False)


def pytest_command(python: str, *args: str) -> list[str]:
    """A child pytest session's command: ``python -m pytest -p no:cacheprovider ARGS``.

    Without the cache provider: a child writes no ``.pytest_cache`` into a tree that is not its own to change
    (a worktree about to be removed, the user's checkout), and reads no last-failed state from one.
    """
    return [python, "-m", "pytest", "-p", "no:cacheprovider", *args]


def mapped_directory(invocation_dir: Path, current_root: Path, tree: Path) -> Path:
    """Where in ``tree`` a child session runs: the same place relative to the root as this session."""
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
        return argument  # relative: the child runs in the matching directory of its tree
    try:
        relative = Path(path).resolve().relative_to(current_root.resolve())
    except ValueError:
        return argument
    return str(tree / relative) + separator + rest


def tree_environment(tree: Path, base: dict[str, str]) -> dict[str, str]:
    """The environment of a pytest session run in ``tree``: its code first on the import path.

    Except pytest-tfperf itself: when the tree is a checkout of this plugin,
    the session must still load the plugin of this process, which speaks its
    protocol (the catalog then comes from this process's code too). Used for
    the partner and for ``tfperf-bisect``'s steps.
    """
    env = dict(base)
    env.pop(PARTNER_ENV, None)  # a partner's pipes are its own: a child of a partner is none
    paths = [str(tree)] + ([str(tree / "src")] if (tree / "src").is_dir() else [])
    if (tree / "pytest_tfperf").is_dir():
        import pytest_tfperf

        paths.insert(0, str(Path(pytest_tfperf.__file__).resolve().parent.parent))  # the folder holding this package
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("GITHUB_STEP_SUMMARY", None)  # the summary is the calling session's (or command's) to write
    return env
