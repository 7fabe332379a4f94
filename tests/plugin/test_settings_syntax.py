"""One syntax per idea: a tolerance reads `10%` or `0.1` on the command line, in the ini file, in a marker and in
every script; the stall setting has one name (`--tfperf-stall-timeout`, marker `stall_timeout_s`), its old marker
name still works for a release, with a deprecation warning."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from pytest_tfperf.bisect import cli as bisect_cli
from pytest_tfperf.config import MarkerOptions

pytestmark = pytest.mark.filterwarnings("default")

SHOW_TOLERANCE = (
    "import pytest\n"
    "from pytest_tfperf.plugin import CONFIG_KEY\n"
    "def pytest_sessionstart(session):\n"
    "    print('TOLERANCE=' + repr(session.config.stash[CONFIG_KEY].tolerance))\n"
)


@pytest.mark.parametrize(("ini", "expected"), [("10%", 0.1), ("0.05", 0.05), ("", None)])
def test_ini_tfperf_tolerance_takes_the_options_syntax(pytester: pytest.Pytester, ini: str,
                                                       expected: float | None) -> None:
    pytester.makeini(f"[pytest]\ntfperf_tolerance = {ini}\n" if ini else "[pytest]\n")
    pytester.makeconftest(SHOW_TOLERANCE)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-s")
    result.stdout.fnmatch_lines([f"TOLERANCE={expected!r}"])


def test_the_option_wins_over_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntfperf_tolerance = 20%\n")
    pytester.makeconftest(SHOW_TOLERANCE)
    pytester.makepyfile("def test_x():\n    pass\n")
    pytester.runpytest_subprocess("-s", "--tfperf-tolerance=0.1").stdout.fnmatch_lines(["TOLERANCE=0.1"])


def test_a_bad_ini_tolerance_is_one_line_naming_the_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntfperf_tolerance = ten\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option tfperf_tolerance = 'ten': expected a percentage like 10%*"])
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("value", ["10%", 0.1])
def test_a_marker_tolerance_takes_the_options_syntax(value: object) -> None:
    assert MarkerOptions.from_kwargs({"tolerance": value}, "t").tolerance == pytest.approx(0.1)


def test_a_bad_marker_tolerance_names_the_test() -> None:
    with pytest.raises(ValueError, match=r"test_x: @pytest.mark.tfperf\(tolerance=...\): expected a percentage"):
        MarkerOptions.from_kwargs({"tolerance": "ten"}, "test_x")


def test_the_stall_setting_has_one_name_and_the_old_one_warns() -> None:
    assert MarkerOptions.from_kwargs({"stall_timeout_s": 30}, "t").stall_ceiling_s == 30
    with pytest.warns(DeprecationWarning, match=r"stall_ceiling_s=...\) is renamed stall_timeout_s"):
        assert MarkerOptions.from_kwargs({"stall_ceiling_s": 40}, "test_x").stall_ceiling_s == 40
    with pytest.raises(ValueError, match="same setting"):
        MarkerOptions.from_kwargs({"stall_ceiling_s": 40, "stall_timeout_s": 30}, "test_x")


def test_the_old_stall_marker_name_warns_in_a_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.tfperf(stall_ceiling_s=30)\n"
                        "def test_x(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest_subprocess("-W", "default")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*DeprecationWarning*stall_ceiling_s=...) is renamed stall_timeout_s*"])


def test_bisect_help_prints_a_plain_percent_sign() -> None:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        bisect_cli.main(["--help"])
    assert "tolerance=10%," in out.getvalue() and "%%" not in out.getvalue()


SHOW_PAIRS = SHOW_TOLERANCE.replace("TOLERANCE=", "PAIRS=").replace(".tolerance)", ".explain_pairs)")


@pytest.mark.parametrize(("ini", "option", "expected"), [("", None, 5), ("1", None, 1), ("2", "4", 4)])
def test_the_pairs_a_red_verdict_is_profiled_in_come_from_the_option_or_the_ini_key(
        pytester: pytest.Pytester, ini: str, option: str | None, expected: int) -> None:
    pytester.makeini(f"[pytest]\ntfperf_explain_pairs = {ini}\n" if ini else "[pytest]\n")
    pytester.makeconftest(SHOW_PAIRS)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-s", *([f"--tfperf-explain-pairs={option}"] if option else []))
    result.stdout.fnmatch_lines([f"PAIRS={expected!r}"])


@pytest.mark.parametrize(("where", "line"), [
    ("ini", "*ini option tfperf_explain_pairs = 'three': *"),
    ("option", "*argument --tfperf-explain-pairs: *0*"),
])
def test_a_bad_number_of_pairs_is_one_line_naming_where_it_was_given(pytester: pytest.Pytester, where: str,
                                                                     line: str) -> None:
    pytester.makeini("[pytest]\ntfperf_explain_pairs = three\n" if where == "ini" else "[pytest]\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*(["--tfperf-explain-pairs=0"] if where == "option" else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    assert "Traceback" not in result.stderr.str()
