"""The plugin as a user meets it: options, smoke mode, misuse, parallel runs, import weight."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.filterwarnings("default")


def test_help_lists_the_options_and_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest, contextlib, io\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    pytest.main(['--help'])\n"
        "print('--tfperf-baseline-dir' in buf.getvalue() and '--tfperf-html' in buf.getvalue())\n"
        "print(sorted(m for m in ('tensorflow', 'pandas', 'pynvml', 'numpy', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "True"
    assert out[1] == "[]"


def test_a_session_that_never_uses_tfperf_imports_nothing_heavy_and_writes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    heavy = sorted(m for m in ('tensorflow', 'pandas', 'pynvml') if m in sys.modules)\n"
        "    print('HEAVY=' + ','.join(heavy))\n"
    )
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("--tfperf", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["HEAVY="])
    assert not (pytester.path / "benchmarks").exists()


def test_without_tfperf_the_workload_runs_once_as_a_smoke_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        calls = []

        def test_smoke(tfperf):
            result = tfperf(lambda x: calls.append(x), 3, items=8)
            assert calls == [3]
            assert result.timings.iterations == 1
            assert result.throughput > 0

        def test_smoke_iterate(tfperf):
            pulled = []
            def gen():
                for i in range(100):
                    pulled.append(i)
                    yield i
            class DS:
                def __iter__(self):
                    return gen()
            tfperf.iterate(DS(), items_per_element=4, step=lambda e: e * 2)
            assert pulled == [0]
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*throughput*")


def test_using_the_fixture_twice_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_twice(tfperf):
            tfperf(lambda: None)
            tfperf(lambda: None)
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FixtureAlreadyUsed*already used in this test (tfperf(...))*tfperf.compare*"])


def test_a_nan_loss_fails_at_its_iteration_when_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.tfperf(check_finite=True)
        def test_nan(tfperf):
            tfperf(lambda: float("nan"))
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*non-finite value at iteration 0*"])


@pytest.mark.parametrize(("args", "message"), [
    (["--tfperf-budget=abc"], "*argument --tfperf-budget: expected a number, got 'abc'*"),
    (["--tfperf-tolerance=150%"], "*argument --tfperf-tolerance: expected a tolerance between 0% and 100%*"),
    (["--tfperf-rounds=0"], "*argument --tfperf-rounds: expected a whole number of at least 1*"),
    (["--tfperf-update"], "*--tfperf-update needs --tfperf*"),
])
def test_bad_option_values_are_refused_with_a_clear_message(pytester: pytest.Pytester, args: list[str],
                                                             message: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess(*args)
    assert result.ret != 0
    result.stderr.fnmatch_lines([message])


def test_unknown_marker_argument_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.tfperf(budget=3)
        def test_x(tfperf):
            tfperf(lambda: None)
        """
    )
    result = pytester.runpytest_inprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*unknown @pytest.mark.tfperf argument(s) budget; known:*budget_s*"])


def test_measuring_under_xdist_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest_subprocess("--tfperf", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tests running in parallel (pytest-xdist -n)*Run the measured tests serially*"])


def test_smoke_mode_runs_fine_under_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(tfperf):\n    tfperf(lambda: None)\n\ndef test_y(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=2)
