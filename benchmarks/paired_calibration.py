"""How often one look of the paired rule says "regressed" when nothing changed, on simulated per-round ratios.

Run:   .venv/bin/python benchmarks/paired_calibration.py        (about 2 minutes; no TensorFlow)
Writes benchmarks/results/paired_calibration.json and .md.

Each A/A look is 10, 20 or 40 per-round log ratios with no change in them:
Gaussian or heavy-tailed (Student's t with 3 degrees of freedom) noise that
moves in spells (a first-order autoregression with lag-1 correlation rho),
judged by the shipped ``gates.paired.paired_estimate`` at the one-sided 1%
level. A calibrated look says "slower" 1% of the time. What it says instead
is the false-alarm rate of one look on such a machine; a verdict under
``--tfperf-against`` fails only when a second, independent pair of
processes also says so.
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
    out = HERE / "results" / "paired_calibration"
    out.with_suffix(".json").write_text(json.dumps({"alpha": ALPHA, "rows": rows}, indent=1) + "\n")
    lines = ["# One look of the paired rule on A/A ratios (simulated)", "",
             "`.venv/bin/python benchmarks/paired_calibration.py`: the share of looks that say slower at the "
             f"one-sided {ALPHA:.0%} level ({LOOKS} looks a cell).", "",
             "| noise | rounds | rho 0 | rho 0.3 | rho 0.5 | rho 0.7 | rho 0.9 |", "|---|---|---|---|---|---|---|"]
    for name in ("gaussian", "t3"):
        for n in (10, 20, 40):
            cells = [f"{r['rate']:.1%}" for r in rows if r["noise"] == name and r["rounds"] == n]
            lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
