"""How far a pair of processes errs beyond its rounds' own error: the figure behind
``gates.paired.BETWEEN_PAIRS``.

Run:   .venv/bin/python benchmarks/paired_between_pairs.py [benchmarks/results/paired_pipelines_three_pairs.json]

Reads a ``benchmarks/paired_pipelines.py`` result with planted sessions. Every planted regression that went to
confirmation printed what its first fresh pair read: a pair of processes started for the purpose, whose
reading was not selected on its own result (only the first pair's was). Each reading's error is its estimate
minus the planted change (log scale); its own standard error is recovered from its printed 99% one-sided
bounds (half their width over t = 2.6, about Student's t at 99% for the 10-20 independent rounds these
verdicts weigh as). If the standard errors told the whole story, error / standard error would spread like
Student's t (about 1.1 at these counts). The script prints that spread, then the between-pair error that,
added in quadrature to each reading's own, brings it to 1, and the share of readings more than 2.6 of their
errors off at each candidate.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
READING = re.compile(r"\(([-+][\d.]+)% over (\d+) interleaved rounds, 99% bounds ([-+][\d.]+)% to ([-+][\d.]+)%")
T_99 = 2.6


def fresh_readings(doc: dict) -> list[tuple[str, float, float]]:
    """(test, error, standard error) of each first fresh pair's reading, log scale."""
    planted = math.log(1.0 / (1.0 + doc["plant"]))
    rows = []
    for session in doc.get("planted_sessions", []):
        for line in session.get("confirmations", []):
            if "not confirmed" in line and "fresh pair confirmed it" not in line:
                said = line.split("did not", 1)[1]  # the first fresh pair did not confirm: its reading
            elif "confirmed in two fresh processes" in line:
                said = line
            else:
                continue  # the second fresh pair: read only after the first confirmed, so selected
            m = READING.search(said)
            if m is None:
                continue
            change, _, low, high = (float(x) for x in m.groups())
            se = (math.log1p(high / 100) - math.log1p(low / 100)) / (2 * T_99)
            rows.append((line.split("::")[1].split(":")[0], math.log1p(change / 100) - planted, se))
    return rows


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "results" / "paired_pipelines_three_pairs.json"
    rows = fresh_readings(json.loads(path.read_text()))
    if not rows:
        print(f"{path}: no first fresh pair's reading found")
        return 1
    errors = [e for _, e, _ in rows]
    print(f"{path.name}: {len(rows)} first fresh pairs; error mean {statistics.mean(errors):+.4f}, "
          f"sd {statistics.pstdev(errors):.4f}; rms own standard error "
          f"{math.sqrt(statistics.mean([s * s for _, _, s in rows])):.4f} (log scale)")
    print("between-pair error | sd of error / total error | share more than 2.6 errors off")
    for between in (0.0, 0.01, 0.015, 0.02, 0.025, 0.03):
        z = [e / math.hypot(s, between) for _, e, s in rows]
        print(f"{between:18.3f} | {statistics.pstdev(z):25.2f} | {sum(abs(x) > T_99 for x in z) / len(z):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
