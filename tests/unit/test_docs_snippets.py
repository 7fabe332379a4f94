"""What the user pages show runs: every Python block compiles, the tutorial's test files pass under
`pytest --tfperf` in a fresh folder, every option of every `pytest`/`tfperf-*` command exists in that
command's `--help`, and the reference lists everything `--help` offers. A renamed option breaks this
test, not the reader.

Blocks are fenced code; an HTML comment on the line before a block marks it:
`<!-- fragment -->` (part of a file shown elsewhere: not compiled) or `<!-- file: NAME.py -->` (a whole
test file: written to a folder and run)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_tfperf.bisect import cli as bisect_cli
from pytest_tfperf.cli import compare as compare_cli
from pytest_tfperf.cli import gpu_selfcheck as gpu_check_cli
from pytest_tfperf.cli import report_cli
from pytest_tfperf.config import MARKER_FIELDS

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = [ROOT / "README.md", ROOT / "docs" / "tutorial.md", *sorted((ROOT / "docs" / "how-to").glob("*.md"))]
REFERENCE = ROOT / "docs" / "reference" / "options.md"
# The newcomer's path to a red pull-request gate: the README, the tutorial, and the CI how-to up to the
# pull-request gate's set-up (how auto finds the base version, the nightly gate, bisect and sharding come later).
NEWCOMER_PATH = [(ROOT / "README.md", None), (ROOT / "docs" / "tutorial.md", None),
                 (ROOT / "docs" / "how-to" / "ci.md", "## How `auto` finds")]
NEWCOMER_LINES = 350
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*(fragment|file:\s*(\S+))\s*-->$")
# The hook that keeps lab notes off the user path: issue numbers, UTC times, load averages.
LAB_NOTES = re.compile(r"[Ii]ssue #?[0-9]+|[0-9]{2}:[0-9]{2}(-[0-9]{2}:[0-9]{2})? UTC|load average|load [0-9.]+-[0-9.]+")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    text: str
    mark: str  # "", "fragment" or the file name

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found, lines = [], page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        mark = MARK.match(lines[start - 1].strip()) if start else None
        name = "" if mark is None else (mark.group(2) or "fragment")
        found.append(Block(page, start + 1, match.group(1), "\n".join(body) + "\n", name))
        i += 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in USER_PAGES for b in blocks(page)]


def commands(block: Block) -> list[str]:
    """The shell commands of a block: bash lines, and the `run:` lines of a workflow."""
    text = block.text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if block.lang == "yaml":
            match = re.match(r"^\s*(?:-\s*)?run:\s*(.+)$", line)
            if not match:
                continue
            line = match.group(1)
        line = line.split(" #")[0].strip()
        for part in re.split(r"&&|\|\||;|\|", line):
            part = part.strip()
            if part:
                out.append(part)
    return out


def help_text(main: Callable[[list[str]], object]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    return out.getvalue()


@pytest.fixture(scope="module")
def pytest_help() -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def tfperf_options(help_text_: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--(?:no-)?tfperf[\w-]*)", help_text_))


def ini_keys(help_text_: str) -> set[str]:
    return set(re.findall(r"^\s+(tfperf_\w+) \(", help_text_, re.MULTILINE))


SCRIPTS: dict[str, Callable[[list[str]], object]] = {
    "tfperf-compare": compare_cli.main, "tfperf-report": report_cli.main, "tfperf-bisect": bisect_cli.main,
    "pytest_tfperf.gpu_check": gpu_check_cli.main,
}


def script_flags(name: str) -> set[str]:
    """The flags argparse lists in its options section (not the examples in its prose)."""
    return set(re.findall(r"^\s+(?:-\w(?: \S+)?, )?(--[a-z][\w-]*)", help_text(SCRIPTS[name]), re.MULTILINE))


def _options(tokens: list[str]) -> list[str]:
    return [t.split("=", 1)[0] for t in tokens if t.startswith("--") and t != "--"]


def check_command(command: str, pytest_opts: set[str]) -> list[str]:
    """What in one command does not exist: its tfperf options, or a script's flags."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    if not tokens:
        return []
    head = " ".join(tokens[:3])
    problems = []
    if tokens[0] == "pytest" or "-m pytest " in f"{head} " or tokens[0].endswith("/pytest"):
        problems += [o for o in _options(tokens) if "tfperf" in o and o not in pytest_opts]
    for name in SCRIPTS:
        if name in tokens[:3]:
            own, passed = tokens[tokens.index(name) + 1:], []
            if "--" in own:  # tfperf-bisect hands what follows `--` to pytest
                cut = own.index("--")
                own, passed = own[:cut], own[cut + 1:]
            flags = script_flags(name)
            problems += [o for o in _options(own) if o not in flags]
            problems += [o for o in _options(passed) if "tfperf" in o and o not in pytest_opts]
    return problems


def test_the_user_pages_have_blocks_to_check() -> None:
    found = all_blocks()
    assert sum(b.lang == "python" for b in found) >= 4
    assert sum(b.mark.endswith(".py") for b in found) >= 2  # the tutorial's file and the README's
    assert sum(len(commands(b)) for b in found if b.lang in ("bash", "yaml")) >= 20


@pytest.mark.parametrize("block", [b for b in all_blocks() if b.lang == "python" and b.mark != "fragment"],
                         ids=Block.where)
def test_python_blocks_compile(block: Block) -> None:
    compile(block.text, block.where(), "exec")


def test_every_command_on_the_user_pages_uses_options_that_exist(pytest_help: str) -> None:
    pytest_opts = tfperf_options(pytest_help)
    assert "--tfperf" in pytest_opts and "--tfperf-against" in pytest_opts
    wrong = [f"{b.where()}: {cmd!r}: {', '.join(bad)}" for b in all_blocks() if b.lang in ("bash", "yaml", "")
             for cmd in commands(b) if (bad := check_command(cmd, pytest_opts))]
    assert not wrong, "options that --help does not know:\n" + "\n".join(wrong)


def test_the_checker_catches_a_renamed_option(pytest_help: str) -> None:
    opts = tfperf_options(pytest_help)
    assert check_command("pytest --tfperf --tfperf-tolerence=10%", opts) == ["--tfperf-tolerence"]
    assert check_command("tfperf-compare a.json b.json --tolerence 10%", opts) == ["--tolerence"]
    assert check_command("tfperf-bisect v1 main -- tests/ --tfperf-budgett=1", opts) == ["--tfperf-budgett"]
    assert check_command("tfperf-compare a.json b.json --tolerance 10%", opts) == []


def test_the_reference_lists_every_option_ini_key_marker_argument_and_script_flag(pytest_help: str) -> None:
    words = set(re.findall(r"--?[\w-]+|\w+", REFERENCE.read_text(encoding="utf-8")))
    missing = [o for o in sorted(tfperf_options(pytest_help)) if o not in words]
    missing += [k for k in sorted(ini_keys(pytest_help)) if k not in words]
    missing += [m for m in sorted(MARKER_FIELDS) if m not in words]
    for name in SCRIPTS:
        missing += [f"{name} {f}" for f in sorted(script_flags(name) - {"--help"}) if f not in words]
    assert ini_keys(pytest_help) >= {"tfperf_tolerance", "tfperf_budget", "tfperf_runs"}
    assert not missing, f"{REFERENCE.relative_to(ROOT)} does not list: {', '.join(missing)}"


def test_the_user_pages_hold_no_lab_notes() -> None:
    pages = [*USER_PAGES, *sorted((ROOT / "docs" / "reference").glob("*.md")),
             *sorted((ROOT / "docs" / "explanation").glob("*.md")), ROOT / "docs" / "index.md",
             ROOT / "docs" / "catalog.md"]
    notes = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}" for p in pages
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if LAB_NOTES.search(line)]
    assert not notes, "issue numbers, UTC times or load averages on a user page (they go to docs/evidence/):\n" + \
        "\n".join(notes)


def test_a_newcomer_reaches_a_red_pull_request_gate_within_the_line_budget() -> None:
    total = 0
    for page, stop in NEWCOMER_PATH:
        lines = page.read_text(encoding="utf-8").splitlines()
        total += next(n for n, line in enumerate(lines) if line.startswith(stop)) if stop else len(lines)
    assert total <= NEWCOMER_LINES, f"README + tutorial + the CI how-to's pull-request gate: {total} lines"


def test_the_pages_test_files_pass_under_tfperf(tmp_path: Path) -> None:
    # The tutorial's file is walked step by step in tests/plugin/test_tutorial.py; the others run here.
    files = [b for b in all_blocks() if b.mark.endswith(".py") and b.page.name != "tutorial.md"]
    assert files
    for block in files:
        (tmp_path / block.mark).write_text(block.text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    # A short budget: this checks that the code the pages show runs as shown, not what it measures.
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf",
                           "--tfperf-budget=0.2", "-q", *[b.mark for b in files]],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for block in files:
        assert f"{block.mark}::test_train_step" in done.stdout
