"""How often one look of the paired rule says "regressed" when nothing changed, on simulated per-round ratios.

Run:   .venv/bin/python benchmarks/paired_calibration.py        (about 2 minutes; no TensorFlow)
Writes benchmarks/results/paired_calibration.json and .md.

Each A/A look is 10, 20 or 40 per-round log ratios with no change in them:
Gaussian or heavy-tailed (Student's t with 3 degrees of freedom) noise that
moves in spells (a first-order autoregression with lag-1 correlation rho),
judged by the shipped ``gates.paired.paired_estimate`` at the one-sided 1%
level. A calibrated look says "slower" 1% of the time. What it says instead
is the false-alarm rate of one look on such a machine; a verdict under
``--tfperf-against`` fails only when two more independent pairs of
processes also say so (``gates.paired.PAIRS_TO_FAIL``).

The second table asks whether the look's own estimate of the correlation
could tell the risky looks apart, so that a third pair would be needed only
for them: A/A looks with the true correlation drawn uniformly from 0 to 0.9
(half Gaussian, half heavy-tailed), grouped by the correlation the look
estimated. It cannot: looks that estimate little correlation err most,
because a short series' estimate reads low exactly when its spells are long.
So every regression is confirmed by the same number of pairs.
"""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_tfperf.gates.paired import paired_estimate  # noqa: E402

LOOKS = 4000
ALPHA = 0.01


def gaussian(rng: random.Random) -> float:
    return rng.gauss(0.0, 1.0)


def student_t3(rng: random.Random) -> float:
    chi2 = sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3))
    return rng.gauss(0.0, 1.0) / math.sqrt(chi2 / 3.0) / math.sqrt(3.0)  # unit variance


def spells(rng: random.Random, n: int, rho: float, noise: Callable[[random.Random], float]) -> list[float]:
    x, out = noise(rng), []
    for _ in range(n):
        x = rho * x + math.sqrt(1.0 - rho * rho) * noise(rng)
        out.append(0.05 * x)  # about 5% a round; the level does not depend on the scale
    return out


def main() -> None:
    rng = random.Random(20261127)
    rows = []
    for name, noise in (("gaussian", gaussian), ("t3", student_t3)):
        for n in (10, 20, 40):
            for rho in (0.0, 0.3, 0.5, 0.7, 0.9):
                alarms = sum(paired_estimate(spells(rng, n, rho, noise), ALPHA).p_slower <= ALPHA
                             for _ in range(LOOKS))
                rows.append({"noise": name, "rounds": n, "rho": rho, "looks": LOOKS, "slower": alarms,
                             "rate": alarms / LOOKS})
                print(f"{name:8} n={n:2} rho={rho:.1f}: {alarms / LOOKS:.2%}", flush=True)
    by_estimate = by_estimated_rho(rng)
    out = HERE / "results" / "paired_calibration"
    out.with_suffix(".json").write_text(json.dumps({"alpha": ALPHA, "rows": rows, "by_estimated_rho": by_estimate},
                                                   indent=1) + "\n")
    lines = ["# One look of the paired rule on A/A ratios (simulated)", "",
             "`.venv/bin/python benchmarks/paired_calibration.py`: the share of looks that say slower at the "
             f"one-sided {ALPHA:.0%} level ({LOOKS} looks a cell).", "",
             "| noise | rounds | rho 0 | rho 0.3 | rho 0.5 | rho 0.7 | rho 0.9 |", "|---|---|---|---|---|---|---|"]
    for name in ("gaussian", "t3"):
        for n in (10, 20, 40):
            cells = [f"{r['rate']:.1%}" for r in rows if r["noise"] == name and r["rounds"] == n]
            lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    lines += ["", "By the correlation the look estimated (true correlation uniform on 0 to 0.9; "
              f"{ESTIMATE_LOOKS} looks for each number of rounds):", "",
              "| rounds | " + " | ".join(f"estimated {b:.1f}+" for b in BINS) + " |",
              "|---|" + "---|" * len(BINS)]
    for n in (20, 40):
        cells = [f"{c['rate']:.1%} ({c['looks']})" for c in by_estimate if c["rounds"] == n]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


BINS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
ESTIMATE_LOOKS = 20000


def by_estimated_rho(rng: random.Random) -> list[dict[str, float]]:
    """The share of A/A looks that say slower, by the lag-1 correlation each look estimated of itself."""
    cells = []
    for n in (20, 40):
        looks = [0] * len(BINS)
        alarms = [0] * len(BINS)
        for i in range(ESTIMATE_LOOKS):
            noise = gaussian if i % 2 == 0 else student_t3
            e = paired_estimate(spells(rng, n, rng.uniform(0.0, 0.9), noise), ALPHA)
            b = max(k for k, low in enumerate(BINS) if e.rho >= low - 1e-12)
            looks[b] += 1
            alarms[b] += e.p_slower <= ALPHA
        for k, low in enumerate(BINS):
            cells.append({"rounds": n, "estimated_from": low, "looks": looks[k],
                          "rate": alarms[k] / looks[k] if looks[k] else 0.0})
            print(f"n={n} estimated {low:.1f}+: {cells[-1]['rate']:.2%} of {looks[k]}", flush=True)
    return cells


if __name__ == "__main__":
    main()
