"""Which side of each pair of processes read a pipeline's groups faster, in kept A/A profiles, offline.

    .venv/bin/python benchmarks/explain_pair_order_offline.py DIR [DIR ...]

For every file ``explain_*_against.py --keep-profiles`` kept (A/A: both versions the same code), each
``tf.data`` stage, function and the consumer's wait: its log-ratio, this version over the other, in each pair
of processes (pair 1 is the explanation's own, the others fresh), with both sides' microseconds per iteration.
Then, per group, in how many fresh pairs this version read it slower and faster. Unchanged code has no side;
a count far from even says the pairs' steps favour one (``against.plan.profile_fresh_pairs``).
"""

from __future__ import annotations

import glob
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_tfperf.profiling.profile_model import Profile  # noqa: E402

KINDS = ("input wait", "stage", "tf.data work")


def main(dirs: list[str]) -> int:
    slower: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for root in dirs:
        for path in sorted(glob.glob(f"{root}/**/attribution-*.json", recursive=True)):
            doc = json.loads(Path(path).read_text())
            pairs = [(doc["base"], doc["current"])] + [tuple(r) for r in doc["replicates"]]
            rows: dict[str, list[str]] = defaultdict(list)
            for i, (raw_base, raw_current) in enumerate(pairs, start=1):
                base, current = Profile.from_dict(raw_base), Profile.from_dict(raw_current)
                for g in base.groups:
                    other = current.group(g.key)
                    if g.kind not in KINDS or g.on_device or other is None or g.mean <= 0 or other.mean <= 0:
                        continue
                    log = math.log(other.mean / g.mean)
                    rows[g.key].append(f"{i}:{log:+.2f}({g.mean * 1e6:.0f}/{other.mean * 1e6:.0f}us)")
                    if i > 1:
                        slower[g.key][0 if log > 0 else 1] += 1
            print(f"{Path(path).parts[-3]} session {Path(path).parts[-2]}")
            for key, cells in sorted(rows.items()):
                print(f"  {key[:48]:48s} " + " ".join(cells))
    print("fresh pairs where this version read the group slower / faster:")
    for key, (up, down) in sorted(slower.items()):
        print(f"  {key[:60]:60s} {up} / {down}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
