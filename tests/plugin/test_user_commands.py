"""The commands on the user pages run as written.

Every `tfperf-compare`, `tfperf-report` and `python -m pytest_tfperf.gpu_check` command shown on the
README, the tutorial and the how-to pages runs here, verbatim, in a folder holding the files it names (the
results of two small `pytest --tfperf` runs, shards of them, a baseline folder). A command that a script no
longer accepts (a flag renamed, a value syntax dropped) fails this test, as `--tolerance 10%` once would
have. The README's refresh, commit and gate run as written too. The rest are accounted for: the tutorial's
commands run in ``test_tutorial.py``, the CI workflows' in
``test_ci_workflows.py``, the README's main-job and test commands are what CI itself runs, and every
`pytest` command's options are checked against `pytest --help` (``tests/unit/test_docs_snippets.py``);
installs, pushes and the commands that need a user's own repository history are listed with the reason
they are not run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_docs_snippets import all_blocks, commands

BIN = Path(sys.executable).parent
SCRIPTS = ("tfperf-compare", "tfperf-report", "pytest_tfperf.gpu_check")
# Commands not run here, with why (a prefix of the command as the page writes it).
NOT_RUN = {
    "python3 -m venv": "the README's set-up: what CI itself runs (.ci/run)",
    ".venv/bin/pip install": "the README's set-up: what CI itself runs (.ci/run)",
    ".venv/bin/python -m pytest": "the README's main job and test suite: what CI and the main job run",
    "pip install": "an install into the reader's environment",
    "git add": "the reader's own repository (the README's refresh, commit and gate run below)",
    "git commit": "the reader's own repository (the README's refresh, commit and gate run below)",
    "git tag": "the reader's own repository",
    "git push": "the reader's own repository",
    "tfperf-bisect": "needs the reader's history (v1.4, main, perf-green); tests/plugin/test_bisect_git.py runs "
                     "the same command on a generated one",
    "pytest --tfperf --splits": "needs pytest-split, which the project does not install",
    "pytest": "a pytest run of the reader's tests: options checked against pytest --help "
              "(tests/unit/test_docs_snippets.py); the tutorial's run in tests/plugin/test_tutorial.py",
    "python -m pytest": "as pytest above",
}

WORKLOAD = """
def test_step(tfperf):
    tfperf(lambda: sum(range({work})), items=1000)

def test_other(tfperf):
    tfperf(lambda: sum(range(500)), items=500)
"""


def page_commands() -> list[tuple[str, str]]:
    """(where, command) for every shell command on the user pages (bash and workflow blocks), in order."""
    return [(b.where(), c) for b in all_blocks() if b.lang in ("bash", "sh", "shell", "yaml") for c in commands(b)
            if not c.startswith("#")]


def is_script(command: str) -> bool:
    tokens = shlex.split(command)
    return bool(tokens) and (tokens[0] in SCRIPTS[:2] or tokens[:3] == ["python", "-m", SCRIPTS[2]])


def test_every_command_on_the_user_pages_is_run_or_said_why_not() -> None:
    unaccounted = [f"{where}: {c}" for where, c in page_commands()
                   if not is_script(c) and not any(c.startswith(prefix) for prefix in NOT_RUN)]
    assert not unaccounted, "commands on the user pages that nothing runs (run them here, or say why):\n" + \
        "\n".join(unaccounted)


def run_tfperf(cwd: Path, work: int, *args: str) -> None:
    (cwd / "test_work.py").write_text(WORKLOAD.format(work=work), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                          os.environ.get("PYTHONPATH", "")])}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf",
                           "--tfperf-budget=0.1", "--tfperf-no-watchdog", "-q", *args, "test_work.py"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the pages' commands name: results of two runs (main's and a pull request's), shards of
    each, and the baseline folder of the first."""
    root = tmp_path_factory.mktemp("user_commands")
    run_tfperf(root, 1000, "--tfperf-update", "--tfperf-runs=1", "--tfperf-json=main-results.json")
    run_tfperf(root, 1000, "--tfperf-json=pr-results.json")
    shutil.copy(root / "main-results.json", root / "results.json")
    for shards in ("main-shards", "pr-shards"):  # each shard runs its own tests, as a CI matrix would
        (root / shards).mkdir()
        for group, test in ((1, "test_step"), (2, "test_other")):
            run_tfperf(root, 1000, "-k", test, f"--tfperf-json={shards}/results-{group}.json")
    shutil.copytree(root / "pr-shards", root / "shards")
    return root


def readme_baseline_block() -> list[str]:
    """The README's baseline commands: the block that refreshes, commits and gates."""
    for block in all_blocks():
        found = commands(block)
        if block.page.name == "README.md" and "pytest --tfperf --tfperf-update" in found:
            return found
    raise AssertionError("the README shows no baseline refresh")


def test_the_readmes_baseline_commands_run_as_written(tmp_path: Path) -> None:
    """Refresh, commit, gate: verbatim, in a git repository holding a small test (an ini file shortens the
    measuring and the refresh's processes; the commands stay as written)."""
    (tmp_path / "test_work.py").write_text(WORKLOAD.format(work=1000), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntfperf_budget = 0.1\ntfperf_runs = 2\n", encoding="utf-8")
    git = ["git", "-c", "user.name=reader", "-c", "user.email=reader@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("GITHUB_STEP_SUMMARY", None)
    for command in readme_baseline_block():
        tokens = shlex.split(command)
        argv = ([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *tokens[1:]] if tokens[0] == "pytest"
                else [*git, *tokens[1:]] if tokens[0] == "git" else tokens)
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"README: {command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert (tmp_path / "benchmarks" / "baselines").is_dir()
    log = subprocess.run(["git", "log", "--stat", "--oneline"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert "perf baselines" in log and "benchmarks/baselines/" in log


@pytest.mark.parametrize("where,command", [pc for pc in page_commands() if is_script(pc[1])],
                         ids=[f"{w} {c}" for w, c in page_commands() if is_script(c)])
def test_the_command_runs_as_written(folder: Path, where: str, command: str) -> None:
    tokens = shlex.split(command)
    argv = ([sys.executable, *tokens[1:]] if tokens[0] == "python" else [str(BIN / tokens[0]), *tokens[1:]])
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
    # 0: nothing regressed (or no GPU to check); 1: the comparison found a regression. 2 is a usage error.
    assert done.returncode in (0, 1), f"{where}: {command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert "error:" not in done.stderr, f"{where}: {command}\n{done.stderr[-2000:]}"
