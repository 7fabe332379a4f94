"""pytest glue: options, the ``tfperf`` fixture, the marker, the end-of-session summary.

Hooks stay thin: they read configuration and call one thing. Loading this
module imports neither TensorFlow, pandas nor pynvml: pytest loads it in every
run, including ``pytest --help`` and sessions that never measure anything.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from pytest_tfperf.config import (
    DEFAULT_BASELINE_DIR,
    DEFAULT_RUNS,
    PARTNER_ENV,
    RUN_CHILD_ENV,
    MarkerOptions,
    SessionConfig,
    fraction,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:
    from pytest_tfperf.session.fixture import TfPerf
    from pytest_tfperf.session.session import TfPerfSession

# The measuring modules (fixture, session, runner) are imported on first use:
# pytest --help and sessions without tfperf tests never pay for them.
SESSION_KEY = pytest.StashKey["TfPerfSession"]()
# Why TensorFlow cannot be imported (None: it can), looked up on the fixture's first use and said once, at the end.
TENSORFLOW_PROBLEM_KEY = pytest.StashKey["str | None"]()

OPT_MEASURE = "--tfperf"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfperf", "performance regression testing of TensorFlow workloads")
    group.addoption(OPT_MEASURE, action="store_true", default=False,
                    help="measure tfperf tests (without it they run their workload once, as a smoke test)")
    group.addoption("--tfperf-json", metavar="PATH", default=None,
                    help="write every result (samples, environment, verdicts) to a versioned JSON document")
    group.addoption("--tfperf-html", metavar="PATH", default=None,
                    help="write a self-contained HTML report with charts (needs the [report] extra: "
                         "pip install 'pytest-tfperf[report]'); tfperf-report builds it later from --tfperf-json files")
    group.addoption("--tfperf-markdown", metavar="PATH", default=None,
                    help="write a Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set)")
    group.addoption("--tfperf-budget", metavar="SECONDS", type=positive_float, default=None,
                    help="steady-state seconds per benchmark (default: ini tfperf_budget or 2)")
    group.addoption("--tfperf-rounds", metavar="N", type=positive_int, default=None,
                    help="timed rounds per benchmark (default: ini tfperf_rounds or 5)")
    group.addoption("--tfperf-baseline-dir", metavar="DIR", default=None,
                    help=f"where baselines live (default: ini tfperf_baseline_dir or {DEFAULT_BASELINE_DIR})")
    group.addoption("--tfperf-update", action="store_true", default=False,
                    help="write the baselines of the tests that ran (others' baselines are kept)")
    group.addoption("--tfperf-update-improved", action="store_true", default=False,
                    help="with --tfperf-update: only refresh baselines whose numbers improved")
    group.addoption("--tfperf-strict", action="store_true", default=None,
                    help="fail tests that have no baseline for this environment (default: ini tfperf_strict or "
                         "false)")
    group.addoption("--tfperf-tolerance", metavar="PCT", type=fraction, default=None,
                    help="throughput slowdown the gate must catch, 10%% or 0.1 (default: ini tfperf_tolerance "
                         "or 10%%)")
    group.addoption("--tfperf-runs", metavar="N", type=positive_int, default=None,
                    help="with --tfperf-update: measure each test in N processes, so the baseline knows this "
                         f"machine's spread between processes (default: ini tfperf_runs or {DEFAULT_RUNS})")
    group.addoption("--tfperf-record", action="store_true", default=False,
                    help="add this run's figures to the baseline directory's history (history.csv) without "
                         "replacing any baseline: CI on the main branch sharpens the gate's noise estimate")
    group.addoption("--tfperf-throughput-gate", choices=("warn", "fail"), default=None,
                    help="what a throughput regression against a STORED baseline does (default: ini "
                         "tfperf_throughput_gate or fail; memory, trace and paired regressions always fail)")
    group.addoption("--tfperf-against", metavar="REV_OR_DIR", default=None,
                    help="measure each test beside the same test of another version of the code (a git revision, "
                         "checked out for the run, or a directory), rounds interleaved, and judge the pair: the "
                         "reliable gate on a noisy machine. auto: the merge base with the pull request's target "
                         "(GitHub Actions, GitLab), else with the upstream or origin/main")
    group.addoption("--tfperf-explain", action="store_true", default=None,
                    help="explain a failed throughput or memory verdict from TensorFlow's profiler: profile both "
                         "sides after the measurement (never in the timed rounds, never on a passing test) and "
                         "say which ops or tf.data stages moved; with --tfperf-update, store each test's compact "
                         "profile in its baseline (default: on, unless ini tfperf_explain = false)")
    group.addoption("--no-tfperf-explain", action="store_false", dest="tfperf_explain", default=None,
                    help="no profiled pass and no explanation, for a failed verdict or a refresh")
    group.addoption("--tfperf-explain-pairs", metavar="N", type=positive_int, default=None,
                    help="with --tfperf-against: profile a red verdict in N pairs of processes and test each layer "
                         "and op across them; fewer are cheaper and find less, 1 blames more by chance (default: ini "
                         "tfperf_explain_pairs or 5)")
    group.addoption("--tfperf-stall-timeout", metavar="SECONDS", type=positive_float, default=None,
                    help="longest an iteration may run before it fails as stalled (default 300; per test: marker "
                         "stall_timeout_s)")
    group.addoption("--tfperf-no-watchdog", action="store_true", default=False,
                    help="run workloads on the test's own thread, without stall detection")
    parser.addini("tfperf_baseline_dir", "directory of tfperf baselines", default=DEFAULT_BASELINE_DIR)
    parser.addini("tfperf_budget", "steady-state seconds per benchmark", default="2")
    parser.addini("tfperf_rounds", "timed rounds per benchmark", default="5")
    parser.addini("tfperf_throughput_gate", "warn or fail on a stored-baseline throughput regression",
                  default="fail")
    parser.addini("tfperf_explain", "explain a failed verdict from a profiled pass of each side (default true)",
                  type="bool", default=True)
    parser.addini("tfperf_explain_pairs", "pairs of processes a red --tfperf-against verdict is profiled in "
                  "(default 5)", default="5")
    parser.addini("tfperf_runs", "processes a baseline refresh measures each test in", default=str(DEFAULT_RUNS))
    parser.addini("tfperf_strict", "fail tests that have no baseline for this environment", type="bool",
                  default=False)
    parser.addini("tfperf_tolerance", "throughput slowdown the gate must catch, 10% or 0.1 (default 10%)",
                  default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tfperf(**settings): per-test settings of the tfperf fixture (budget_s, rounds, tolerance, "
        "max_peak_tf_bytes, max_peak_rss_bytes, max_peak_device_bytes, min_throughput, max_traces, ...)",
    )
    session_config = _session_config(config)
    if session_config.measure and _parallel_workers(config):
        raise pytest.UsageError(
            "--tfperf measures timings, and tests running in parallel (pytest-xdist -n) would slow each "
            "other down and corrupt every figure. Run the measured tests serially: add -n 0 (or -p no:xdist)."
        )
    if session_config.against is not None:
        session_config = _resolve_against(session_config, config)
    if session_config.html_path is not None and not _plotting_installed():
        # Now, not after an hour of measuring.
        raise pytest.UsageError("--tfperf-html draws its charts with matplotlib, which is not installed: "
                                "pip install 'pytest-tfperf[report]'")
    if session_config.measure:
        _check_output_paths(session_config, config)
    config.stash[CONFIG_KEY] = session_config


def _check_output_paths(c: SessionConfig, config: pytest.Config) -> None:
    """Every file the session will write, tried now: a path that cannot be written fails before measuring."""
    from pathlib import Path

    from pytest_tfperf.storage.atomic_files import why_unwritable

    here = config.invocation_params.dir
    checks: list[tuple[str, str, Path, dict[str, bool]]] = []  # (what the user gave, the path, where, how)
    # A refresh's extra process writes its results to a file the refresh chose: nothing the user gave.
    if c.json_path and c.gate:
        checks.append(("--tfperf-json", c.json_path, here / c.json_path, {}))
    if c.markdown_path:
        checks.append(("--tfperf-markdown", c.markdown_path, here / c.markdown_path, {"in_place": True}))
    if c.html_path:
        checks.append(("--tfperf-html", c.html_path, here / c.html_path, {}))
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and c.gate and PARTNER_ENV not in os.environ:
        checks.append(("$GITHUB_STEP_SUMMARY", step_summary, here / step_summary, {"in_place": True}))
    if c.update or c.record:
        option = "--tfperf-baseline-dir" if config.getoption("--tfperf-baseline-dir") else "ini tfperf_baseline_dir"
        checks.append((option, c.baseline_dir, config.rootpath / c.baseline_dir, {"directory": True}))
    for option, given, path, how in checks:
        why = why_unwritable(path, **how)
        if why is not None:
            raise pytest.UsageError(f"{option}={given}: cannot be written: {why}; nothing was measured: "
                                    "choose a writable path")


def _plotting_installed() -> bool:
    """Whether matplotlib can be imported, found without importing it (plugin load stays light)."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def _resolve_against(c: SessionConfig, config: pytest.Config) -> SessionConfig:
    """--tfperf-against checked before anything is measured: a revision or directory the user named must exist;
    ``auto`` is looked up, and where no baseline revision can be found the stored gate judges, saying why."""
    import dataclasses

    from pytest_tfperf.against.baseline_revision import AUTO, NoBaselineRevision, find_baseline_revision
    from pytest_tfperf.against.partner_tree import PartnerError, resolve_against

    assert c.against is not None
    if c.against != AUTO:
        # A mistyped revision must stop the run before anything is measured: the user named it, so a red run
        # with one line is what they need, not a stored-gate run that passes on a CI machine it cannot judge.
        try:
            resolve_against(c.against, config.invocation_params.dir)
        except PartnerError as exc:
            raise pytest.UsageError(str(exc)) from None
        return c
    try:
        found = find_baseline_revision(config.invocation_params.dir, os.environ)
    except NoBaselineRevision as exc:
        # auto runs wherever the workflow runs (a push to main, a fork without history): no baseline there is
        # a situation, not a mistake, so the run goes on under the stored gate and every report says so.
        return dataclasses.replace(c, against=None, against_fallback=str(exc))
    return dataclasses.replace(c, against=found.short, against_found=found.describe())


def pytest_report_header(config: pytest.Config) -> list[str]:
    c = config.stash.get(CONFIG_KEY, None)
    if c is None:
        return []
    if c.against_found:
        return [f"tfperf: {c.against_found}"]
    if c.against_fallback:
        return [f"tfperf: {c.against_fallback}; the tests are judged by the stored gate (stored baselines) instead"]
    return []


CONFIG_KEY = pytest.StashKey[SessionConfig]()


def _session(config: pytest.Config) -> TfPerfSession:
    """The session's measurement state, created when the first tfperf test runs."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        from pytest_tfperf.session.session import TfPerfSession

        session = TfPerfSession(config.stash[CONFIG_KEY], str(config.rootpath))
        session.partner_server = config.stash.get(PARTNER_SERVER_KEY, None)
        session.invocation = (str(config.invocation_params.dir), _test_args(config))
        session.invocation_args = tuple(config.invocation_params.args)
        config.stash[SESSION_KEY] = session
    return session


def _test_args(config: pytest.Config) -> list[str]:
    """The paths and node ids this session was given (none when they came from ini testpaths)."""
    return list(config.args) if config.args_source is pytest.Config.ArgsSource.ARGS else []


PARTNER_SERVER_KEY = pytest.StashKey[Any]()


def pytest_sessionstart(session: pytest.Session) -> None:
    c = session.config.stash.get(CONFIG_KEY, None)
    # Only under --tfperf-against is the session made this early; --collect-only measures nothing.
    if c is not None and c.against is not None and not session.config.option.collectonly:
        _session(session.config).start_partner_early()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    # A partner session runs tests when the session that started it asks, not in collection order.
    if PARTNER_ENV not in os.environ or not session.config.stash[CONFIG_KEY].measure:
        return None
    from pytest_tfperf.against.partner_server import PartnerServer

    server = PartnerServer.from_environment()
    # Consumed: a pytest that a test starts in turn (pytester, say) is nobody's partner.
    del os.environ[PARTNER_ENV]
    session.config.stash[PARTNER_SERVER_KEY] = server
    session.config.pluginmanager.register(server, "tfperf-partner-server")
    server.serve(session.items, lambda item: item.ihook.pytest_runtest_protocol(item=item, nextitem=None))
    return True


def _session_config(config: pytest.Config) -> SessionConfig:
    opt = config.getoption
    budget = opt("--tfperf-budget") or _ini_number(config, "tfperf_budget", positive_float)
    rounds = opt("--tfperf-rounds") or int(_ini_number(config, "tfperf_rounds", positive_int))
    if opt("--tfperf-update-improved") and not opt("--tfperf-update"):
        raise pytest.UsageError("--tfperf-update-improved only makes sense with --tfperf-update")
    if opt("--tfperf-update") and not opt(OPT_MEASURE):
        raise pytest.UsageError("--tfperf-update needs --tfperf: baselines come from measurements")
    stall = opt("--tfperf-stall-timeout")
    if opt("--tfperf-against") is not None and not opt(OPT_MEASURE):
        raise pytest.UsageError("--tfperf-against needs --tfperf: the two versions are measured side by side")
    if opt("--tfperf-against") is not None and opt("--tfperf-update"):
        raise pytest.UsageError("--tfperf-against judges against another version of the code, not stored "
                                "baselines; refresh baselines in a run without it")
    if opt("--tfperf-record") and not opt(OPT_MEASURE):
        raise pytest.UsageError("--tfperf-record needs --tfperf: the history records measurements")
    if opt("--tfperf-record") and opt("--tfperf-against") is not None:
        raise pytest.UsageError("--tfperf-record records runs measured alone; a run beside --tfperf-against is "
                                "measured differently (20 paired rounds): record in a run without it")
    partner = PARTNER_ENV in os.environ  # this session is another session's partner: it only measures
    # One of a refresh's extra processes: measure and write the results there, nothing else. Consumed, so
    # that a pytest started by one of its tests (pytester) is an ordinary session.
    child_json = os.environ.pop(RUN_CHILD_ENV, None) if opt(OPT_MEASURE) else None
    quiet = partner or child_json is not None
    throughput_gate = opt("--tfperf-throughput-gate") or str(config.getini("tfperf_throughput_gate")).strip()
    if throughput_gate not in ("warn", "fail"):
        raise pytest.UsageError(f"ini option tfperf_throughput_gate = {throughput_gate!r}: expected warn or fail")
    runs = opt("--tfperf-runs") or int(_ini_number(config, "tfperf_runs", positive_int))
    explain_pairs = opt("--tfperf-explain-pairs") or int(_ini_number(config, "tfperf_explain_pairs", positive_int))
    return SessionConfig(
        measure=opt(OPT_MEASURE),
        json_path=child_json if child_json is not None else (None if partner else opt("--tfperf-json")),
        markdown_path=None if quiet else opt("--tfperf-markdown"),
        html_path=None if quiet else opt("--tfperf-html"),
        budget_s=float(budget),
        rounds=int(rounds),
        baseline_dir=opt("--tfperf-baseline-dir") or config.getini("tfperf_baseline_dir"),
        update=opt("--tfperf-update") and not quiet,
        runs=int(runs),
        record=opt("--tfperf-record") and not quiet,
        gate=child_json is None,
        calibrate=(opt("--tfperf-update") and not quiet) or child_json is not None,
        update_improved_only=opt("--tfperf-update-improved"),
        strict=bool(opt("--tfperf-strict") if opt("--tfperf-strict") is not None
                    else _ini_bool(config, "tfperf_strict")),
        tolerance=opt("--tfperf-tolerance") or _ini_tolerance(config),
        stall_ceiling_s=stall if stall is not None else 300.0,
        watchdog=not opt("--tfperf-no-watchdog"),
        throughput_gate=throughput_gate,
        # pytest's own faulthandler timer is the same single timer: leave it alone when set.
        hard_exit=not float(config.getini("faulthandler_timeout") or 0),
        against=None if quiet else opt("--tfperf-against"),
        explain=bool(opt("tfperf_explain") if opt("tfperf_explain") is not None
                     else config.getini("tfperf_explain")),
        explain_pairs=int(explain_pairs),
    )


def _ini_number(config: pytest.Config, name: str, parse):  # type: ignore[no-untyped-def]
    raw = str(config.getini(name))
    try:
        return parse(raw)
    except Exception as exc:  # argparse.ArgumentTypeError
        raise pytest.UsageError(f"ini option {name} = {raw!r}: {exc}") from None


def _ini_bool(config: pytest.Config, name: str) -> bool:
    try:
        return bool(config.getini(name))
    except (ValueError, pytest.UsageError) as exc:  # pytest parses a bool ini value itself, without its key
        raise pytest.UsageError(f"ini option {name}: {exc}; expected true or false") from None


def _ini_tolerance(config: pytest.Config) -> float | None:
    """ini tfperf_tolerance, in the option's syntax (``10%`` or ``0.1``); unset: the comparison's default."""
    if not str(config.getini("tfperf_tolerance")).strip():
        return None
    return float(_ini_number(config, "tfperf_tolerance", fraction))


def _parallel_workers(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput"):
        return True
    n = config.getoption("numprocesses", default=None) if config.pluginmanager.hasplugin("xdist") else None
    return bool(n)


@pytest.fixture
def tfperf(request: pytest.FixtureRequest) -> TfPerf:
    """Measure a TensorFlow workload: ``tfperf(fn, *args, items=...)``, ``tfperf.iterate(ds, ...)``,
    ``tfperf.compare({...})``. Without ``--tfperf`` the workload runs once, as a smoke test."""
    marker = request.node.get_closest_marker("tfperf")
    # A bad marker fails this test's setup with one line, as pytest reports its
    # own misuse; the rest of the session runs on.
    if marker is not None and marker.args:
        pytest.fail(f"{request.node.nodeid}: @pytest.mark.tfperf takes keyword arguments only, "
                    f"got positional {', '.join(repr(a) for a in marker.args)}", pytrace=False)
    try:
        options = MarkerOptions.from_kwargs(marker.kwargs if marker else {}, request.node.nodeid)
    except ValueError as exc:
        problem = str(exc)
    else:
        problem = None
    if problem is not None:  # failed outside the except block, or pytest prints the message twice
        pytest.fail(problem, pytrace=False)
    from pytest_tfperf.storage.baseline_store import stable_test_key
    from pytest_tfperf.session.fixture import TfPerf

    _look_for_tensorflow(request.config)
    session = _session(request.config)
    return TfPerf(stable_test_key(request.node.nodeid), options, session, session.config, node_id=request.node.nodeid)


def _look_for_tensorflow(config: pytest.Config) -> None:
    if TENSORFLOW_PROBLEM_KEY not in config.stash:
        from pytest_tfperf.probes.environment import tensorflow_problem

        config.stash[TENSORFLOW_PROBLEM_KEY] = tensorflow_problem()


def pytest_runtest_teardown(item: pytest.Item) -> None:
    # JUnit XML reads properties from the teardown report, which copies item.user_properties:
    # the same route as pytest's own record_property fixture.
    session = item.config.stash.get(SESSION_KEY, None)
    if session is not None:
        item.user_properties.extend(session.report_properties(item.nodeid))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    session = terminalreporter.config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    problem = terminalreporter.config.stash.get(TENSORFLOW_PROBLEM_KEY, None)
    lines = ([f"tfperf: {problem}"] if problem else []) + session.summary_lines()
    if lines:
        terminalreporter.write_sep("-", "tfperf")
        for line in lines:
            terminalreporter.write_line(line)
    if session.effects:
        # Last, because it is the catalog's answer: how much each fix beats its anti-pattern here.
        from pytest_tfperf.reports.effect_lines import effect_lines

        terminalreporter.write_sep("-", "tfperf catalog: fix vs anti-pattern on this machine")
        for line in effect_lines(session.effects):
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    tfperf_session = session.config.stash.get(SESSION_KEY, None)
    if tfperf_session is not None and not tfperf_session.finish() and exitstatus == pytest.ExitCode.OK:
        # A baseline or result file that could not be written must not pass silently in CI.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
