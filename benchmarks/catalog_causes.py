"""What ``--tfperf-explain`` names as the cause of each catalog anti-pattern's cost, against its fix.

Run:   nice -n 15 .venv/bin/python benchmarks/catalog_causes.py --processes 3   (small size, 2-3 minutes a process)
       nice -n 15 .venv/bin/python benchmarks/catalog_causes.py --from-json  (rebuild the .md)
Writes benchmarks/results/catalog_causes.json (every comparison's explanation, lines included) and .md.

For each scenario of the catalog (``pytest_tfperf.catalog.scenarios``) and each of its comparisons, in one
process: the anti-pattern and the fix are timed in interleaved rounds (their median iteration), then
explained as ``--tfperf-explain`` explains a failed ``compare(reference=...)``: a profiled pass of the fix
(the reference), then one of the anti-pattern, and ``profiling.attribution`` splits the measured change
(``validation.causes.explain_comparison``, on ``explain.explanation``'s functions). The top cause is the first one
listed; ``validation.causes`` says what each entry should name, and whether the profile can name it at all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))  # validation.causes

def explain_catalog(size: str, only: list[str]) -> list[dict[str, Any]]:
    from validation.causes import CAUSES, explain_comparison, names_its_cause, top_cause
    from pytest_tfperf.catalog.scenarios import MODULES, load
    from pytest_tfperf.catalog.sizes import CatalogSize, tensorflow_sees_a_gpu

    rows = []
    gpu = tensorflow_sees_a_gpu()
    with tempfile.TemporaryDirectory() as rootdir:
        for key in MODULES:
            if only and key not in only:
                continue
            module = load(key)
            if getattr(module, "NEEDS_GPU", None) and not gpu:
                rows.append({"scenario": key, "skipped": module.NEEDS_GPU})
                continue
            scenario = module.build(CatalogSize(size))
            try:
                for c in scenario.comparisons:
                    d = explain_comparison(f"{key}[{c.anti}-vs-{c.fix}]", scenario.variant(c.anti).run,
                                           scenario.variant(c.fix).run, rootdir)
                    top = top_cause(d)
                    expected = CAUSES.get(key)
                    rows.append({"scenario": key, "metric": scenario.metric.value, "anti": c.anti, "fix": c.fix,
                                 "gated": c.gated,
                                 "anti_ms": d["anti_ms"], "fix_ms": d["fix_ms"],
                                 "explain_s": round(d["explain_s"], 1), "top_cause": top,
                                 "names_its_cause": names_its_cause(key, d),
                                 "expected": expected.says if expected else None,
                                 "lines": d["lines"], "explanation": d,
                                 "load_avg": round(os.getloadavg()[0], 2)})
                    seconds = d["explain_s"]
                    print(f"{key} {c.anti} vs {c.fix}: {top} ({rows[-1]['names_its_cause']}) in {seconds:.1f} s",
                          flush=True)
            finally:
                scenario.close()
    return rows


def markdown(doc: dict[str, Any]) -> str:
    from validation.causes import CAUSES, named_anywhere, names_its_cause

    # judged again from the stored explanations, so that --from-json follows validation.causes as it is now
    for rows in [doc["rows"], *doc.get("other_processes", [])]:
        for r in rows:
            if "explanation" in r:
                r["explanation"]["lines"] = r["lines"]
                r["names_its_cause"] = names_its_cause(r["scenario"], r["explanation"])
                r["named_anywhere"] = named_anywhere(r["scenario"], r["explanation"])
                r["judged"] = r.get("gated", True) and CAUSES[r["scenario"]].judged

    out = ["# What `--tfperf-explain` names as each catalog anti-pattern's cost", "",
           f"Measured {doc['date']} on the shared 2-core VM (TF {doc['tensorflow']}, catalog size "
           f"`{doc['size']}`), under `nice -n 15`; load average {doc['load_min']:.1f}-{doc['load_max']:.1f}. "
           f"{1 + len(doc.get('other_processes', []))} fresh processes; in each, every comparison timed in interleaved "
           "rounds, then explained as `--tfperf-explain` explains a failed `compare(reference=fix)`.", "",
           f"Command: `nice -n 15 .venv/bin/python benchmarks/catalog_causes.py --processes "
           f"{1 + len(doc.get('other_processes', []))}`", "",
           "| scenario | anti vs fix | ms per iteration (anti / fix) | top cause named (first process) | "
           "top cause is the entry's, in fresh processes | named in the explanation | what the entry's cause is |",
           "|---|---|---|---|---|---|---|"]
    others = doc.get("other_processes", [])

    def count(r: dict[str, Any], field: str) -> str:
        same = [o for rows in others for o in rows if o.get("scenario") == r["scenario"] and o.get("anti") == r["anti"]]
        hits = int(r[field]) + sum(int(o[field]) for o in same)
        return f"{hits} of {1 + len(same)}"

    for r in doc["rows"]:
        if "skipped" in r:
            out.append(f"| `{r['scenario']}` | - | - | not run: {r['skipped']} | - | - | - |")
            continue
        expected = CAUSES.get(r["scenario"])
        if not r.get("gated", True):
            judged = "not judged: ungated (TensorFlow's defaults recover most of it)"
            anywhere = "-"
        elif not expected or not expected.judged:
            judged, anywhere = "not judged: the entry's cost is not time", "-"
        else:
            judged, anywhere = count(r, "names_its_cause"), count(r, "named_anywhere")
        out.append(f"| `{r['scenario']}` | {r['anti']} vs {r['fix']} | {r['anti_ms']:.2f} / {r['fix_ms']:.2f} | "
                   f"{r['top_cause']} | {judged} | {anywhere} | {expected.says if expected else '-'} |")
    judged = [r for rows in [doc["rows"], *others] for r in rows if "skipped" not in r and r["judged"]]
    out += ["", f"Judged comparisons (gated, and a cost in time) whose top cause is the entry's: "
                f"{sum(r['names_its_cause'] for r in judged)} of {len(judged)}; named in the explanation: "
                f"{sum(r['named_anywhere'] for r in judged)} of {len(judged)} ({1 + len(others)} processes).", "",
            "Each explanation as printed (first process):", ""]
    for r in doc["rows"]:
        if "skipped" in r:
            continue
        out += [f"`{r['scenario']}` ({r['anti']} vs {r['fix']}):", "", "```text", *r["lines"], "```", ""]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("small", "default"))
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--name", default="catalog_causes")
    parser.add_argument("--from-json", action="store_true")
    parser.add_argument("--processes", type=int, default=1, help="fresh processes, each explaining every entry")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one process's rows, written here
    args = parser.parse_args()
    if args.child is not None:
        args.child.write_text(json.dumps(explain_catalog(args.size, args.only)))
        return
    out_json = HERE / "results" / f"{args.name}.json"
    if args.from_json:
        doc = json.loads(out_json.read_text())
    else:
        import tensorflow as tf

        load_before = os.getloadavg()[0]
        runs = []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.processes):
                out = Path(tmp) / f"rows-{i}.json"
                cmd = [sys.executable, __file__, "--child", str(out), "--size", args.size]
                if args.only:
                    cmd += ["--only", *args.only]
                subprocess.run(cmd, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
                runs.append(json.loads(out.read_text()))
        rows = runs[0]
        loads = [load_before] + [r["load_avg"] for rs in runs for r in rs if "load_avg" in r]
        doc = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "tensorflow": tf.__version__,
               "size": args.size, "load_min": min(loads), "load_max": max(loads), "rows": rows,
               "other_processes": runs[1:]}
        out_json.write_text(json.dumps(doc, indent=1) + "\n")
    (HERE / "results" / f"{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
