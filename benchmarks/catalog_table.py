"""Measure the anti-pattern catalog and print (or write into docs/catalog.md) the table of its effects.

    python benchmarks/catalog_table.py                      # run the catalog with --tfperf, print the table
    python benchmarks/catalog_table.py --doc                # ...and replace the table in docs/catalog.md
    python benchmarks/catalog_table.py --doc PATH.md        # ...or between the markers of another page
    python benchmarks/catalog_table.py --effects run.jsonl  # render effects recorded by an earlier run (JSON lines)

The numbers come from a real ``pytest --tfperf`` run of ``benchmarks/test_catalog.py``:
each test records its effects (``tfperf.record_effect``), and both they and the
machine are read from the ``--tfperf-json`` document of the same run.
Nothing in the table is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

START_MARKER = "<!-- catalog-table:start -->"
END_MARKER = "<!-- catalog-table:end -->"
HERE = Path(__file__).resolve().parent
# The page that holds the table (the README used to; it now links there).
DEFAULT_DOC = Path("docs") / "catalog.md"


def run_catalog(json_path: Path, pytest_args: Sequence[str]) -> int:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, "-m", "pytest", "--tfperf", f"--tfperf-json={json_path}", "-p", "no:cacheprovider",
               "-q", str(HERE / "test_catalog.py"), *pytest_args]
    print("running:", " ".join(command), file=sys.stderr)
    return subprocess.call(command, env=env, cwd=HERE.parent)


def load_effects(path: Path) -> list[dict[str, object]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{number}: not a JSON line ({exc}); was the file written by the catalog?")
    if not rows:
        raise SystemExit(f"{path}: no effects recorded; did the catalog tests run (and with --tfperf)?")
    return rows


def effects_from_results(json_path: Path) -> list[dict[str, object]]:
    """The effects a run recorded, from its ``--tfperf-json`` document, non-finite numbers as floats again."""
    def restored(value: object) -> object:
        # the document writes inf and nan as strings ("inf", "nan"), which the table reads as numbers
        if isinstance(value, str) and value in ("inf", "-inf", "nan"):
            return float(value)
        if isinstance(value, dict):
            return {k: restored(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restored(v) for v in value]
        return value

    if not json_path.exists():
        raise SystemExit(f"{json_path}: no results document; did the catalog run start?")
    rows = [restored(row) for row in json.loads(json_path.read_text(encoding="utf-8")).get("effects", [])]
    return rows  # type: ignore[return-value]


def machine_line(json_path: Path) -> str:
    if not json_path.exists():
        return ""
    try:
        from pytest_tfperf.storage.results_json import load_results

        hard = load_results(json_path).environment.hard_dict()
    except Exception as exc:  # noqa: BLE001 - the table is still worth printing without the machine
        return f"(machine unknown: {exc})"
    return (f"Measured on {hard.get('cpu.model', '?')}, {hard.get('cpu.cores', '?')} cores, "
            f"{hard.get('tensorflow', '?')}, {hard.get('python', '?')}.")


def _number(value: object) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    if math.isinf(value):
        return "∞"
    return f"{value:.3g}"


def _effect_cell(row: dict[str, object]) -> str:
    value = row["value"]
    metric = row["metric"]
    if value is None:
        return "not measured"
    if metric == "first_non_finite_iteration":
        return "anti's loss stayed finite" if isinstance(value, float) and math.isinf(value) else \
            f"anti's loss NaN/Inf at iteration {_number(value)}; fix's stays finite"
    if metric == "memory_growth":
        return f"{value:.0%} more of each iteration's output kept, per iteration"
    if metric == "traces":
        return f"{_number(value)} fewer traces per call"
    return f"{_number(value)}x"


def _gate_cell(row: dict[str, object]) -> str:
    if not row["gated"]:
        return "reported only"
    if row["metric"] == "first_non_finite_iteration":
        return f"NaN by iteration {_number(row['min_effect'])}"
    return f">= {_number(row['min_effect'])}"


def _not_run_rows(rows: list[dict[str, object]]) -> list[str]:
    from pytest_tfperf.catalog.scenarios import MODULES, load

    seen = {row["scenario"] for row in rows}
    out = []
    for number, key in enumerate(MODULES, 1):
        if key not in seen:
            module = load(key)
            reason = getattr(module, "NEEDS_GPU", "not run")
            out.append(f"| {number}. {module.TITLE} | – | {module.METRIC.value} | not run here: {reason} | – | – | – "
                       "| – |")
    return out


def _pass_cell(row: dict[str, object]) -> str:
    if row.get("not_judged"):
        return f"not judged: {row['not_judged']}"
    if not row["gated"]:
        return "–"
    return "yes" if row["passed"] else "NO"


def render(rows: list[dict[str, object]], machine: str, command: str) -> str:
    from pytest_tfperf.catalog.scenarios import MODULES

    lines = [
        f"{machine} Size: {rows[0].get('catalog_size', '?')}. Produced by `{command}`.",
        "",
        "| Scenario | Anti-pattern → fix | Metric | Effect | Spread over rounds | Gate | Pass | Other load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    number = {key: i for i, key in enumerate(MODULES, 1)}
    for row in sorted(rows, key=lambda r: number.get(str(r["scenario"]), 99)):
        spread = row.get("spread")
        spread_cell = f"{_number(spread[0])}–{_number(spread[1])}x" if isinstance(spread, list) else "deterministic"
        if row["metric"] in ("throughput", "tf_allocator_peak", "device_memory_reserved") and not isinstance(
                spread, list):
            spread_cell = "–"
        title = row.get("title", row["scenario"])
        pair = f"{row.get('anti_summary', row['anti'])} → {row.get('fix_summary', row['fix'])}"
        lines.append(
            f"| {number.get(str(row['scenario']), '?')}. {title} | {pair} | {row['metric']} | {_effect_cell(row)} | "
            f"{spread_cell} | {_gate_cell(row)} | {_pass_cell(row)} | "
            f"{_number(row.get('other_processes_cores'))} |"
        )
    lines += _not_run_rows(rows)
    lines += ["", "Effect: throughput is the fix's best round over the anti-pattern's (rounds interleaved); peak "
              "memory is the anti-pattern's transient TensorFlow allocator peak over the fix's. Spread: the lowest "
              "and highest ratio of rounds run back to back. Other load: average cores used by other processes "
              "while the scenario was measured (a busy machine hides the effects that come from using more cores)."]
    return "\n".join(lines) + "\n"


def write_into(page: Path, table: str) -> None:
    text = page.read_text(encoding="utf-8") if page.exists() else ""
    if START_MARKER in text and END_MARKER in text:
        head, rest = text.split(START_MARKER, 1)
        _, tail = rest.split(END_MARKER, 1)
        text = f"{head}{START_MARKER}\n{table}{END_MARKER}{tail}"
    else:
        raise SystemExit(f"{page}: no {START_MARKER} ... {END_MARKER} block to replace; add one where the "
                         f"table belongs")
    page.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--effects", type=Path, help="render this effects file instead of running the catalog")
    parser.add_argument("--results-json", type=Path, help="the --tfperf-json document of that run (machine line)")
    # --readme is the option's old name, kept so that older commands still work.
    parser.add_argument("--doc", "--readme", dest="doc", type=Path, nargs="?", const=DEFAULT_DOC,
                        help=f"replace the table between the catalog-table markers of this page "
                             f"(default {DEFAULT_DOC.as_posix()})")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    args = parser.parse_args(argv)
    command = "python benchmarks/catalog_table.py" + (f" --doc {args.doc.as_posix()}" if args.doc else "")
    if args.effects is not None:
        rows = load_effects(args.effects)
        machine = machine_line(args.results_json) if args.results_json else ""
    else:
        with tempfile.TemporaryDirectory() as tmp:
            json_path = Path(tmp) / "results.json"
            status = run_catalog(json_path, args.pytest_args)
            rows = effects_from_results(json_path) if json_path.exists() else []
            if not rows:
                raise SystemExit(f"the catalog run recorded no effects (pytest exit status {status})")
            machine = machine_line(json_path)
            if status != 0:
                print(f"warning: pytest exited with status {status}; the table shows what was measured",
                      file=sys.stderr)
    table = render(rows, machine, command)
    if args.doc:
        write_into(args.doc, table)
        print(f"table written into {args.doc}", file=sys.stderr)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
