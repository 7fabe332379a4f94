"""``tfperf-compare old.json new.json``: judge two results files offline, as the gate would.

For CI jobs that keep ``--tfperf-json`` artifacts (for example main against a
pull request, measured on the same runner): every test present in both files
is judged with ``gates.rounds.judge_rounds`` (one run on each side: the within-run rule), one line
per test, then a summary. Either
side may be the shards of a suite split over a CI matrix: a directory of
results files or a quoted glob, merged by ``shards`` (each test keeps its
shard's environment, and each pair of tests is checked for its own).

Exit status: 0 nothing regressed, 1 at least one test regressed, 2 the
comparison could not be made (bad arguments or files, environments whose hard
keys differ, no test in common, a test that could not be judged). 2 wins over
1, because an incomplete comparison must not read as a clean regression report.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pytest_tfperf.config import fraction
from pytest_tfperf.gates.rounds import judge_rounds
from pytest_tfperf.gates.verdict import Status, Tolerances, Verdict
from pytest_tfperf.model import Environment, KeyDifference
from pytest_tfperf.storage.results_json import ResultsDocument
from pytest_tfperf.storage.fields import StorageError
from pytest_tfperf.reports.shards import ShardedResults, ShardError, load_shards

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
_LABELS = {"regressed": "REGRESSED", "improved": "improved", "unchanged": "ok", "noisy": "noisy",
           "unavailable": "unavailable"}


@dataclass(frozen=True, slots=True)
class TestComparison:
    """The outcome for one test id: a verdict, or why there is none."""

    test_id: str
    verdict: Verdict | None = None
    note: str = ""  # "only in old", "only in new", or the error that stopped the comparison
    error: bool = False

    @property
    def label(self) -> str:
        if self.error:
            return "ERROR"
        if self.verdict is None:
            return self.note
        return _LABELS.get(str(self.verdict.status), str(self.verdict.status))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfperf-compare",
        description="Compare two pytest-tfperf results files (written with --tfperf-json) and fail on regressions.",
        epilog="exit status: 0 no regression, 1 regression, 2 usage or input error",
    )
    parser.add_argument("old", type=Path, help="results of the reference run (e.g. main): a file, or the shards of a "
                                               "split run as a directory or quoted glob ('old/*.json')")
    parser.add_argument("new", type=Path, help="results of the run to check (a file, directory or quoted glob)")
    # The plugin's syntax (config.fraction): 10% or 0.1, so a value copied from the pytest command line works here.
    parser.add_argument("--tolerance", default=None, metavar="PCT",
                        help="throughput slowdown the gate is built to catch, 10%% or 0.1 (default 10%%)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals (default 0)")
    parser.add_argument("--allow-different-environment", action="store_true",
                        help="compare even when the hard environment keys (CPU, TF version, ...) differ")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="also write a Markdown table to PATH")
    return parser


def compare_documents(old: ResultsDocument | ShardedResults, new: ResultsDocument | ShardedResults,
                      tolerances: Tolerances, *, seed: int = 0) -> list[TestComparison]:
    """Judge every test of ``new`` against ``old``; tests in only one file get a note."""
    out: list[TestComparison] = []
    for test_id in sorted({m.test_id for m in old.measurements} | {m.test_id for m in new.measurements}):
        before, after = old.measurement(test_id), new.measurement(test_id)
        if before is None:
            out.append(TestComparison(test_id, note="only in new"))
            continue
        if after is None:
            out.append(TestComparison(test_id, note="only in old"))
            continue
        # Environments were checked (or their difference allowed) for the whole files.
        before = dataclasses.replace(before, environment_id="")
        after = dataclasses.replace(after, environment_id="")
        try:
            verdict = judge_rounds(after, before, tolerances, seed=seed)
        except ValueError as exc:
            out.append(TestComparison(test_id, note=str(exc), error=True))
            continue
        out.append(TestComparison(test_id, verdict=verdict))
    return out


def environment_pairs(old: ShardedResults, new: ShardedResults) -> list[tuple[Environment, Environment]]:
    """The (old, new) environments of the tests that will be compared, each distinct pair once.

    With no test in common, every pair: the environments are still worth a word.
    """
    common = set(old.tests) & set(new.tests)
    candidates = ([(old.environment_of(t), new.environment_of(t)) for t in sorted(common)] if common
                  else [(a, b) for a in old.environments for b in new.environments])
    seen: dict[tuple[str, str], tuple[Environment, Environment]] = {}
    for a, b in candidates:
        seen.setdefault((a.fingerprint, b.fingerprint), (a, b))
    return list(seen.values())


def _differences(pairs: Sequence[tuple[Environment, Environment]], *, hard: bool) -> list[KeyDifference]:
    out: list[KeyDifference] = []
    for a, b in pairs:
        out += [d for d in a.differences(b, hard=hard) if d not in out]
    return out


def _line(c: TestComparison) -> str:
    if c.error:
        return f"ERROR       {c.test_id}: {c.note}"
    if c.verdict is None:
        return f"{c.label:<11} {c.test_id}"
    return f"{c.label:<11} {c.test_id}: {c.verdict.summary()}"


def summary_line(comparisons: Sequence[TestComparison]) -> str:
    counts: dict[str, int] = {}
    for c in comparisons:
        counts[c.label] = counts.get(c.label, 0) + 1
    order = ["REGRESSED", "noisy", "improved", "ok", "unavailable", "only in new", "only in old", "ERROR"]
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    return f"{len(comparisons)} test(s): " + ", ".join(parts)


def markdown_table(comparisons: Sequence[TestComparison], old: Path, new: Path) -> str:
    lines = [f"### tfperf-compare: `{old}` → `{new}`", "", summary_line(comparisons), "",
             "| Test | Result | Throughput (old → new) | Change | Details |",
             "|---|---|---|---:|---|"]
    for c in comparisons:
        throughput = c.verdict.metric("throughput") if c.verdict is not None else None
        values = change = ""
        if throughput is not None and throughput.baseline_value is not None and throughput.current_value is not None:
            values = f"{throughput.baseline_value:,.1f} → {throughput.current_value:,.1f} items/s"
        if throughput is not None and throughput.relative_change is not None:
            change = f"{throughput.relative_change * 100:+.1f}%"
        details = c.note if c.verdict is None else c.verdict.summary()
        label = f"**{c.label}**" if c.label in ("REGRESSED", "ERROR") else c.label
        cells = [f"`{c.test_id}`", label, values, change, details]
        lines.append("| " + " | ".join(_md_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        tolerances = Tolerances() if args.tolerance is None else Tolerances(throughput=fraction(args.tolerance))
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"tfperf-compare: --tolerance: {exc}", file=err)
        return EXIT_ERROR
    try:
        old = load_shards([args.old])
        new = load_shards([args.new])
    except (StorageError, ShardError) as exc:
        print(f"tfperf-compare: {exc}", file=err)
        return EXIT_ERROR

    pairs = environment_pairs(old, new)
    hard = _differences(pairs, hard=True)
    if hard:
        differs = ", ".join(d.describe("in old", "in new") for d in hard)
        if not args.allow_different_environment:
            print(f"tfperf-compare: the two runs were measured in different environments ({differs}); their "
                  f"figures are not comparable. Measure both on the same machine, or pass "
                  f"--allow-different-environment to compare anyway.", file=err)
            return EXIT_ERROR
        print(f"note: comparing across different environments ({differs}), as asked", file=out)
    soft = _differences(pairs, hard=False)
    if soft:
        changed = ", ".join(d.describe("in old", "in new") for d in soft)
        print(f"note: compared although {changed} changed", file=out)

    comparisons = compare_documents(old, new, tolerances, seed=args.seed)
    for c in comparisons:
        print(_line(c), file=out)
        if c.verdict is not None and c.verdict.failed:
            for metric in c.verdict.with_status(Status.REGRESSED) + c.verdict.with_status(Status.NOISY):
                print(f"    {metric.message}", file=out)
    print(summary_line(comparisons), file=out)

    if args.markdown is not None:
        try:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(markdown_table(comparisons, args.old, args.new), encoding="utf-8")
        except OSError as exc:
            print(f"tfperf-compare: cannot write the Markdown table to {args.markdown}: {exc.strerror or exc}",
                  file=err)
            return EXIT_ERROR

    judged = [c for c in comparisons if c.verdict is not None]
    if any(c.error for c in comparisons):
        return EXIT_ERROR
    if not judged:
        print(f"tfperf-compare: {args.old} and {args.new} have no measured test in common; nothing was compared.",
              file=err)
        return EXIT_ERROR
    return EXIT_REGRESSION if any(c.verdict.failed for c in judged if c.verdict is not None) else EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
