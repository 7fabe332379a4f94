"""The CI set-ups of docs/ci/ run as a new user would: their pytest commands, in a generated pull request.

Shared by tests/plugin/test_ci_workflows.py (a 3x slowdown must go red, an
unchanged commit green) and benchmarks/ci_workflow_check.py (20% slower, 5
times each way). A project is made with a tiny tfperf test on ``main``; a
bare clone of it plays ``origin``; the pull request's commit goes to a
``feature`` branch there; the CI's checkout is a fresh clone as GitHub's
actions/checkout (fetch-depth: 0, HEAD detached on the merge commit) or a
GitLab runner (GIT_DEPTH: 0, HEAD detached on the source branch) leaves it,
with the CI's variables set. The commands are the YAML's, verbatim, but for
``python`` (this interpreter) and the install lines (skipped: the plugin is
already importable here).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS_CI = Path(__file__).resolve().parents[1] / "docs" / "ci"
GITHUB = DOCS_CI / "github-pull-request.yml"
GITLAB = DOCS_CI / "gitlab-merge-request.yml"
# Variables of the CI running these tests, which must not reach the generated job.
CI_VARIABLES = ("GITHUB_BASE_REF", "GITHUB_HEAD_REF", "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS",
                "CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "CI_MERGE_REQUEST_DIFF_BASE_SHA", "GITLAB_CI")

PROJECT_TEST = """import pytest

N = {n}


@pytest.mark.tfperf({marker})
def test_sum(tfperf):
    tfperf(lambda: sum(range(N)), items=1)
"""


def load(path: Path) -> dict[str, Any]:
    import yaml

    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    assert isinstance(doc, dict), f"{path}: not a YAML mapping"
    return doc


def github_steps(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [step for job in doc["jobs"].values() for step in job["steps"]]


def github_commands(doc: Mapping[str, Any]) -> list[str]:
    """Every command line of the workflow's ``run:`` steps, in order (a step's script split into its lines)."""
    return [line for step in github_steps(doc) if "run" in step for line in _lines(step["run"])]


def gitlab_commands(doc: Mapping[str, Any]) -> list[str]:
    return [line for job in doc.values() if isinstance(job, dict) and "script" in job
            for entry in job["script"] for line in _lines(entry)]


def _lines(script: str) -> list[str]:
    return [ln.strip() for ln in str(script).splitlines() if ln.strip() and not ln.strip().startswith("#")]


def as_argv(command: str, python: str = sys.executable) -> list[str] | None:
    """The command to run here: ``python`` made this interpreter; None for an install line (skipped)."""
    argv = shlex.split(command)
    if argv[0] in ("pip", "pip3") or argv[:3] in (["python", "-m", "pip"], ["python3", "-m", "pip"]):
        return None
    if argv[0] in ("python", "python3"):
        argv[0] = python
    return argv


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "advice.detachedHead=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@dataclass(frozen=True)
class PullRequest:
    checkout: Path  # where the CI job runs
    env: dict[str, str]  # the CI's variables for it
    base: str  # the commit the pull request starts from: what auto must find


def make_pull_request(root: Path, ci: str, *, base_n: int, pr_n: int, marker: str = "",
                      ini: str = "") -> PullRequest:
    """A project whose pull request changes the test's work from ``base_n`` to ``pr_n`` (equal: another file
    changes instead), checked out as ``ci`` ("github" or "gitlab") checks it out."""
    project = root / "project"
    project.mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    (project / "pytest.ini").write_text("[pytest]\n" + ini)
    (project / "README.md").write_text("A project with a tfperf test.\n")
    (project / "test_perf.py").write_text(PROJECT_TEST.format(n=base_n, marker=marker))
    git(project, "add", "-A")
    git(project, "commit", "-qm", "main")
    base = git(project, "rev-parse", "HEAD")
    origin = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(project), str(origin))
    git(project, "remote", "add", "origin", f"file://{origin}")
    git(project, "checkout", "-q", "-b", "feature")
    if pr_n != base_n:
        (project / "test_perf.py").write_text(PROJECT_TEST.format(n=pr_n, marker=marker))
    else:
        (project / "README.md").write_text("A project with a tfperf test, and a change that is not slower.\n")
    git(project, "commit", "-qam", "the pull request")
    git(project, "push", "-q", "origin", "feature")
    checkout = root / "ci-checkout"
    git(root, "clone", "-q", f"file://{origin}", str(checkout))  # every branch: fetch-depth 0 / GIT_DEPTH 0
    if ci == "github":
        # actions/checkout on pull_request: HEAD detached on refs/pull/N/merge, the PR merged into its base.
        git(project, "checkout", "-q", "--detach", "main")
        git(project, "merge", "-q", "--no-ff", "--no-edit", "feature")
        git(project, "push", "-q", "origin", "HEAD:refs/pull/1/merge")
        git(checkout, "fetch", "-q", "origin", "refs/pull/1/merge")
        git(checkout, "checkout", "-q", "--detach", "FETCH_HEAD")
        env = {"GITHUB_ACTIONS": "true", "GITHUB_BASE_REF": "main", "GITHUB_HEAD_REF": "feature",
               "GITHUB_STEP_SUMMARY": str(root / "step-summary.md")}
    elif ci == "gitlab":
        git(checkout, "checkout", "-q", "--detach", "origin/feature")
        env = {"GITLAB_CI": "true", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main"}
    else:
        raise ValueError(f"ci must be github or gitlab, not {ci!r}")
    return PullRequest(checkout=checkout, env=env, base=base)


@dataclass(frozen=True)
class JobResult:
    returncode: int  # the job's: the first command that failed, else 0
    output: str  # every command's stdout and stderr
    commands: tuple[tuple[str, ...], ...]  # what ran


def run_job(pr: PullRequest, commands: Sequence[str], *, timeout_s: float = 600.0) -> JobResult:
    """The commands one after the other in the checkout, as the CI's shell would (stopping at the first failure)."""
    env = {k: v for k, v in os.environ.items() if k not in CI_VARIABLES}
    env.update(pr.env, TF_CPP_MIN_LOG_LEVEL="2")
    outputs: list[str] = []
    ran: list[tuple[str, ...]] = []
    for command in commands:
        argv = as_argv(command)
        if argv is None:
            continue
        ran.append(tuple(argv))
        done = subprocess.run(argv, cwd=pr.checkout, env=env, capture_output=True, text=True, timeout=timeout_s)
        outputs.append(f"$ {command}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            return JobResult(done.returncode, "\n".join(outputs), tuple(ran))
    return JobResult(0, "\n".join(outputs), tuple(ran))
