"""Groups tested across three pairs of processes against one pair, offline, on profiles kept from real runs.

A red ``--tfperf-against`` verdict's explanation now profiles both versions in
three pairs of processes (``against.plan.profile_fresh_pairs``) and tests each
layer and op across them (``profiling.attribution``'s ``replicates``). This
script asks what that buys, without running TensorFlow: it reads the compact
profiles that ``benchmarks/explain_heldout.py`` kept (each process profiled a
case's base and changed versions; by default the compact profiles of a run of six processes, kept
in ``benchmarks/results/explain_pairs_profiles``), draws three pairs of *distinct*
processes per trial (one process's base arm against another's changed arm,
as two processes of the two versions are), and attributes

- with the first pair alone (the rule before: a group's between-process spread
  read from the other groups), and
- across the three pairs.

A/A: one process's base arm against another's base arm, for every case. The
planted group is recognised by the case table of ``explain_heldout.py``.

``--pairs N`` draws N pairs (2N distinct processes) instead of three; "across"
then tests across all N, and "three" across the first three of the same draw,
so that more pairs and three are compared on the same processes.

    .venv/bin/python benchmarks/explain_pairs_offline.py --trials 40 --out benchmarks/results/explain_pairs_aa
    .venv/bin/python benchmarks/explain_pairs_offline.py --pairs 5 --dirs DIR ... --out benchmarks/results/...
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def load(dirs: list[str]) -> dict[str, list[dict[str, Any]]]:
    """case -> every process's profiles: {"profiles": {arm: Profile}, "per": {arm: s/iteration}, "process": id}."""
    from pytest_tfperf.profiling.profile_model import Profile

    by_case: dict[str, list[dict[str, Any]]] = {}
    for d in dirs:
        for path in sorted(glob.glob(f"{d}/p*/*/compact-*.json")):
            p = Path(path)
            stored = json.loads(p.read_text())
            by_case.setdefault(p.parent.name, []).append({
                "profiles": {a: Profile.from_dict(stored[a]) for a in ("base", "changed")},
                "per": stored["per_iteration_s"], "process": f"{Path(d).name}/{p.parent.parent.name}"})
    return by_case


def judge(att: Any, planted: Any) -> dict[str, Any]:
    top = att.top
    ranked = ([att.paced_by] if att.paced_by else []) + list(att.causes) + list(att.pipeline)
    return {"top": top.key if top else None, "planted_first": bool(top and planted(top.key)),
            "planted_top3": any(planted(c.key) for c in ranked[:3]), "nothing_moved": att.nothing_moved,
            "causes": [c.key for c in att.causes], "adds_up": att.adds_up,
            "lead": att.leads[0].key if getattr(att, "leads", ()) else None,
            "lead_planted": bool(att.nothing_moved and getattr(att, "leads", ()) and planted(att.leads[0].key))}


def main() -> None:
    from explain_heldout import CASES, is_aa
    from pytest_tfperf.profiling.attribution import attribute

    parser = argparse.ArgumentParser()
    parser.add_argument("--dirs", nargs="*", default=["benchmarks/results/explain_pairs_profiles"],
                        help="runs of explain_heldout.py (their /tmp/tfperf-heldout-* folders); the default is "
                             "the compact profiles of its six-process run, kept in git")
    parser.add_argument("--trials", type=int, default=40, help="draws of --pairs pairs of processes per case")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--pairs", type=int, default=3, help="pairs of distinct processes a draw holds")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "explain_pairs_offline")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    for case, entries in sorted(load(args.dirs).items()):
        if len(entries) < 2 * args.pairs:
            continue
        planted = CASES[case][1]
        for trial in range(args.trials):
            chosen = rng.sample(entries, 2 * args.pairs)
            pairs = [(chosen[2 * k], chosen[2 * k + 1]) for k in range(args.pairs)]
            for kind in ("aa", "regression") if not is_aa(case) else ("aa",):
                arm = "changed" if kind == "regression" else "base"
                sides = [(a["profiles"]["base"], b["profiles"][arm]) for a, b in pairs]
                first, second = pairs[0]
                measured = second["per"][arm] - first["per"]["base"]
                one = attribute(*sides[0], measured)
                across = attribute(*sides[0], measured, replicates=sides[1:])
                judged = planted if kind == "regression" else (lambda k: False)
                row = {"case": case, "kind": kind, "trial": trial,
                       "processes": [[a["process"], b["process"]] for a, b in pairs],
                       "one": judge(one, judged), "across": judge(across, judged)}
                if args.pairs > 3:
                    row["three"] = judge(attribute(*sides[0], measured, replicates=sides[1:3]), judged)
                rows.append(row)
    summary: dict[str, Any] = {}
    rules = ("one", "three", "across") if args.pairs > 3 else ("one", "across")
    for rule in rules:
        reg = [r[rule] for r in rows if r["kind"] == "regression"]
        aa = [r[rule] for r in rows if r["kind"] == "aa"]
        summary[rule] = {"regressions": len(reg), "planted_first": sum(x["planted_first"] for x in reg),
                         "planted_top3": sum(x["planted_top3"] for x in reg),
                         "nothing_moved": sum(x["nothing_moved"] for x in reg),
                         "aa": len(aa), "aa_blamed": sum(not x["nothing_moved"] for x in aa),
                         "nothing_moved_lead_planted": sum(x.get("lead_planted", False) for x in reg),
                         "aa_with_lead": sum(x.get("lead") is not None for x in aa)}
    per_case: dict[str, dict[str, Any]] = {}
    for r in rows:
        c = per_case.setdefault(f"{r['case']} ({r['kind']})", {"n": 0, **{rule: 0 for rule in rules}})
        c["n"] += 1
        for rule in rules:
            c[rule] += r[rule]["planted_first"] if r["kind"] == "regression" else (not r[rule]["nothing_moved"])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                            text=True).stdout.strip()
    command = (f".venv/bin/python benchmarks/explain_pairs_offline.py --dirs {' '.join(args.dirs)} --trials "
               f"{args.trials} --seed {args.seed}" + (f" --pairs {args.pairs}" if args.pairs != 3 else ""))
    args.out.with_suffix(".json").write_text(json.dumps({"commit": commit, "command": command, "dirs": args.dirs,
                                                         "summary": summary, "per_case": per_case, "rows": rows},
                                                        indent=1) + "\n")
    lines = [f"# Groups tested across {args.pairs} pairs of processes, offline (commit {commit})", "",
             f"`{command}` on the profiles kept by {len(args.dirs)} runs of `benchmarks/explain_heldout.py`", ""]
    for rule, s in summary.items():
        lines.append(f"- **{rule}**: planted first {s['planted_first']} of {s['regressions']}, top 3 "
                     f"{s['planted_top3']}, nothing moved {s['nothing_moved']} (the planted group the lead in "
                     f"{s['nothing_moved_lead_planted']}); A/A blamed {s['aa_blamed']} of {s['aa']}, a lead given in "
                     f"{s['aa_with_lead']}")
    heads = {"one": "one pair", "three": "three pairs", "across": f"{args.pairs} pairs"}
    lines += ["", "| case | trials | " + " | ".join(heads[r] for r in rules) + " |", "|---|---|" + "---|" * len(rules)]
    lines += [f"| {k} | {v['n']} | " + " | ".join(str(v[r]) for r in rules) + " |" for k, v in sorted(per_case.items())]
    lines += ["", "(regression rows count the planted group named first; A/A rows count trials with anything blamed)"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
