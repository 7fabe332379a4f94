"""The plugin as a user meets it: options, smoke mode, misuse, parallel runs, import weight."""

from __future__ import annotations

import fnmatch
import importlib.util
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
            tfperf.iterate(DS(), items=4, step=lambda e: e * 2)
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
    assert len(_report_sections(result.stdout.lines)["test_twice"]) == 1  # one line, no plugin frames
    result.stdout.no_fnmatch_line("*pytest_tfperf/*")


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


# -- usage errors read like pytest's own ------------------------------------------

_MISUSE = '''
import pytest

@pytest.mark.tfperf(rounds=0)
def test_bad_rounds(tfperf):
    tfperf(lambda: None)

@pytest.mark.tfperf(budget=3)
def test_unknown_argument(tfperf):
    tfperf(lambda: None)

@pytest.mark.tfperf(3)
def test_positional(tfperf):
    tfperf(lambda: None)

def test_negative_items(tfperf):
    tfperf(lambda: None, items=-3)

def test_not_callable(tfperf):
    tfperf(42)

def test_bad_items(tfperf):
    tfperf.iterate([1, 2], items=0)

def test_bad_variant_name(tfperf):
    tfperf.compare({"a b": lambda: None})

def test_bad_reference(tfperf):
    tfperf.compare({"a": lambda: None, "b": lambda: None}, reference="c")

def test_fine(tfperf):
    tfperf(lambda: None)
'''

# Each misused test's report is exactly one line: the test, the argument, what is allowed.
_MISUSE_LINES = {
    "test_bad_rounds": "test_misuse.py::test_bad_rounds: @pytest.mark.tfperf(rounds=...) must be a whole number >= 1, got 0",
    "test_unknown_argument": "test_misuse.py::test_unknown_argument: unknown @pytest.mark.tfperf argument(s) budget; "
                             "known: *budget_s*",
    "test_positional": "test_misuse.py::test_positional: @pytest.mark.tfperf takes keyword arguments only, "
                       "got positional 3",
    "test_negative_items": "test_misuse.py::test_negative_items: tfperf(..., items=...) must be a positive number of "
                           "items per iteration, got -3",
    "test_not_callable": "test_misuse.py::test_not_callable: tfperf(fn, ...) needs a callable as fn, got int 42",
    "test_bad_items": "test_misuse.py::test_bad_items: tfperf.iterate(..., "
                      "items=...) must be a positive number of items per iteration, got 0",
    "test_bad_variant_name": "test_misuse.py::test_bad_variant_name: tfperf.compare(): variant names must be short "
                             "words like 'anti' or 'fix', got 'a b'",
    "test_bad_reference": "test_misuse.py::test_bad_reference: tfperf.compare(reference='c'): the reference must be "
                          "one of at least two variants, got ['a', 'b']",
}


def _report_sections(lines: list[str]) -> dict[str, list[str]]:
    """Test name -> the lines pytest printed for it under ERRORS / FAILURES."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith("_") and line.endswith("_") and line.strip("_ "):
            name = line.strip("_ ").removeprefix("ERROR at setup of ")
            current = sections.setdefault(name, [])
        elif line.startswith("=") or line.startswith("-" * 10):
            current = None
        elif current is not None:
            current.append(line)
    return sections


@pytest.mark.parametrize("measure", [False, True], ids=["smoke", "measuring"])
def test_misuse_fails_that_test_with_one_line_and_the_session_runs_on(pytester: pytest.Pytester,
                                                                      measure: bool) -> None:
    pytester.makepyfile(test_misuse=_MISUSE)
    args = ["--tfperf", "--tfperf-budget=0.05"] if measure else []
    result = pytester.runpytest_inprocess(*args)
    # A bad marker fails the test's setup (an error, as pytest reports a bad fixture);
    # a bad call fails the test. The good test still runs and passes.
    result.assert_outcomes(errors=3, failed=5, passed=1)
    sections = _report_sections(result.stdout.lines)
    for name, expected in _MISUSE_LINES.items():
        assert len(sections[name]) == 1, (name, sections[name])
        line = sections[name][0]
        assert (fnmatch.fnmatchcase(line, expected) if "*" in expected else line == expected), (line, expected)
    result.stdout.no_fnmatch_line("*pytest_tfperf/*")
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*During handling*")

# -- without TensorFlow ---------------------------------------------------------------

_NO_TF_NOTE = "tfperf: TensorFlow cannot be imported: *pip install 'pytest-tfperf[[]tensorflow]'*tensorflow-cpu*"


def test_without_tensorflow_the_plugin_says_so_once_and_plain_workloads_still_run(pytester: pytest.Pytester) -> None:
    # In a subprocess: None in sys.modules makes every `import tensorflow` there fail.
    pytester.makeconftest("import sys\nsys.modules['tensorflow'] = None\n")
    pytester.makepyfile("def test_a(tfperf):\n    tfperf(lambda: sum(range(10)))\n\n"
                        "def test_b(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=2)
    assert len(fnmatch.filter(result.stdout.lines, _NO_TF_NOTE)) == 1


def test_with_tensorflow_installed_nothing_is_said_and_nothing_imported(pytester: pytest.Pytester) -> None:
    if importlib.util.find_spec("tensorflow") is None:  # importorskip would import it: seconds, for nothing
        pytest.skip("TensorFlow is not installed")
    pytester.makeconftest(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    print('TF_IMPORTED=' + str('tensorflow' in sys.modules))\n"
    )
    pytester.makepyfile("def test_a(tfperf):\n    tfperf(lambda: None)\n")
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["TF_IMPORTED=False"])  # looking for it did not import it
    result.stdout.no_fnmatch_line("*TensorFlow cannot be imported*")


def test_the_old_name_of_iterates_items_still_works_with_a_deprecation_warning(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
def test_old(tfperf):
    m = tfperf.iterate([1, 2, 3], items_per_element=4)
    assert m.timings.items_per_iteration == 4

def test_both(tfperf):
    tfperf.iterate([1, 2, 3], items=1, items_per_element=4)  # even at the default value, both given is refused
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "default::DeprecationWarning")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([  # the failure, then the warnings summary
        "*test_both: tfperf.iterate(..., items=..., items_per_element=...) are the same setting: keep items*",
        "*test_old: tfperf.iterate(..., items_per_element=...) is renamed items=...; the old name goes in the "
        "next release*"])
