"""How often the main job goes red, and each catalog effect's distribution over fresh processes.

    python benchmarks/catalog_margins.py collect --runs 10 --label batch1     # N main jobs, appended
    python benchmarks/catalog_margins.py summarise                            # rewrite the .json and .md

``collect`` clones the current branch (``--branch``, default: the checkout's)
into a scratch directory for every run, so nothing in the working tree is
touched and every run starts from a fresh clone, and runs the README's main
job there in a fresh process::

    python -m pytest --tfperf benchmarks/ -p no:cacheprovider --tfperf-json=RUN.json --junitxml=RUN.xml

with this interpreter and ``PYTHONPATH`` set to the clone (the plugin then
imports from the clone; each run records where it imported from). Every run
appends one JSON line to ``benchmarks/results/catalog_margins_runs.jsonl``:
exit status, the failed and skipped tests with their messages, every catalog
effect from the results document (ratio, margin, gated, passed, other
processes' load), the machine's load average and the commit measured.

``summarise`` reads those lines and writes ``catalog_margins.json`` and
``catalog_margins.md``: per effect the minimum, 5th percentile and median of
the fix/anti ratio over processes, the margin the rule in
``pytest_tfperf.catalog.effects.margin_from_ratios`` derives from them, and
how many runs went red and why.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RUNS_FILE = RESULTS / "catalog_margins_runs.jsonl"
MAIN_JOB = ["-m", "pytest", "--tfperf", "benchmarks/", "-p", "no:cacheprovider"]
RUN_TIMEOUT_S = 30 * 60


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _junit_outcomes(path: Path) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {"failed": [], "skipped": [], "passed": []}
    if not path.exists():
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        node = f"{case.get('classname', '')}::{case.get('name', '')}"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        skipped = case.find("skipped")
        if failure is not None:
            text = (failure.get("message") or "") + "\n" + (failure.text or "")
            out["failed"].append({"test": node, "message": text.strip()[-3000:]})
        elif skipped is not None:
            out["skipped"].append({"test": node, "message": (skipped.get("message") or "")[:1000]})
        else:
            out["passed"].append({"test": node, "message": ""})
    return out


_EFFECT_KEYS = ("scenario", "anti", "fix", "metric", "value", "spread", "min_effect", "gated", "passed",
                "other_processes_cores", "not_judged", "test", "detail")


def _effects(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [{k: e.get(k) for k in _EFFECT_KEYS} | {k: v for k, v in e.items() if k.startswith("machine_")}
            for e in doc.get("effects", [])]


def collect_one(index: int, branch: str, label: str, nice: int, keep: Path | None = None,
                commit: str = "") -> dict[str, object]:
    scratch = Path(tempfile.mkdtemp(prefix="catalog-margins-"))
    clone = scratch / "repo"
    subprocess.run(["git", "clone", "-q", "--branch", branch, str(ROOT), str(clone)], check=True)
    if commit:  # every run of a collection on the same code, whatever is committed meanwhile
        subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
    commit = _git("rev-parse", "HEAD", cwd=clone)
    json_path, xml_path = scratch / "results.json", scratch / "junit.xml"
    env = {**os.environ, "PYTHONPATH": str(clone)}
    cmd = ["nice", "-n", str(nice), sys.executable, *MAIN_JOB, f"--tfperf-json={json_path}",
           f"--junitxml={xml_path}"]
    load_before = os.getloadavg()
    started = time.monotonic()
    start_utc = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired as e:
        rc, tail = -9, f"timed out after {RUN_TIMEOUT_S} s: {str(e.stdout or '')[-2000:]}"
    wall = time.monotonic() - started
    outcomes = _junit_outcomes(xml_path)
    record = {
        "label": label, "index": index, "start_utc": start_utc, "wall_s": round(wall, 1), "commit": commit,
        "branch": branch, "command": " ".join(["python", *MAIN_JOB, "--tfperf-json=...", "--junitxml=..."]),
        "nice": nice, "rc": rc, "red": rc != 0,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "passed": len(outcomes["passed"]), "failed": outcomes["failed"], "skipped": outcomes["skipped"],
        "effects": _effects(json_path), "output_tail": tail if rc != 0 else "",
    }
    if keep is not None and json_path.exists():  # the whole results document, e.g. for catalog_table.py
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{label}-{index:03d}.json").write_bytes(json_path.read_bytes())
    subprocess.run(["rm", "-rf", str(scratch)], check=False)
    return record


def collect(args: argparse.Namespace) -> None:
    branch = args.branch or _git("rev-parse", "--abbrev-ref", "HEAD")
    RESULTS.mkdir(parents=True, exist_ok=True)
    deadline = (datetime.fromisoformat(args.stop_by).replace(tzinfo=timezone.utc) if args.stop_by else None)
    for i in range(args.runs):
        if deadline is not None and datetime.now(timezone.utc) >= deadline:
            print(f"stopped before run {i}: past {args.stop_by} UTC", flush=True)
            break
        record = collect_one(i, branch, args.label, args.nice, args.keep, args.commit)
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        gated = [e for e in record["effects"] if e["gated"]]
        print(f"{record['start_utc']} run {i} rc={record['rc']} {record['wall_s']:.0f}s "
              f"failed={[f['test'] for f in record['failed']]} "
              + " ".join(f"{e['scenario']}:{e['anti']}={e['value']:.3g}" for e in gated
                         if isinstance(e['value'], (int, float))), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="run the main job N times from fresh clones")
    c.add_argument("--runs", type=int, default=10)
    c.add_argument("--label", default="batch")
    c.add_argument("--branch", default="")
    c.add_argument("--commit", default="", help="check this commit out in each clone (default: the branch's head)")
    c.add_argument("--nice", type=int, default=5)
    c.add_argument("--stop-by", default="", help="UTC time (YYYY-MM-DDTHH:MM) after which no new run starts")
    c.add_argument("--out", type=Path, default=RUNS_FILE)
    c.add_argument("--keep", type=Path, default=None, help="copy each run's results JSON into this folder")
    s = sub.add_parser("summarise", help="write catalog_margins.json and .md from the runs file")
    s.add_argument("--runs-file", type=Path, default=RUNS_FILE)
    s.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.command == "collect":
        collect(args)
    else:
        summarise(args)
    return 0


# The effect each gated scenario stands for: its margin as set by hand before the rule (main at ea012b4). The
# rule only ever lowers a margin to what the data support, never raises it above this.
STATED_EFFECT = {
    ("allocation_in_loop", "anti"): 20.0, ("host_to_device", "anti"): 5.0, ("input_pipeline", "anti"): 1.2,
    ("vectorised_preprocessing", "anti"): 5.0, ("session_churn", "anti"): 4.0,
    ("session_churn", "anti_graph"): 5.0, ("oversized_batch", "anti"): 2.0, ("thread_starvation", "anti"): 1.3,
}
DISTRIBUTED_METRICS = ("throughput", "tf_allocator_peak")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip() and not line.startswith(("Traceback", "  File")):
            return line.strip()[:300]
    return ""


def summarise(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from pytest_tfperf.catalog.effects import MARGIN_CONFIDENCE, MIN_CLEAR_MARGIN, margin_from_ratios

    runs = [json.loads(line) for line in args.runs_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels = sorted({r["label"] for r in runs}, key=lambda lab: min(r["start_utc"] for r in runs if r["label"] == lab))
    batches = []
    # Each collection on its own, then all together: what the rule would set from everything measured (the
    # margins in force differ between collections, but the ratios do not depend on them).
    groups = [(label, [r for r in runs if r["label"] == label]) for label in labels]
    if len(labels) > 1:
        groups.append((f"all {len(runs)} runs together", runs))
    for label, rs in groups:
        batches.append({
            "label": label, "runs": len(rs), "red": sum(r["red"] for r in rs),
            "commits": sorted({r["commit"][:10] for r in rs}),
            "first_start_utc": min(r["start_utc"] for r in rs), "last_start_utc": max(r["start_utc"] for r in rs),
            "wall_s": [min(r["wall_s"] for r in rs), statistics.median(r["wall_s"] for r in rs),
                       max(r["wall_s"] for r in rs)],
            "loadavg_1min_before": [min(r["loadavg_before"][0] for r in rs), max(r["loadavg_before"][0] for r in rs)],
            "red_runs": [{"index": r["index"], "start_utc": r["start_utc"], "rc": r["rc"],
                          "failed": [{"test": f["test"], "why": _first_line(f["message"])} for f in r["failed"]]}
                         for r in rs if r["red"]],
            "effects": _effect_rows(rs, margin_from_ratios),
        })
    doc = {"command": "python benchmarks/catalog_margins.py collect --runs N --label L; "
                      "python benchmarks/catalog_margins.py summarise",
           "main_job": " ".join(["python", *MAIN_JOB, "--tfperf-json=RUN.json", "--junitxml=RUN.xml"]),
           "conditions": CONDITIONS, "rule": {"confidence": MARGIN_CONFIDENCE, "min_clear_margin": MIN_CLEAR_MARGIN,
                                              "where": "pytest_tfperf/catalog/effects.py: margin_from_ratios"},
           "batches": batches}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "catalog_margins.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (args.out_dir / "catalog_margins.md").write_text(_markdown(doc), encoding="utf-8")


CONDITIONS = ("The project's 2-core VM (AMD EPYC, no GPU, TensorFlow 2.21 CPU), each main job under `nice -n 5` "
              "while the lead's own measurement collection ran at normal priority beside it (and other "
              "helpers' test runs at nice 15): a loaded machine, load average 5-9 on 2 cores, not a quiet one.")


def _effect_rows(rs: list[dict], rule) -> list[dict]:  # noqa: ANN001 - margin_from_ratios
    from pytest_tfperf.catalog.effects import MIN_CLEAR_MARGIN

    keys: dict[tuple[str, str, str], list[dict]] = {}
    for r in rs:
        for e in r["effects"]:
            keys.setdefault((e["scenario"], e["anti"], e["fix"]), []).append(e)
    rows = []
    for (scenario, anti, fix), es in keys.items():
        values = [float(e["value"]) for e in es if isinstance(e["value"], (int, float))]
        # The runs that would have been judged had they missed: for an idle-cores effect, those where the
        # same run's checks say the machine could give the fix its cores. The margin comes from these only,
        # since a miss in the others is reported, not failed.
        judged = [float(e["value"]) for e in es if isinstance(e["value"], (int, float)) and _judgeable(e)]
        row = {"scenario": scenario, "anti": anti, "fix": fix, "metric": es[0]["metric"], "gated": es[0]["gated"],
               "margins_in_force": sorted({e["min_effect"] for e in es}), "runs": len(es),
               "not_judged": sum(bool(e["not_judged"]) for e in es),
               "judgeable": sum(1 for e in es if _judgeable(e)),
               "beat_margin": sum(1 for e in es if e["gated"] and e["passed"]),
               "missed_margin": sum(1 for e in es if e["gated"] and not e["passed"]),
               "missed_margin_judged": sum(1 for e in es if e["gated"] and not e["passed"] and not e["not_judged"]),
               "other_processes_cores": [min(e["other_processes_cores"] for e in es),
                                         max(e["other_processes_cores"] for e in es)]}
        if values:
            row |= {"min": min(values), "p5": _percentile(values, 5), "median": statistics.median(values),
                    "max": max(values)}
        if judged:
            row |= {"judged_min": min(judged), "judged_p5": _percentile(judged, 5),
                    "judged_median": statistics.median(judged)}
        uses = [e.get("machine_core_use") for e in es if e.get("machine_core_use")]
        if uses:
            fix_cores = [u[fix]["cores"] for u in uses if fix in u]
            row["fix_cores"] = [min(fix_cores), statistics.median(fix_cores), max(fix_cores)] if fix_cores else None
            row["per_run"] = [{"value": e["value"], "not_judged": e["not_judged"],
                               "other_processes_cores": e["other_processes_cores"],
                               "core_use": e.get("machine_core_use")} for e in es]
        ceiling = STATED_EFFECT.get((scenario, anti))
        if ceiling is not None and es[0]["metric"] in DISTRIBUTED_METRICS:
            if len(judged) >= 3:
                m = rule(judged, ceiling=ceiling)
                row["rule"] = {"stated_effect": ceiling, "runs": m.runs, "bound": round(m.bound, 4),
                               "margin": m.margin, "miss_chance": m.miss_chance, "reason": m.reason}
            else:
                # Too few runs to say anything: the rule's floor, as when the data cannot show more.
                row["rule"] = {"stated_effect": ceiling, "runs": len(judged), "bound": None,
                               "margin": MIN_CLEAR_MARGIN, "miss_chance": None,
                               "reason": f"the floor {MIN_CLEAR_MARGIN:g}x: only {len(judged)} runs where the "
                                         f"machine could give the fix its cores, too few for a bound"}
        rows.append(row)
    return rows


def _judgeable(e: dict) -> bool:
    """Whether a miss of this effect in its run would have failed the test (not "busy machine")."""
    from pytest_tfperf.catalog.machine_load import CoreUse, busy_machine_reason
    from pytest_tfperf.catalog.scenarios import load
    from pytest_tfperf.catalog.test_catalog import BUSY_MACHINE_CORES

    needed = float(getattr(load(str(e["scenario"])), "NEEDS_IDLE_CORES", 0.0))
    if not e["gated"] or not needed:
        return bool(e["gated"])
    if isinstance(e.get("machine_busy"), str):  # recorded by the run itself
        return not e["machine_busy"]
    use = (e.get("machine_core_use") or {}).get(e["fix"])
    fix = (CoreUse(int(use["calls"]), float(use["wall_s"]), float(use["cores"]) * float(use["wall_s"]),
                   float(use["idle_cores"]) * float(use["wall_s"])) if use else None)
    return not busy_machine_reason(needed_cores=needed, other_cores=float(e["other_processes_cores"]),
                                   busy_above=BUSY_MACHINE_CORES, fix=fix)


def _fmt(x: object) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _markdown(doc: dict) -> str:
    out = ["# Catalog margins: the main job over fresh processes", "",
           f"Written by `python benchmarks/catalog_margins.py summarise` from "
           f"`benchmarks/results/catalog_margins_runs.jsonl` (one line per main job, "
           f"`python benchmarks/catalog_margins.py collect`). Each run: a fresh `git clone` of the branch, then "
           f"`{doc['main_job']}` in a fresh process.", "", f"Conditions: {doc['conditions']}", "",
           f"Margins' rule: {doc['rule']['where']} (one-sided {doc['rule']['confidence']:.2%} prediction bound for "
           f"one new process, floor {doc['rule']['min_clear_margin']}x).", ""]
    for b in doc["batches"]:
        out += [f"## {b['label']}", "",
                f"{b['runs']} runs of commit(s) {', '.join(b['commits'])}, started {b['first_start_utc']} to "
                f"{b['last_start_utc']}; wall {b['wall_s'][0]:.0f}/{b['wall_s'][1]:.0f}/{b['wall_s'][2]:.0f} s "
                f"(min/median/max); 1-minute load average at start {b['loadavg_1min_before'][0]:.1f}-"
                f"{b['loadavg_1min_before'][1]:.1f}.", "",
                f"**Red runs: {b['red']} of {b['runs']}.**", ""]
        for r in b["red_runs"]:
            for f in r["failed"] or [{"test": f"(rc {r['rc']}, no failed test recorded)", "why": ""}]:
                out.append(f"- run {r['index']} ({r['start_utc']}): `{f['test']}`: {f['why']}")
        out += ["", "| effect | metric | runs | beat margin | judgeable | not judged (busy) | missed margin (judged) "
                "| min | 5th pct | median | judgeable min | margins in force | rule: bound -> margin | "
                "fix's cores (min/med/max) |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in b["effects"]:
            rule = e.get("rule")
            rule_text = ("–" if not rule else
                         f"**{rule['margin']:g}** ({rule['reason']})" if rule["bound"] is None else
                         f"{rule['bound']:.3g} -> **{rule['margin']:g}** ({rule['reason']}; chance of a miss "
                         f"{rule['miss_chance']:.1e})")
            cores = "/".join(f"{c:.2f}" for c in e["fix_cores"]) if e.get("fix_cores") else "–"
            beat = e["beat_margin"] if e["gated"] else "not gated"
            out.append(f"| {e['scenario']} {e['anti']}->{e['fix']} | {e['metric']} | {e['runs']} | {beat} "
                       f"| {e['judgeable']} "
                       f"| {e['not_judged']} "
                       f"| {e['missed_margin_judged']} | {_fmt(e.get('min', '–'))} | {_fmt(e.get('p5', '–'))} | "
                       f"{_fmt(e.get('median', '–'))} | {_fmt(e.get('judged_min', '–'))} | "
                       f"{', '.join(f'{m:g}' for m in e['margins_in_force'])} | {rule_text} | {cores} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
