"""--tfperf-against=auto's look-up on real git repositories made here, with the CI variables faked.

Each case builds a tiny history: ``main`` m0-m1-m3 and ``feature`` forked at
m1 (f0, f1), pushed to a bare repository that plays ``origin``; clones of it
(shallow ones too) play the CI checkout.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_tfperf.against import baseline_revision
from pytest_tfperf.against.baseline_revision import NoBaselineRevision, find_baseline_revision


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "advice.detachedHead=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def commit(repo: Path, name: str, file: str) -> str:
    (repo / file).write_text(name + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD")


@dataclass(frozen=True)
class Origin:
    url: str
    fork: str  # where feature left main: the merge base every case should find
    main_tip: str
    feature_tip: str


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Origin:
    root = tmp_path_factory.mktemp("origin")
    src = root / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    main = [commit(src, f"m{i}", "m.txt") for i in range(2)]
    git(src, "checkout", "-qb", "feature")
    feature = [commit(src, f"f{i}", "f.txt") for i in range(2)]
    git(src, "checkout", "-q", "main")
    main.append(commit(src, "m3", "m.txt"))
    bare = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(src), str(bare))
    return Origin(url=f"file://{bare}", fork=main[1], main_tip=main[-1], feature_tip=feature[-1])


def clone(origin: Origin, dest: Path, *args: str) -> Path:
    git(dest.parent, "clone", "-q", *args, origin.url, str(dest))
    return dest


def github_merge_checkout(origin: Origin, dest: Path, *depth: str) -> Path:
    """What actions/checkout makes of a pull request: the merge of feature into main, HEAD detached on it."""
    repo = clone(origin, dest, "--branch", "feature", *depth)
    work = clone(origin, dest.parent / (dest.name + "-merge"))
    git(work, "checkout", "-q", "--detach", "origin/main")
    git(work, "merge", "-q", "--no-edit", "origin/feature")
    # Forced: each test makes its own merge commit (another second, another hash) over the shared origin's ref.
    git(work, "push", "-q", "origin", "+HEAD:refs/pull/1/merge")
    git(repo, "fetch", "-q", "--no-tags", *depth, "origin", "refs/pull/1/merge")
    git(repo, "checkout", "-q", "--detach", "FETCH_HEAD")
    git(repo, "update-ref", "-d", "refs/remotes/origin/main")  # the merge ref is all actions/checkout fetches
    return repo


def test_a_github_pull_request_is_judged_against_its_merge_base_with_the_base_branch(origin: Origin,
                                                                                     tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "feature")
    found = find_baseline_revision(repo, {"GITHUB_BASE_REF": "main"})
    assert found.commit == origin.fork  # not main's tip: what landed on main since is not this change's
    assert found.target == "origin/main"
    assert found.short == origin.fork[:12]
    assert "GITHUB_BASE_REF" in found.describe() and origin.fork[:12] in found.describe()
    assert found.fetched == ()


def test_the_base_branch_missing_from_the_checkout_is_fetched_and_said(origin: Origin, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "feature", "--single-branch")
    found = find_baseline_revision(repo, {"GITHUB_BASE_REF": "main"})
    assert found.commit == origin.fork
    assert found.fetched and "+refs/heads/main:refs/remotes/origin/main" in found.fetched[0]
    assert "fetched first: git fetch" in found.describe()


def test_a_detached_merge_commit_in_a_shallow_checkout_deepens_until_the_merge_base_is_there(
        origin: Origin, tmp_path: Path) -> None:
    repo = github_merge_checkout(origin, tmp_path / "repo", "--depth=1")
    assert git(repo, "rev-parse", "--is-shallow-repository") == "true"
    found = find_baseline_revision(repo, {"GITHUB_BASE_REF": "main"})
    # The merge commit's first parent is main's tip: the merge base of the merged result with main.
    assert found.commit == origin.main_tip
    assert any("--deepen=" in f for f in found.fetched)


def test_a_shallow_checkout_that_must_not_fetch_says_the_one_fetch_line_that_fixes_it(origin: Origin,
                                                                                     tmp_path: Path) -> None:
    repo = github_merge_checkout(origin, tmp_path / "repo", "--depth=1")
    git(repo, "fetch", "-q", "--no-tags", "--depth=1", "origin", "+refs/heads/main:refs/remotes/origin/main")
    with pytest.raises(NoBaselineRevision) as caught:
        find_baseline_revision(repo, {"GITHUB_BASE_REF": "main"}, fetch=False)
    message = str(caught.value)
    assert "\n" not in message
    assert "shallow checkout holds no common commit of HEAD and origin/main" in message
    assert "run git fetch --unshallow --no-tags origin main before pytest" in message
    assert "fetch-depth: 0" in message


def test_deepening_stops_at_its_bound_and_says_the_fetch_line(origin: Origin, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # feature is 2 commits past the fork, main 1: one commit of deepening cannot reach the merge base.
    monkeypatch.setattr(baseline_revision, "DEEPEN_STEPS", (1,))
    monkeypatch.setattr(baseline_revision, "FIRST_DEPTH", 1)
    repo = clone(origin, tmp_path / "repo", "--branch", "feature", "--single-branch", "--depth=1")
    with pytest.raises(NoBaselineRevision) as caught:
        find_baseline_revision(repo, {"GITHUB_BASE_REF": "main"})
    assert "(after fetching 1 more commits)" in str(caught.value)
    assert "git fetch --unshallow --no-tags origin main" in str(caught.value)


def test_a_base_branch_that_the_remote_lacks_says_what_to_fetch(origin: Origin, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "feature")
    with pytest.raises(NoBaselineRevision) as caught:
        find_baseline_revision(repo, {"GITHUB_BASE_REF": "release-9"})
    message = str(caught.value)
    assert message.startswith("--tfperf-against=auto: origin/release-9 is not in this checkout (git fetch failed: ")
    assert "run git fetch --no-tags origin +refs/heads/release-9:refs/remotes/origin/release-9 before pytest" \
           in message


def test_a_gitlab_merge_request_is_judged_against_its_merge_base_with_the_target_branch(origin: Origin,
                                                                                       tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "feature", "--single-branch")
    git(repo, "checkout", "-q", "--detach")  # GitLab runners check out the commit, not the branch
    found = find_baseline_revision(repo, {"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main"})
    assert found.commit == origin.fork
    assert "GitLab merge request into main" in found.describe()


def test_gitlab_s_diff_base_is_used_where_the_target_branch_cannot_be_had(origin: Origin, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "feature", "--single-branch", "--depth=1")
    env = {"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "renamed-since", "CI_MERGE_REQUEST_DIFF_BASE_SHA": origin.fork}
    found = find_baseline_revision(repo, env)
    assert found.commit == origin.fork
    assert "CI_MERGE_REQUEST_DIFF_BASE_SHA" in found.describe()
    assert found.fetched == (f"git fetch --no-tags --depth=1 origin {origin.fork}",)  # not the fetch that failed


def test_a_developer_s_branch_is_judged_against_its_upstream_else_origin_main(origin: Origin, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "main")
    git(repo, "checkout", "-q", "-b", "topic", "--track", "origin/main")
    git(repo, "reset", "-q", "--hard", origin.fork)
    commit(repo, "local work", "t.txt")
    found = find_baseline_revision(repo, {})
    assert (found.commit, found.target) == (origin.fork, "origin/main")
    assert "upstream" in found.how
    # Without an upstream: origin/main.
    git(repo, "branch", "--unset-upstream")
    found = find_baseline_revision(repo, {})
    assert (found.commit, found.target) == (origin.fork, "origin/main")
    assert "no upstream" in found.how


def test_a_branch_level_with_its_upstream_is_judged_against_main_instead(origin: Origin, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "feature")  # feature tracks origin/feature, all pushed
    found = find_baseline_revision(repo, {})
    assert (found.commit, found.target) == (origin.fork, "origin/main")


def test_an_uncommitted_change_on_the_main_branch_is_judged_against_head(origin: Origin, tmp_path: Path) -> None:
    repo = clone(origin, tmp_path / "repo", "--branch", "main")
    with pytest.raises(NoBaselineRevision, match="nothing to compare: HEAD is already on origin/main"):
        find_baseline_revision(repo, {})
    (repo / "m.txt").write_text("edited\n")
    assert find_baseline_revision(repo, {}).commit == origin.main_tip


def test_a_detached_head_without_any_main_branch_says_to_name_the_revision(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "trunk")
    commit(tmp_path, "one", "a.txt")
    git(tmp_path, "checkout", "-q", "--detach")
    with pytest.raises(NoBaselineRevision) as caught:
        find_baseline_revision(tmp_path, {})
    assert str(caught.value) == ("--tfperf-against=auto: HEAD is detached (no branch, so no upstream), and none of "
                                 "origin/main, origin/master, main, master exists: pass --tfperf-against=REV naming "
                                 "the baseline revision")
    git(tmp_path, "checkout", "-q", "trunk")
    with pytest.raises(NoBaselineRevision, match="the branch has no upstream, .* git branch --set-upstream-to"):
        find_baseline_revision(tmp_path, {})


def test_no_repository_no_commit_and_no_git_each_say_what_to_do(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NoBaselineRevision, match="is not inside a git repository: run from a git checkout, or "
                                                 "pass the baseline's code as --tfperf-against=DIR"):
        find_baseline_revision(plain, {}, git="git")
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(NoBaselineRevision, match="the repository has no commit yet"):
        find_baseline_revision(empty, {"GITHUB_BASE_REF": "main"})
    with pytest.raises(NoBaselineRevision, match="needs git, which is not installed"):
        find_baseline_revision(empty, {}, git=str(tmp_path / "no-such-git"))


def test_unrelated_histories_say_to_name_the_revision(origin: Origin, tmp_path: Path) -> None:
    repo = tmp_path / "other"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "work")
    commit(repo, "unrelated", "u.txt")
    git(repo, "remote", "add", "origin", origin.url)
    with pytest.raises(NoBaselineRevision, match=r"HEAD and origin/main have no commit in common \(unrelated "):
        find_baseline_revision(repo, {"GITHUB_BASE_REF": "main"})


def test_without_an_origin_remote_the_missing_branch_cannot_be_fetched(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "work")
    commit(tmp_path, "one", "a.txt")
    with pytest.raises(NoBaselineRevision, match=r"origin/main is not in this checkout \(there is no remote named "
                                                 r"origin to fetch it from\)"):
        find_baseline_revision(tmp_path, {"GITHUB_BASE_REF": "main"})
