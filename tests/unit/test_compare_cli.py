"""tfperf-compare: exit codes, one line per test, environment refusal, Markdown, bad input."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tfperf.cli import compare as compare_cli
from pytest_tfperf.model import Environment, Measurement, MemoryPeak, MemorySource, Timings
from pytest_tfperf.storage.results_json import results_to_dict, write_results

ENV = Environment(hard=(("cpu_model", "Xeon"), ("tensorflow", "2.21.0")), soft=(("hostname", "ci-1"),))


def measurement(test_id: str, *, slowdown: float = 1.0, seed: int = 0, rounds: int = 6,
                per_round: int = 30) -> Measurement:
    rng = random.Random(seed)
    samples = tuple(max(1, int(rng.gauss(1_000_000 * slowdown, 10_000))) for _ in range(rounds * per_round))
    return Measurement(test_id=test_id, mode="call", timings=Timings(samples, (per_round,) * rounds, 32.0, 10**8),
                       memory=(MemoryPeak(MemorySource.TF_ALLOCATOR, "CPU:0", 50 * 2**20, 0, (50 * 2**20,) * rounds),),
                       traces_first_call=1, traces_steady=0)


def results(path: Path, *measurements: Measurement, env: Environment = ENV) -> Path:
    return write_results(path, results_to_dict(env, list(measurements)))


def run(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = compare_cli.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def old(tmp_path: Path) -> Path:
    return results(tmp_path / "old.json", measurement("t::a"), measurement("t::b", seed=1),
                   measurement("t::gone", seed=2))


def test_unchanged_runs_exit_zero_with_one_line_per_test(tmp_path: Path, old: Path) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", seed=10), measurement("t::b", seed=11),
                  measurement("t::added", seed=12))
    code, out, err = run(old, new)
    assert code == 0, out + err
    lines = out.splitlines()
    assert any(line.startswith("ok ") and "t::a: unchanged" in line for line in lines)
    assert any(line.startswith("only in new") and "t::added" in line for line in lines)
    assert any(line.startswith("only in old") and "t::gone" in line for line in lines)
    assert lines[-1] == "4 test(s): 2 ok, 1 only in new, 1 only in old"


def test_a_regression_exits_one_and_says_what_moved(tmp_path: Path, old: Path) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", slowdown=1.25, seed=10), measurement("t::b", seed=11))
    code, out, _ = run(old, new)
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.startswith("REGRESSED")]
    assert "t::a: throughput slower than baseline by 20%" in line
    (detail,) = [x for x in out.splitlines() if x.startswith("    throughput: ")]
    assert "-> 25," in detail and "(-19.9%, 99% bounds" in detail and "p = 0.0011" in detail
    assert "1 REGRESSED, 1 ok" in out.splitlines()[-1]


def test_an_improvement_does_not_fail(tmp_path: Path, old: Path) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", slowdown=0.7, seed=10))
    code, out, _ = run(old, new)
    assert code == 0
    assert any(x.startswith("improved") and "t::a" in x for x in out.splitlines())


def test_different_hard_environments_are_refused_unless_allowed(tmp_path: Path, old: Path) -> None:
    other = Environment(hard=(("cpu_model", "EPYC"), ("tensorflow", "2.21.0")), soft=ENV.soft)
    new = results(tmp_path / "new.json", measurement("t::a", slowdown=1.25, seed=10), env=other)
    code, out, err = run(old, new)
    assert code == 2 and out == ""
    assert "different environments (cpu_model ('Xeon' in old, 'EPYC' in new))" in err
    assert "--allow-different-environment" in err
    code, out, _ = run(old, new, "--allow-different-environment")
    assert code == 1
    assert out.startswith("note: comparing across different environments")


def test_soft_differences_are_noted_but_compared(tmp_path: Path, old: Path) -> None:
    moved = Environment(hard=ENV.hard, soft=(("hostname", "ci-2"),))
    new = results(tmp_path / "new.json", measurement("t::a", seed=10), env=moved)
    code, out, _ = run(old, new)
    assert code == 0
    assert "note: compared although hostname ('ci-1' in old, 'ci-2' in new) changed" in out


def test_markdown_table(tmp_path: Path, old: Path) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", slowdown=1.25, seed=10), measurement("t::b", seed=11))
    table = tmp_path / "report" / "compare.md"
    code, _, _ = run(old, new, "--markdown", table)
    assert code == 1
    text = table.read_text()
    assert "| Test | Result | Throughput (old → new) | Change | Details |" in text
    (row,) = [x for x in text.splitlines() if x.startswith("| `t::a`")]
    assert "| **REGRESSED** | 32,015.8 → 25,644.1 items/s | -19.9% |" in row
    assert row.count(" | ") == 4  # no stray column from the text


def test_pipes_in_test_ids_do_not_break_the_markdown_table() -> None:
    comparisons = [compare_cli.TestComparison("t::a[x|y]", note="only in new")]
    text = compare_cli.markdown_table(comparisons, Path("a.json"), Path("b.json"))
    (row,) = [x for x in text.splitlines() if x.startswith("| `t::a")]
    assert "`t::a[x\\|y]`" in row


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda p: p.write_text(p.read_text()[:100]), "truncated or corrupted"),
        (lambda p: p.unlink(), "no such file"),
        (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "schema_version": 99})),
         "written by a newer pytest-tfperf"),
    ],
)
def test_bad_input_files_exit_two_naming_the_file(tmp_path: Path, old: Path, damage: object,
                                                  expected: str) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", seed=10))
    damage(new)  # type: ignore[operator]
    code, out, err = run(old, new)
    assert code == 2 and out == ""
    assert str(new) in err and expected in err


def test_usage_errors_exit_two(tmp_path: Path, old: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(old)[0] == 2
    assert "the following arguments are required: new" in capsys.readouterr().err
    code, _, err = run(old, old, "--tolerance", "1.5")
    assert code == 2 and "--tolerance" in err and "between 0% and 100%" in err


@pytest.mark.parametrize("tolerance", ["10%", "0.1"])
def test_tolerance_takes_the_plugins_syntax(old: Path, tolerance: str) -> None:
    # The option's value copied from `pytest --tfperf-tolerance=10%` works here too.
    code, out, err = run(old, old, "--tolerance", tolerance)
    assert code == 0 and err == ""


def test_no_test_in_common_exits_two(tmp_path: Path, old: Path) -> None:
    new = results(tmp_path / "new.json", measurement("t::other"))
    code, _, err = run(old, new)
    assert code == 2 and "no measured test in common" in err


def test_a_test_that_cannot_be_judged_exits_two(tmp_path: Path, old: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", slowdown=1.25, seed=10), measurement("t::b", seed=11))
    real_judge = compare_cli.judge_rounds

    def judge(current: Measurement, baseline: Measurement, *args: object, **kwargs: object) -> object:
        if current.test_id == "t::b":
            raise ValueError("cannot compare these")
        return real_judge(current, baseline, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compare_cli, "judge_rounds", judge)
    code, out, _ = run(old, new)
    assert code == 2  # an incomplete comparison wins over the regression it also found
    assert "ERROR       t::b: cannot compare these" in out and "REGRESSED" in out


def test_console_entry_point_returns_the_exit_code(tmp_path: Path, old: Path) -> None:
    new = results(tmp_path / "new.json", measurement("t::a", slowdown=1.25, seed=10))
    done = subprocess.run([sys.executable, "-m", "pytest_tfperf.cli.compare", str(old), str(new)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr
    assert "REGRESSED" in done.stdout
