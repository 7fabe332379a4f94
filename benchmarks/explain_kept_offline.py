"""Explanations recomputed offline from what ``explain_models_against.py --keep-profiles`` kept: a rule tried on
development data without running TensorFlow again.

    .venv/bin/python benchmarks/explain_kept_offline.py DIR [DIR ...] [--pairs N]

Each kept file holds what one red verdict's explanation was computed from (both sides' compact profiles, the
replicate pairs, the measured change). Every file is attributed with the code of this tree and judged by the
case's own judge (``--pairs N``: on the first N pairs of processes only, so that files kept with
``--tfperf-explain-pairs=5`` compare 3 pairs with 5 on the same data): the planted group named first;
"nothing moved", and then whether the most likely group (``Attribution.leads``) is the planted one; groups
named that the plant left alone. Patch a rule in before
calling ``main`` to compare. Development data only: the cases were seen before any rule tried this way.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def kept(dirs: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(case, file, document) for every kept file under DIR/<case>/<session>/."""
    out = []
    for d in dirs:
        for path in sorted(glob.glob(f"{d}/*/*/attribution-*.json")):
            p = Path(path)
            out.append((p.parent.parent.name, str(p), json.loads(p.read_text())))
    return out


def judged(doc: dict[str, Any], planted: Any, pairs: int | None = None) -> dict[str, Any]:
    from pytest_tfperf.profiling.attribution import attribute
    from pytest_tfperf.profiling.profile_model import Profile

    att = attribute(Profile.from_dict(doc["base"]), Profile.from_dict(doc["current"]), doc["measured"],
                    replicates=[(Profile.from_dict(b), Profile.from_dict(c))
                                for b, c in doc["replicates"][:None if pairs is None else pairs - 1]])
    top = att.top
    return {"first": top.key if top else None, "planted_first": bool(top and planted(top.key)),
            "nothing_moved": att.nothing_moved, "lead": att.leads[0].key if att.leads else None,
            "lead_planted": bool(att.nothing_moved and att.leads and planted(att.leads[0].key)),
            "others": [c.key for c in att.causes if not planted(c.key) and "touched_" not in c.key
                       and not c.key.startswith("wait:")]}


def main() -> int:
    from explain_models_against import ALL

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--pairs", type=int, metavar="N", help="only the first N pairs of processes of each file")
    args = parser.parse_args()
    rows = []
    for case, path, doc in kept(args.dirs):
        r = judged(doc, ALL[case][2], args.pairs)
        rows.append(r)
        print(f"{case:42s} {Path(path).parent.name} first {r['first']} planted {r['planted_first']} nothing "
              f"{r['nothing_moved']} lead {r['lead']} ({r['lead_planted']}) others {r['others'][:3]}")
    print(f"planted first {sum(r['planted_first'] for r in rows)} of {len(rows)}, nothing moved "
          f"{sum(r['nothing_moved'] for r in rows)} (the planted group the lead in "
          f"{sum(r['lead_planted'] for r in rows)}), verdicts with a group named the plant left alone "
          f"{sum(bool(r['others']) for r in rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
