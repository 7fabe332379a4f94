"""Shards of a split suite: merged into one run, a test in two shards refused, tfperf-compare reads them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pytest_tfperf.cli import compare as compare_cli
from pytest_tfperf.model import Environment
from pytest_tfperf.storage.results_json import results_to_dict, write_results
from pytest_tfperf.reports.shards import ShardError, expand_paths, load_shards
from tests.unit.test_compare_cli import ENV, measurement

GPU_ENV = Environment(hard=(("cpu_model", "Xeon"), ("gpu", "H100"), ("tensorflow", "2.21.0")))


def shard(path: Path, *ids: str, env: Environment = ENV, slowdown: float = 1.0) -> Path:
    measured = [measurement(i, seed=n, slowdown=slowdown) for n, i in enumerate(ids)]
    return write_results(path, results_to_dict(env, measured))


def test_shards_merge_each_test_keeping_its_environment(tmp_path: Path) -> None:
    shard(tmp_path / "s" / "1.json", "t::a", "t::b")
    shard(tmp_path / "s" / "2.json", "t::c", env=GPU_ENV)
    merged = load_shards([tmp_path / "s"])
    assert merged.test_ids == ("t::a", "t::b", "t::c")
    assert merged.environment_of("t::c") == GPU_ENV and merged.environment_of("t::a") == ENV
    assert len(merged.environments) == 2 and len(merged.sources) == 2


def test_a_test_in_two_environments_is_refused_naming_both_files(tmp_path: Path) -> None:
    one = shard(tmp_path / "1.json", "t::a")
    two = shard(tmp_path / "2.json", "t::a", env=GPU_ENV)
    with pytest.raises(ShardError, match="t::a is in two shards measured in different environments") as info:
        load_shards([one, two])
    assert str(one) in str(info.value) and str(two) in str(info.value)


def test_a_test_in_two_shards_of_one_environment_is_refused_and_one_file_named_twice_is_read_once(
        tmp_path: Path) -> None:
    one = shard(tmp_path / "d" / "1.json", "t::a")
    two = shard(tmp_path / "2.json", "t::a")
    with pytest.raises(ShardError, match="must run in exactly one shard"):
        load_shards([one, two])
    assert expand_paths([one, tmp_path / "d"]) == [one]
    assert load_shards([one, tmp_path / "d"]).test_ids == ("t::a",)


def test_globs_and_empty_selections(tmp_path: Path) -> None:
    shard(tmp_path / "a" / "results.json", "t::a")
    shard(tmp_path / "b" / "results.json", "t::b")
    assert load_shards([str(tmp_path / "*" / "results.json")]).test_ids == ("t::a", "t::b")
    with pytest.raises(ShardError, match="no file matches"):
        expand_paths([str(tmp_path / "*.nothing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ShardError, match="without any .json"):
        expand_paths([tmp_path / "empty"])


def run(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = compare_cli.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_tfperf_compare_takes_the_shards_of_each_side(tmp_path: Path) -> None:
    shard(tmp_path / "old" / "1.json", "t::a", "t::b")
    shard(tmp_path / "old" / "2.json", "t::c")
    shard(tmp_path / "new" / "x.json", "t::a")
    shard(tmp_path / "new" / "y.json", "t::b", "t::c", slowdown=1.3)
    code, out, err = run(tmp_path / "old", str(tmp_path / "new" / "*.json"))
    assert code == compare_cli.EXIT_REGRESSION, out + err
    assert out.splitlines()[-1] == "3 test(s): 2 REGRESSED, 1 ok"


def test_tfperf_compare_checks_environments_test_by_test(tmp_path: Path) -> None:
    shard(tmp_path / "old" / "1.json", "t::a")
    shard(tmp_path / "old" / "2.json", "t::g", env=GPU_ENV)
    shard(tmp_path / "new" / "1.json", "t::a")
    shard(tmp_path / "new" / "2.json", "t::g", env=GPU_ENV)
    code, out, err = run(tmp_path / "old", tmp_path / "new")
    assert code == compare_cli.EXIT_OK, out + err  # each test against its own environment: nothing differs
    shard(tmp_path / "new" / "2.json", "t::g")  # now measured on the CPU runner
    code, _, err = run(tmp_path / "old", tmp_path / "new")
    assert code == compare_cli.EXIT_ERROR and "gpu ('H100' in old, absent in new)" in err


def test_tfperf_compare_refuses_overlapping_shards_in_one_line(tmp_path: Path) -> None:
    shard(tmp_path / "old" / "1.json", "t::a")
    shard(tmp_path / "old" / "2.json", "t::a")
    shard(tmp_path / "new.json", "t::a")
    code, out, err = run(tmp_path / "old", tmp_path / "new.json")
    assert code == compare_cli.EXIT_ERROR and not out
    assert err.startswith("tfperf-compare: t::a is in two shards") and err.count("\n") == 1
