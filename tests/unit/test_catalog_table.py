from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "catalog_table.py"


@pytest.fixture(scope="module")
def table():  # noqa: ANN201 - the script module
    spec = importlib.util.spec_from_file_location("catalog_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(scenario: str, metric: str, value: float | None, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {"scenario": scenario, "anti": "anti", "fix": "fix", "metric": metric, "value": value,
                              "spread": None, "min_effect": 2.0, "gated": True, "passed": True,
                              "title": f"title of {scenario}", "anti_summary": "the mistake",
                              "fix_summary": "the fix", "catalog_size": "default", "other_processes_cores": 0.1}
    row.update(extra)
    return row


def test_rows_follow_catalog_order_and_missing_scenarios_say_why(table) -> None:  # noqa: ANN001
    rows = [_row("retracing", "traces", 1.0),
            _row("allocation_in_loop", "throughput", 150.0, spread=[120.0, 180.0], min_effect=20.0)]
    text = table.render(rows, "Measured on a test box.", "python benchmarks/catalog_table.py")
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| 1. title of allocation_in_loop"))
    eighth = next(i for i, line in enumerate(lines) if line.startswith("| 8. title of retracing"))
    assert first < eighth
    assert "| 150x | 120–180x | >= 20 | yes |" in lines[first]
    assert any("11." in line and "not run here" in line and "GPU" in line for line in lines)
    assert "Produced by `python benchmarks/catalog_table.py`" in lines[0]


def test_a_scenario_not_judged_on_a_busy_machine_says_so(table) -> None:  # noqa: ANN001
    rows = [_row("thread_starvation", "throughput", 1.0, spread=[0.9, 1.1], passed=False,
                 not_judged="busy machine", other_processes_cores=1.3)]
    assert "not judged: busy machine | 1.3 |" in table.render(rows, "", "cmd")


def test_the_nan_scenario_reads_in_words(table) -> None:  # noqa: ANN001
    rows = [_row("numerical_instability", "first_non_finite_iteration", 3.0, min_effect=10)]
    text = table.render(rows, "", "cmd")
    assert "anti's loss NaN/Inf at iteration 3; fix's stays finite" in text
    assert "NaN by iteration 10" in text


def test_the_table_replaces_only_its_block(table, tmp_path: Path) -> None:  # noqa: ANN001
    page = tmp_path / "catalog.md"
    page.write_text(f"# Title\n\nbefore\n{table.START_MARKER}\nold table\n{table.END_MARKER}\nafter\n")
    table.write_into(page, "| new |\n")
    assert page.read_text() == f"# Title\n\nbefore\n{table.START_MARKER}\n| new |\n{table.END_MARKER}\nafter\n"


def test_a_page_without_the_markers_is_refused(table, tmp_path: Path) -> None:  # noqa: ANN001
    page = tmp_path / "catalog.md"
    page.write_text("# Title\n")
    with pytest.raises(SystemExit, match="catalog-table:start"):
        table.write_into(page, "| new |\n")


def test_doc_without_a_path_writes_the_table_into_docs_catalog(table, tmp_path: Path, monkeypatch, capsys) -> None:
    effects = tmp_path / "effects.jsonl"
    effects.write_text(json.dumps(_row("retracing", "traces", 1.0)) + "\n")
    page = tmp_path / "docs" / "catalog.md"
    page.parent.mkdir()
    page.write_text(f"# Catalog\n{table.START_MARKER}\nold\n{table.END_MARKER}\n")
    monkeypatch.chdir(tmp_path)
    assert table.main(["--effects", str(effects), "--doc"]) == 0
    text = page.read_text()
    assert "old" not in text and "8. title of retracing" in text
    assert "Produced by `python benchmarks/catalog_table.py --doc docs/catalog.md`" in text
    # The option's old name still works.
    assert table.main(["--effects", str(effects), "--readme", str(page)]) == 0
    capsys.readouterr()


def test_the_repository_catalog_page_holds_the_table_block(table) -> None:
    text = (SCRIPT.parents[1] / table.DEFAULT_DOC).read_text(encoding="utf-8")
    assert text.count(table.START_MARKER) == 1 and text.count(table.END_MARKER) == 1
    assert text.index(table.START_MARKER) < text.index(table.END_MARKER)


def test_effects_files_are_read_line_by_line(table, tmp_path: Path) -> None:  # noqa: ANN001
    path = tmp_path / "effects.jsonl"
    path.write_text(json.dumps(_row("retracing", "traces", 1.0)) + "\n\n")
    assert table.load_effects(path)[0]["scenario"] == "retracing"
    path.write_text("not json\n")
    with pytest.raises(SystemExit, match="not a JSON line"):
        table.load_effects(path)
