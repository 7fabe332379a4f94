"""benchmarks/paired_pipelines.py --power: the smallest slowdown caught in half of the trials, read off planted
runs at several sizes (the figure #25 asks for per workload kind)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def paired_pipelines() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paired_pipelines", ROOT / "benchmarks" / "paired_pipelines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_half_point_lies_between_the_sizes_around_fifty_percent_or_is_a_bound() -> None:
    half = paired_pipelines().half_point
    assert half([(0.10, 2, 8), (0.20, 6, 8)]) == "about 15%"  # 25% caught at 10%, 75% at 20%
    assert half([(0.20, 6, 8), (0.10, 2, 8)]) == "about 15%"  # order of the runs does not matter
    assert half([(0.10, 4, 8), (0.20, 8, 8)]) == "below 10.0%"
    assert half([(0.10, 0, 8), (0.20, 3, 8)]) == "above 20.0%"
    assert half([]) == "-"


def test_the_table_counts_each_kind_and_test_at_each_size(tmp_path: Path) -> None:
    module = paired_pipelines()

    def run(plant: float, caught: set[str]) -> str:
        rows = [{"test": name, "kind": kind, "status": "regressed" if name in caught else "noisy"}
                for name, kind in module.KINDS.items()]
        path = tmp_path / f"run{plant}.json"
        path.write_text(json.dumps({"plant": plant, "commit": "abc1234", "planted_sessions": [{"rows": rows}]}))
        return str(path)

    small = run(0.1, {"test_tf_function_step"})
    large = run(0.25, {"test_tf_function_step", "test_fit", "test_train_on_batch"})
    lines = module.power_table([large, small])
    assert lines[0].startswith("planted runs: -9.1%: run0.1.json (commit abc1234), -20.0%: run0.25.json")
    table = {line.split(" | ")[0].lstrip("| "): line for line in lines[4:]}
    assert table["step"].endswith("| 1 of 1 | 1 of 1 | below 9.1% |")
    assert table["keras"].endswith("| 0 of 2 | 2 of 2 | about 15% |")
    assert table["`test_shuffled_augment`"].endswith("| 0 of 1 | 0 of 1 | above 20.0% |")


def test_a_larger_slowdown_caught_less_often_by_chance_is_pooled_with_the_smaller_one() -> None:
    module = paired_pipelines()
    # 7 of 12 at 5%, 6 of 16 at 9.1%: pooled, 13 of 28 at both; then 16 of 20 at 15%
    fitted = module.monotone_rates([(0.05, 7, 12), (0.091, 6, 16), (0.15, 16, 20)])
    assert fitted == [(0.05, 13 / 28), (0.091, 13 / 28), (0.15, 0.8)]
    assert module.half_point([(0.05, 7, 12), (0.091, 6, 16), (0.15, 16, 20)]) == "about 10%"
