"""--tfperf-against --tfperf-explain end to end, with a fake profiler in both trees (pure-Python workloads): the
partner profiles its side in its own process when asked, after its result; the failure message and the JSON
carry the attribution; profiler trouble on the partner's side is one line and the verdict stands.
The partner's timeout is unit-tested (tests/unit/test_partner.py); a real model: benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CONFTEST = """
import os
import pytest
from pytest_tfperf.profiling import capture
from pytest_tfperf.profiling.profile_model import Group, Profile

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.basename(HERE)

def fake_profile_step(step, logdir, *, name, windows, iterations, **budget):
    step()
    with open(os.path.join(HERE, "..", "profiled.txt"), "a") as fh:
        fh.write(f"{TREE}:{name}:{os.getpid()}:{logdir}\\n")
    if TREE == "baseline" and os.environ.get("PARTNER_PROFILER") == "broken":
        return capture.ProfileOutcome(None, "another profiler session is running", None, 0.0)
    groups = [Group("layer:body", "layer", "body", ("MatMul",), (0.010, 0.0101, 0.0099, 0.01, 0.01))]
    if TREE == "change":
        groups.append(Group("layer:planted", "layer", "planted", ("MatMul",), (0.05, 0.051, 0.049, 0.05, 0.05)))
    profile = Profile(name=name, iterations=iterations, wall=(0.02,) * 5, groups=tuple(groups),
                      other=(0.0,) * 5, smallest_kept=0.0, input_wait=(0.0,) * 5, elements=0.0, logdir=str(logdir))
    return capture.ProfileOutcome(profile, None, str(logdir), 0.0)

@pytest.fixture(autouse=True)
def _fake_profiler(monkeypatch):
    monkeypatch.setattr(capture, "profile_step", fake_profile_step)
"""

MODULE = """
def test_slow(tfperf):
    tfperf(lambda: sum(range({work})))

def test_same(tfperf):
    tfperf(lambda: sum(range(1000)))
"""


def make_trees(root: Path) -> Path:
    for tree, work in (("baseline", 1000), ("change", 30000)):
        (root / tree).mkdir()
        (root / tree / "conftest.py").write_text(CONFTEST)
        (root / tree / "test_mod.py").write_text(MODULE.format(work=work))
        (root / tree / "pytest.ini").write_text("[pytest]\n")
    return root / "change"


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tfperf",
                           "--tfperf-against=../baseline", "--tfperf-budget=0.2", "--tfperf-no-watchdog", *args],
                          cwd=cwd, env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)


def profiled(root: Path) -> list[list[str]]:
    path = root / "profiled.txt"
    return [line.split(":", 3) for line in path.read_text().splitlines()] if path.exists() else []


def test_each_side_is_profiled_in_its_own_process_and_the_change_is_attributed(tmp_path: Path) -> None:
    change = make_trees(tmp_path)
    # no option: explanations are on by default (three pairs of processes asked for, not the default five:
    # the pairs' machinery is the same, and each pair costs this test two process starts)
    proc = run(change, "--tfperf-explain-pairs=3", f"--tfperf-json={tmp_path / 'out.json'}",
               f"--tfperf-html={tmp_path / 'report.html'}", f"--tfperf-markdown={tmp_path / 'summary.md'}")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "test_mod.py::test_slow: performance regressed against ../baseline" in out
    # The partner profiled its side (in its process, its tree's code), then this session its own; then two more
    # pairs of processes, each version in each, no process profiled twice, the version set up first profiled
    # second and which one that is alternating (this tree's in pair 2, the baseline's in pair 3); test_same passed.
    calls = profiled(tmp_path)
    assert [(tree, side) for tree, side, _, _ in calls] == [
        ("baseline", "partner"), ("change", "this"), ("baseline", "partner-2"), ("change", "this-2"),
        ("change", "this-3"), ("baseline", "partner-3")]
    assert len({pid for _, _, pid, _ in calls} | {str(os.getpid())}) == 7
    assert "each layer, op, tf.data stage and the wait for input tested across the 3 pairs of processes" in out
    # Both raw profiles are kept under this session's rootdir.
    assert calls[0][3] == str(change / ".tfperf" / "profiles" / "test_mod.py_test_slow" / "partner")
    assert calls[1][3] == str(change / ".tfperf" / "profiles" / "test_mod.py_test_slow" / "this")
    assert "where the time went: +" in out
    assert "planted (MatMul family) appeared +50.0 ms" in out
    assert (f"raw profiles: tensorboard --logdir {calls[0][3]} (baseline), tensorboard --logdir {calls[1][3]} "
            "(current)") in out
    assert "does not profile the other version" not in out
    tests = json.loads((tmp_path / "out.json").read_text())["tests"]
    assert tests["test_mod.py::test_slow"]["explanation"]["causes"][0]["key"] == "layer:planted"
    assert "explanation" not in tests["test_mod.py::test_same"]
    assert "planted (MatMul family) appeared +50.00 ms/iteration" in (tmp_path / "summary.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert page.count('data-explain="time"') == 1 and "planted (MatMul family)</td>" in page
    assert f"tensorboard --logdir {calls[0][3]}" in page


def test_nothing_is_profiled_with_explanations_turned_off(tmp_path: Path) -> None:
    change = make_trees(tmp_path)
    proc = run(change, "--no-tfperf-explain")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert profiled(tmp_path) == [] and "where the time went" not in proc.stdout


def test_profiler_trouble_on_the_partners_side_is_one_line_and_the_verdict_stands(tmp_path: Path) -> None:
    change = make_trees(tmp_path)
    proc = run(change, "--tfperf-explain", PARTNER_PROFILER="broken")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "test_mod.py::test_slow: performance regressed against ../baseline" in out
    assert ("  no explanation: the partner side could not be profiled: another profiler session is running"
            in out)
    assert [(tree, side) for tree, side, _, _ in profiled(tmp_path)] == [("baseline", "partner")]
    assert "1 failed, 1 passed" in out
