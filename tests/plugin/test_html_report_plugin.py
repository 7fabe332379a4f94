"""--tfperf-html end to end with pure-Python workloads, the catalog's effect lines, and the missing extra."""

from __future__ import annotations

import json
import re
from pathlib import Path

# Loaded here, not first inside an in-process run: pytester unloads the modules a run imported,
# and matplotlib (with numpy under it) cannot be loaded twice in one process.
import matplotlib.figure  # noqa: F401
import numpy  # noqa: F401
import pandas  # noqa: F401
import pytest

from pytest_tfperf.cli import report_cli

FAST = ["--tfperf", "--tfperf-budget=0.2", "--tfperf-tolerance=90%"]

WORKLOAD = """
def work():
    return sum(i * i for i in range(2000))

def test_alone(tfperf):
    tfperf(work, items=2000)

def test_effects(tfperf):
    got = tfperf.compare({"anti": lambda: sum(range(4000)), "fix": lambda: sum(range(1000))}, items=10)
    tfperf.record_effect({"scenario": "demo", "anti": "anti", "fix": "fix", "metric": "throughput",
                          "value": 3.5, "spread": [2.5, 4.0], "min_effect": 1.5, "gated": True, "passed": True,
                          "anti_test": got["anti"].test_id, "fix_test": got["fix"].test_id})
"""


def test_html_json_and_effect_lines_from_one_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WORKLOAD)
    # A refresh, for the baseline folder the report command reads below; one process is enough for that
    # (the default 7 would start 6 more pytest processes that nothing here looks at).
    result = pytester.runpytest_inprocess(*FAST, "--tfperf-update", "--tfperf-runs=1",
                                          "--tfperf-html=out/report.html", "--tfperf-json=out/results.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*HTML report written to out/report.html*"])
    # The summary ends with the catalog section: one line per comparison, then the count.
    lines = result.stdout.lines
    start = max(i for i, line in enumerate(lines) if "tfperf catalog: fix vs anti-pattern" in line)
    section = lines[start + 1:start + 4]
    assert section[0].split()[:4] == ["scenario", "fix", "vs", "anti"]
    assert section[1].split()[:4] == ["demo", "fix", "vs", "anti"] and section[1].endswith("pass")
    assert "3.5x" in section[1] and "2.5x..4x" in section[1] and ">= 1.5x" in section[1]
    assert section[2].startswith("1 of 1 gated comparison(s) beat their margin")

    page = (pytester.path / "out" / "report.html").read_text(encoding="utf-8")
    ids = ["test_html_json_and_effect_lines_from_one_run.py::test_alone",
           "test_html_json_and_effect_lines_from_one_run.py::test_effects[anti]",
           "test_html_json_and_effect_lines_from_one_run.py::test_effects[fix]"]
    for test_id in ids:
        assert f'data-test-id="{test_id}"' in page
    assert page.count('data-plot="rounds"') == 3 and 'data-plot="catalog"' in page
    # Self-contained: no link, script, image or import reaches outside the page (xmlns URIs are names).
    assert not re.search(r'(?:src|href)\s*=\s*"(?!#)', page)
    assert "<link" not in page and "<script" not in page and "@import" not in page and "url(http" not in page

    effects = json.loads((pytester.path / "out" / "results.json").read_text())["effects"]
    assert [(e["scenario"], e["test"].split("::")[-1]) for e in effects] == [("demo", "test_effects")]

    # The same page, afterwards, from the JSON and the baseline directory.
    code = report_cli.main([str(pytester.path / "out" / "results.json"), "--baseline-dir",
                            str(pytester.path / "benchmarks" / "baselines"), "-o", str(pytester.path / "again.html")])
    assert code == 0
    again = (pytester.path / "again.html").read_text(encoding="utf-8")
    sections = re.findall(r'<section class="test[^"]*" id="([^"]+)"', page)
    assert re.findall(r'<section class="test[^"]*" id="([^"]+)"', again) == sections and len(sections) == 3


def test_html_without_matplotlib_stops_before_measuring_with_the_install_command(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("import sys\nsys.modules['matplotlib'] = None  # as if it were not installed\n")
    pytester.makepyfile(WORKLOAD)
    result = pytester.runpytest_subprocess("--tfperf", "--tfperf-html=report.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --tfperf-html draws its charts with matplotlib, which is not installed: "
                                 "pip install 'pytest-tfperf[report]'"])
    assert not (pytester.path / "report.html").exists()


def test_a_run_without_html_never_imports_matplotlib(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    print('MATPLOTLIB=' + str('matplotlib' in sys.modules))\n"
    )
    pytester.makepyfile(WORKLOAD)
    result = pytester.runpytest_subprocess(*FAST, "-s", "--tfperf-json=r.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["MATPLOTLIB=False"])
    assert Path(pytester.path / "r.json").exists()
