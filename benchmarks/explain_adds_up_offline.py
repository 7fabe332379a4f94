"""How far a red --tfperf-against verdict's profiled passes sit from the change the gate measured, offline.

    .venv/bin/python benchmarks/explain_adds_up_offline.py DIR [DIR ...]

Issue 26 asks that the parts plus a measured remainder be within 10% of the measured change in 9 of 10 cases.
The parts add up to the first pair's profiled pass by construction (``profiling.parts``), so what decides is
how close that pass's own change in wall time per iteration is to the gate's (a measurement of its own, in
other rounds). For every file ``explain_models_against.py --keep-profiles`` kept, this prints the gate's
change, the first pair's profiled change and the mean over every pair of processes' profiled changes, then
how many sit within 10% and 25% of the gate's. Development data only; nothing here is a rule.
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_tfperf.profiling.profile_model import Profile  # noqa: E402


def profiled_changes(doc: dict) -> list[float]:
    """Each pair's profiled change, seconds per iteration (current minus baseline), the first pair first."""
    pairs = [(doc["base"], doc["current"])] + [tuple(r) for r in doc["replicates"]]
    out = []
    for base, current in pairs:
        b, c = Profile.from_dict(base), Profile.from_dict(current)
        out.append(statistics.mean(c.wall) - statistics.mean(b.wall))
    return out


def main(dirs: list[str]) -> int:
    rows = []
    for root in dirs:
        for path in sorted(glob.glob(f"{root}/**/attribution-*.json", recursive=True)):
            doc = json.loads(Path(path).read_text())
            changes = profiled_changes(doc)
            rows.append((Path(path).parts[-3], doc["measured"], changes[0], statistics.mean(changes), len(changes)))
    for case, measured, first, mean, n in rows:
        print(f"{case[:44]:44s} gate {measured * 1e3:+8.2f} ms  first pair {first * 1e3:+8.2f} ms  "
              f"mean of {n} pairs {mean * 1e3:+8.2f} ms")

    def within(share: float, column: int) -> int:
        return sum(abs(r[column] - r[1]) <= share * abs(r[1]) for r in rows)

    print(f"within 10% of the gate's change: the first pair {within(0.10, 2)} of {len(rows)}, the mean of the pairs "
          f"{within(0.10, 3)}; within 25%: {within(0.25, 2)} and {within(0.25, 3)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
