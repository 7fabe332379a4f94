"""docs/tutorial.md run as a reader runs it: its test file, its edits and its commands, in order.

Run:   .venv/bin/python benchmarks/tutorial_run.py              (about 3 minutes on 2 cores)
Writes benchmarks/results/tutorial_run.txt, the outputs the tutorial quotes.

The test file and every ``bash`` block come from the page itself, so the page
cannot drift from what runs: ``tutorial_commands()`` must be the commands
``STEPS`` runs, in that order (``tests/plugin/test_tutorial.py`` checks it and
runs the whole walk with a short measuring budget, ``--fast``). The edits the
page describes in words (the marker of step 3 and its removal, the sleep of
step 5 and its revert) are applied to the file here. Each step states the exit
code the page promises and a line its output must hold; a step that breaks its
promise fails the run.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"
OUT = ROOT / "benchmarks" / "results" / "tutorial_run.txt"

# --fast: what a test can afford (the commands stay as the page writes them; an ini file shortens them: a
# shorter budget, one process a refresh (no later step reads the stored baselines), and the red verdict
# explained from its own pair of processes).
# 0.4 s, not less: shorter rounds read more verdicts as borderline, and each second look or fresh pair then
# costs more than the budget saved (the walk took 83 s at 0.2, 62-72 s at 0.4).
FAST_INI = "[pytest]\ntfperf_budget = 0.4\ntfperf_runs = 1\ntfperf_explain_pairs = 1\n"


def page_blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, the mark on the line before, body) for each fenced block of the page."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        mark = lines[i - 1].strip() if i else ""
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        out.append((fence.group(1), mark, "\n".join(lines[i + 1:j]) + "\n"))
        i = j + 1
    return out


def tutorial_file(text: str) -> str:
    return next(body for lang, mark, body in page_blocks(text) if mark == "<!-- file: test_perf.py -->")


def tutorial_commands(text: str) -> list[str]:
    return [line.strip() for lang, _, body in page_blocks(text) if lang == "bash"
            for line in body.splitlines() if line.strip()]


def add_limit(src: str) -> str:
    return src.replace("def test_train_step(tfperf):",
                       "@pytest.mark.tfperf(min_throughput=1_000_000)\ndef test_train_step(tfperf):", 1)


def plant_sleep(src: str) -> str:
    planted = src.replace("tfperf(lambda: model.train_on_batch(x, y), items=64)",
                          "tfperf(lambda: (model.train_on_batch(x, y), time.sleep(0.005)), items=64)", 1)
    return "import time\n" + planted


@dataclass(frozen=True)
class Step:
    title: str
    command: str  # as the page writes it
    expect_rc: int
    expect: str  # a line the output must hold (a substring)
    edit: Callable[[str], str] | None = None  # applied to the page's test file before the command
    commit_first: bool = False  # the page's `git init && git add ... && git commit` before this step
    # With --fast (the suite's walk) an A/A step may also read red: how often unchanged code goes red is the
    # gate's figure, measured in benchmarks/paired_pipelines.py, and a test must not fail by that chance.
    fast_also_rc: tuple[int, ...] = ()


STEPS = (
    Step("2. Smoke run", "pytest test_perf.py", 0, "2 passed"),
    Step("2. Then measure", "pytest --tfperf test_perf.py", 0, "test_perf.py::test_input_pipeline"),
    Step("3. A limit that fails", "pytest --tfperf test_perf.py -k train_step", 1,
         "test_perf.py::test_train_step: limit crossed", edit=add_limit),
    Step("4. Store baselines", "pytest --tfperf --tfperf-update test_perf.py", 0, "baseline"),
    Step("5. Plant a slowdown, and measure it beside the last commit",
         "pytest --tfperf --tfperf-against=HEAD test_perf.py", 1,
         "test_perf.py::test_train_step: performance regressed against HEAD", edit=plant_sleep, commit_first=True),
    # Unchanged code passes: "ok vs HEAD", or "noisy vs HEAD" where the machine is too busy to tell.
    Step("7. Revert", "pytest --tfperf --tfperf-against=HEAD test_perf.py", 0, " vs HEAD", fast_also_rc=(1,)),
)


@dataclass(frozen=True)
class Ran:
    step: Step
    rc: int
    output: str
    seconds: float
    fast: bool = False

    @property
    def kept(self) -> bool:
        allowed = (self.step.expect_rc, *(self.step.fast_also_rc if self.fast else ()))
        return self.rc in allowed and self.step.expect in self.output


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=tutorial", "-c", "user.email=tutorial@example.com", *args], cwd=cwd,
                   check=True, capture_output=True, text=True)


def walk(workdir: Path, *, fast: bool, python: str = sys.executable) -> list[Ran]:
    """The tutorial in ``workdir`` (empty): its file written, each step's edit, commit and command."""
    text = PAGE.read_text(encoding="utf-8")
    original = tutorial_file(text)
    test_file = workdir / "test_perf.py"
    test_file.write_text(original, encoding="utf-8")
    if fast:
        (workdir / "pytest.ini").write_text(FAST_INI, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done: list[Ran] = []
    for step in STEPS:
        if step.commit_first:
            git(workdir, "init", "-q")
            git(workdir, "add", "test_perf.py", *(["pytest.ini"] if fast else []))
            git(workdir, "commit", "-q", "-m", "model")
        test_file.write_text(step.edit(original) if step.edit else original, encoding="utf-8")
        argv = shlex.split(step.command)
        assert argv[0] == "pytest", step.command
        start = time.monotonic()
        proc = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=900)
        done.append(Ran(step, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, fast))
        if not done[-1].kept:
            break
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="a short measuring budget (what the test runs)")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"the transcript (default {OUT.relative_to(ROOT)}; none with --fast)")
    args = parser.parse_args()
    page_commands = tutorial_commands(PAGE.read_text(encoding="utf-8"))
    if page_commands != [s.command for s in STEPS]:
        print(f"docs/tutorial.md's commands {page_commands} are not the steps {[s.command for s in STEPS]}")
        return 2
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        done = walk(Path(tmp), fast=args.fast)
    lines = ["# docs/tutorial.md run step by step: `.venv/bin/python benchmarks/tutorial_run.py`",
             f"# commit {commit}, {datetime.now(timezone.utc):%Y-%m-%d}, {os.cpu_count()} cores, "
             f"load average {os.getloadavg()[0]:.1f} at the end"
             + (" (--fast: tfperf_budget 0.4, tfperf_runs 1, tfperf_explain_pairs 1)" if args.fast else ""), ""]
    for ran in done:
        lines += [f"## {ran.step.title}: {ran.step.command}",
                  f"(exit {ran.rc}, expected {ran.step.expect_rc}; {ran.seconds:.0f} s)", ran.output.rstrip(), ""]
    kept = len(done) == len(STEPS) and all(r.kept for r in done)
    lines.append("every step as the page says" if kept else f"BROKEN at: {done[-1].step.title}")
    out = args.out or (None if args.fast else OUT)
    if out is not None:
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[-1:]))
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
