"""docs/tutorial.md walked as a reader walks it: its test file, its edits and every command on the page, in
order, each with the exit code and the line the page promises (``benchmarks/tutorial_run.py``; an ini file
shortens the measuring, the commands stay as written). The transcript the page quotes comes from the same
script at full length."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None or shutil.which("git") is None,
                                reason="needs TensorFlow and git")


def tutorial_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tutorial_run", ROOT / "benchmarks" / "tutorial_run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_steps_are_the_commands_on_the_page() -> None:
    run = tutorial_run()
    assert run.tutorial_commands(run.PAGE.read_text(encoding="utf-8")) == [s.command for s in run.STEPS]


def test_every_step_of_the_tutorial_does_what_the_page_says(tmp_path: Path) -> None:
    run = tutorial_run()
    done = run.walk(tmp_path, fast=True)
    broken = [r for r in done if not r.kept]
    assert not broken and len(done) == len(run.STEPS), (
        f"{broken[0].step.title}: exit {broken[0].rc} (the page says {broken[0].step.expect_rc}), "
        f"looked for {broken[0].step.expect!r} in:\n{broken[0].output[-4000:]}" if broken else done)
    planted = next(r for r in done if "Plant" in r.step.title)
    assert "where the time went" in planted.output  # step 6: the red verdict comes explained
