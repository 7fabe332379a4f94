"""Validation study of the CI gate: false alarms (A/A) and power, measured through real pytest sessions.

Run:   .venv/bin/python benchmarks/validation_study.py            (full study, about 15 minutes on 2 cores)
       .venv/bin/python benchmarks/validation_study.py --quick    (smoke run, about 3 minutes; not for the README)
Writes benchmarks/results/validation.json and benchmarks/results/validation.md (--quick: validation-quick.*).

What it does, and why this way
------------------------------
Every stored-baseline verdict comes from a real ``pytest --tfperf`` session in
a fresh process, read back from its ``--tfperf-json`` results document, so the
study sees what CI sees: process-to-process and minute-to-minute variation of
the machine, the re-measure of borderline verdicts, the real probes.

1. A generated test module holds ``COPIES`` parametrised copies of two
   workloads, each copy a test id with its own baseline:
   ``test_matmul_chain`` (compute-bound: a ``tf.function`` chain of four
   512x512 matmuls, ~3 ms per call) for throughput, and
   ``test_embedding_bag`` (a 12-row embedding-bag lookup feeding the same
   chain; it adds ~13 MiB of TF-allocator memory per call) for memory.
2. Baselines: ``--tfperf-update`` sessions, each recording a few copies, so
   the copies' baselines come from different processes.
3. Calibration (one process, blocks of the variants interleaved): the slowed
   chain pushes ``r`` extra rows through every layer while still counting 512
   items (real CPU work in the same ops, as a change that does more work per
   item would); ``r`` is fitted so that throughput drops by 5%, 10% and 20%,
   corrected up to twice, and the realised slowdowns are measured before and
   after the judging. The memory change looks up 10% more bags than it needs
   (rows fitted so that the memory a call adds grows by 10%).
4. Judging sessions, conditions interleaved in a seeded order: the same test
   ids with the change switched on through an environment variable (the "code
   change"), judged by the plugin against their unchanged baselines.
5. Paired sessions: ``tfperf.compare`` measures the unchanged chain twice and
   the three slowed chains in one test, rounds interleaved; the study judges
   each variant against the unchanged one with ``gates.paired.judge_paired`` (same
   threshold and confidence, a signed-rank test on the per-round ratios of 20
   short interleaved rounds). This is
   what the gate can do when the baseline is measured in the same job (not a
   plugin mode yet): it separates the decision rule from the machine.

An alarm (A/A) or a catch is a throughput verdict "regressed" (memory: a
TF-allocator verdict "regressed"). Rates come with 95% Wilson intervals.
Verdicts of one session share its process, so they are not independent: the
number of sessions is given beside the number of verdicts. Every verdict is
also classified by the CPU that *other* processes used while its test (and
its baseline) ran: the gate's figures are the quiet ones.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from pytest_tfperf import stats  # noqa: E402
from validation.intervals import wilson_interval  # noqa: E402
from pytest_tfperf.catalog.machine_load import own_cpu_s, system_busy_s  # noqa: E402
from pytest_tfperf.gates.verdict import Tolerances  # noqa: E402

MODULE_NAME = "test_gate_workload"
INJECT_ENV = "TFPERF_VALIDATION_INJECT"  # "none", "slow:ROWS" (chain) or "mem:ROWS" (embedding bag)
COPIES_ENV = "TFPERF_VALIDATION_COPIES"
PAIRED_ENV = "TFPERF_VALIDATION_PAIRED"  # "ROWS5,ROWS10,ROWS20" for the paired test
TIMES_ENV = "TFPERF_VALIDATION_TIMES"
CHAIN, BAG, PAIRED = "test_matmul_chain", "test_embedding_bag", "test_paired"
BAG_BUDGET_S = 0.3  # memory peaks are exact: the embedding bag needs no long measurement
PAIRED_ROUNDS = 20  # short rounds, close in time: the machine's state is shared by each pair

# The two workloads' TensorFlow code, shared by every generated module of the studies.
TF_WORKLOADS = '''
BATCH, WIDTH, LAYERS, TABLE_ROWS, BAG = 512, 512, 4, 12288, 12

TABLE = tf.random.stateless_normal((TABLE_ROWS, WIDTH), seed=(1, 2))  # held: 24 MiB
IDS = tf.random.stateless_uniform((2 * BATCH, BAG), seed=(4, 4), maxval=TABLE_ROWS, dtype=tf.int32)
WEIGHTS = [tf.random.stateless_normal((WIDTH, WIDTH), seed=(3, i)) / WIDTH ** 0.5 for i in range(LAYERS)]


def rows(extra_rows=0):
    """The rows a call processes: BATCH items, plus extra_rows of extra work (the slowdown)."""
    return tf.range(BATCH + extra_rows) * 17 % TABLE_ROWS


@tf.function
def chain_step(table, rows):
    x = tf.gather(table, rows)
    for w in WEIGHTS:
        x = tf.tanh(tf.matmul(x, w))
    return tf.reduce_sum(x)


def bag_ids(extra_rows=0):
    """The bags a call looks up: BATCH items, plus extra_rows looked up for nothing (the memory change)."""
    return IDS[:BATCH + extra_rows]


@tf.function
def bag_step(table, ids):
    x = tf.reduce_mean(tf.gather(table, ids), axis=1)  # a 12 MiB gather per call
    for w in WEIGHTS:
        x = tf.tanh(tf.matmul(x, w))
    return tf.reduce_sum(x)
'''

WORKLOAD_MODULE = textwrap.dedent('''
    """Generated by benchmarks/validation_study.py: two workloads, many test ids, an injectable change."""
    import os

    import pytest
    import tensorflow as tf

    COPIES = int(os.environ.get("{copies_env}", "1"))
    KIND, _, AMOUNT = os.environ.get("{inject_env}", "none").partition(":")
    {tf_workloads}

    CHAIN_ROWS = rows(int(AMOUNT) if KIND == "slow" else 0)
    BAG_IDS = bag_ids(int(AMOUNT) if KIND == "mem" else 0)


    @pytest.mark.parametrize("copy", range(COPIES))
    def {chain}(tfperf, copy):
        assert tfperf(chain_step, TABLE, CHAIN_ROWS, items=BATCH).throughput_per_s > 0


    @pytest.mark.tfperf(budget_s={bag_budget})
    @pytest.mark.parametrize("copy", range(COPIES))
    def {bag}(tfperf, copy):
        assert tfperf(bag_step, TABLE, BAG_IDS, items=BATCH).throughput_per_s > 0


    @pytest.mark.tfperf(gate=False, rounds={paired_rounds})
    @pytest.mark.parametrize("copy", range(COPIES))
    def {paired}(tfperf, copy):
        extra = [int(r) for r in os.environ["{paired_env}"].split(",")]
        inputs = {{"base": rows(), "same": rows(), **{{f"slow{{n}}": rows(r) for n, r in zip((5, 10, 20), extra)}}}}
        variants = {{name: (lambda r=r: chain_step(TABLE, r)) for name, r in inputs.items()}}
        tfperf.compare(variants, items=BATCH)
''').format(tf_workloads=TF_WORKLOADS, copies_env=COPIES_ENV, inject_env=INJECT_ENV, paired_env=PAIRED_ENV,
            chain=CHAIN, bag=BAG, paired=PAIRED, bag_budget=BAG_BUDGET_S, paired_rounds=PAIRED_ROUNDS)

# Each test's start and end, on the clock of the load timeline (written beside the module).
TIMES_CONFTEST = textwrap.dedent('''
    import json
    import os
    import time

    import pytest


    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(item):
        start = time.monotonic()
        try:
            return (yield)
        finally:
            with open(os.environ["{times_env}"], "a", encoding="utf-8") as fh:
                fh.write(json.dumps({{"test_id": item.nodeid, "start": start, "end": time.monotonic()}}) + "\\n")
''').format(times_env=TIMES_ENV)


@dataclass(frozen=True)
class Condition:
    name: str
    label: str
    kind: str  # "aa", "slow", "mem", "mem_aa", "paired_aa", "paired_slow"
    nominal: float  # nominal slowdown or extra memory, as a fraction
    target: str
    check: Callable[[dict[str, Any]], bool] | None


CONDITIONS = (
    Condition("aa", "A/A (unchanged)", "aa", 0.0, "<= 1% false alarms", lambda e: e["rate"] <= 0.01),
    Condition("slow5", "+5% CPU work", "slow", 0.05, "report only", None),
    Condition("slow10", "+10% CPU work", "slow", 0.10, ">= 95% caught", lambda e: e["rate"] >= 0.95),
    Condition("slow20", "+20% CPU work", "slow", 0.20, "100% caught", lambda e: e["rate"] == 1.0),
    Condition("mem10", "+10% TF memory", "mem", 0.10, "100% caught", lambda e: e["rate"] == 1.0),
    Condition("mem_aa", "memory A/A (unchanged)", "mem_aa", 0.0, "no memory alarm", lambda e: e["hits"] == 0),
    Condition("paired_aa", "paired A/A", "paired_aa", 0.0, "<= 1% false alarms", lambda e: e["rate"] <= 0.01),
    Condition("paired_slow5", "paired +5%", "paired_slow", 0.05, "report only", None),
    Condition("paired_slow10", "paired +10%", "paired_slow", 0.10, ">= 95% caught", lambda e: e["rate"] >= 0.95),
    Condition("paired_slow20", "paired +20%", "paired_slow", 0.20, "100% caught", lambda e: e["rate"] == 1.0),
)
BY_NAME = {c.name: c for c in CONDITIONS}


@dataclass(frozen=True)
class SessionKind:
    """One kind of judging session: which tests it runs, with which change, giving which conditions."""

    name: str
    tests: tuple[str, ...]
    conditions: tuple[str, ...]  # the first is the one its count of quiet verdicts is planned for


SESSION_KINDS = {
    "aa": SessionKind("aa", (CHAIN, BAG), ("aa", "mem_aa")),
    "slow5": SessionKind("slow5", (CHAIN,), ("slow5",)),
    "slow10": SessionKind("slow10", (CHAIN,), ("slow10",)),
    "slow20": SessionKind("slow20", (CHAIN,), ("slow20",)),
    "mem10": SessionKind("mem10", (BAG,), ("mem10",)),
    "paired": SessionKind("paired", (PAIRED,), ("paired_aa", "paired_slow5", "paired_slow10", "paired_slow20")),
}


@dataclass(frozen=True)
class Plan:
    copies: int
    budget_s: float
    rounds: int
    baseline_sessions: int
    sessions: dict[str, int]  # per session kind
    calibration_blocks: int
    verify_blocks: int
    block_s: float
    seed: int
    quick: bool
    max_minutes: float
    max_wait_s: float
    baseline_attempts: int


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        return Plan(copies=4, budget_s=0.6, rounds=args.rounds, baseline_sessions=2,
                    sessions={"aa": 2, "slow5": 1, "slow10": 1, "slow20": 1, "mem10": 1, "paired": 1},
                    calibration_blocks=6, verify_blocks=8, block_s=0.08, seed=args.seed, quick=True,
                    max_minutes=5.0, max_wait_s=10.0, baseline_attempts=2)
    other = args.sessions
    return Plan(copies=args.copies, budget_s=args.budget, rounds=args.rounds,
                baseline_sessions=min(args.copies, args.baseline_sessions),
                sessions={"aa": args.aa_sessions, "slow5": other, "slow10": other, "slow20": other, "mem10": other,
                          "paired": other},
                calibration_blocks=12, verify_blocks=25, block_s=0.12, seed=args.seed, quick=False,
                max_minutes=args.max_minutes, max_wait_s=60.0, baseline_attempts=3)


# ---------------------------------------------------------------------------
# machine load: what else ran while a test measured
#
# Other processes on this 2-core machine (other developers' test runs) can halve
# a 2-thread matmul's speed for as long as they run. CI runs on a machine of its
# own, so the study classifies every verdict by the CPU that *other* processes
# used while that test was measured (and while its baseline was recorded), and
# reports the quiet ones as the gate's figures and the disturbed ones apart.

QUIET_CORES = 0.20  # others' average CPU use during a test (in cores) up to which it counts as quiet


def _loadavg() -> float:
    with open("/proc/loadavg", encoding="ascii") as fh:
        return float(fh.read().split()[0])


class CpuTimeline:
    """Samples (time, machine busy CPU, own CPU) every ``period_s`` on a thread; answers "others' cores in [a, b]"."""

    def __init__(self, period_s: float = 0.1) -> None:
        import threading

        self.samples: list[tuple[float, float, float]] = []
        self._period = period_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        point = (time.monotonic(), system_busy_s(), own_cpu_s())
        with self._lock:
            self.samples.append(point)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self._sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def others_cores(self, start: float, end: float) -> float:
        """Average cores used by other processes between two ``time.monotonic()`` readings."""
        self._sample()
        with self._lock:
            samples = list(self.samples)
        before = [p for p in samples if p[0] <= start] or samples[:1]
        after = [p for p in samples if p[0] >= end] or samples[-1:]
        a, b = before[-1], after[0]
        wall = b[0] - a[0]
        if wall <= 0:
            return 0.0
        return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / wall)

    def wait_until_quiet(self, max_wait_s: float, window_s: float = 1.0) -> float:
        """Wait until other processes used at most QUIET_CORES over the last window; returns seconds waited."""
        t0 = time.monotonic()
        while True:
            start = time.monotonic()
            time.sleep(window_s)
            if self.others_cores(start, time.monotonic()) <= QUIET_CORES or time.monotonic() - t0 >= max_wait_s:
                return time.monotonic() - t0 - window_s


# ---------------------------------------------------------------------------
# pytest sessions


def _env(copies: int, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1", COPIES_ENV: str(copies),
                INJECT_ENV: "none"})
    env.update(extra)
    return env


@dataclass
class SessionRun:
    doc: Any
    exit_code: int
    wall_s: float
    load1: float
    others_cores: float  # over the whole session
    test_others_cores: dict[str, float]  # per test id (pytest node id), over its own run


def run_session(work: Path, plan: Plan, timeline: CpuTimeline, *, targets: Sequence[str], json_name: str,
                env: Mapping[str, str], update: bool = False) -> SessionRun:
    from pytest_tfperf.storage.results_json import load_results

    json_path = work / "results" / json_name
    times_path = work / "results" / (json_name + ".times")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tfperf",
           f"--tfperf-budget={plan.budget_s}", f"--tfperf-rounds={plan.rounds}",
           "--tfperf-baseline-dir=baselines", f"--tfperf-json={json_path}",
           "--no-tfperf-explain",  # the gate's verdicts and time alone, as published (explanations are on by default)
           *[f"{MODULE_NAME}.py::{t}" for t in targets]]
    if update:
        cmd.append("--tfperf-update")
    load1 = _loadavg()
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env={**env, TIMES_ENV: str(times_path)}, capture_output=True, text=True)
    t1 = time.monotonic()
    if proc.returncode not in (0, 1) or not json_path.exists():
        raise RuntimeError(f"pytest session failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    per_test = {}
    for line in times_path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        per_test[rec["test_id"]] = round(timeline.others_cores(rec["start"], rec["end"]), 3)
    return SessionRun(load_results(json_path), proc.returncode, round(t1 - t0, 2), load1,
                      round(timeline.others_cores(t0, t1), 3), per_test)


def _metric(verdict: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for m in verdict.get("metrics", ()):
        if m.get("metric") == name:
            return m  # type: ignore[no-any-return]
    return None


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None  # "inf": nothing detectable; kept out of the figures


def _row(condition: str, session: int, test_id: str, verdict: Mapping[str, Any], remeasured: bool) -> dict[str, Any]:
    thr = _metric(verdict, "throughput") or {}
    tf_mem = _metric(verdict, "peak_tf_allocator[CPU:0]") or {}
    memory = [m for m in verdict.get("metrics", ()) if str(m.get("metric", "")).startswith("peak_")]
    return {
        "condition": condition,
        "session": session,
        "test_id": test_id,
        "status": str(verdict.get("status")),
        "remeasured": remeasured,
        "throughput_status": str(thr.get("status")),
        "throughput_change": _num(thr.get("relative_change")),
        "throughput_ci": [_num(thr.get("ci_low")), _num(thr.get("ci_high"))],
        "throughput_p": _num(thr.get("p_value")),
        "throughput_mdc": _num(thr.get("minimum_detectable_change")),
        "tf_memory_status": str(tf_mem.get("status")),
        "tf_memory_change": _num(tf_mem.get("relative_change")),
        "memory_regressed": [m["metric"] for m in memory if m.get("status") == "regressed"],
    }


def _node(test_id: str) -> str:
    """The pytest node id a measurement belongs to: variants of ``compare`` carry '-name' inside the brackets."""
    head, _, tail = test_id.partition("[")
    return f"{head}[{tail.split('-')[0].rstrip(']')}]" if tail else head


def verdict_rows(doc: Any, plan: Plan, kind: SessionKind, session: int) -> list[dict[str, Any]]:
    rows = []
    if kind.name == "paired":
        from pytest_tfperf.gates.paired import judge_paired
        from pytest_tfperf.storage.documents import to_json_value

        by_test: dict[str, dict[str, Any]] = {}
        for m in doc.measurements:
            variant = m.test_id.rsplit("-", 1)[1].rstrip("]")
            by_test.setdefault(_node(m.test_id), {})[variant] = m
        for node, variants in sorted(by_test.items()):
            base = variants["base"]
            for variant, condition in (("same", "paired_aa"), ("slow5", "paired_slow5"),
                                       ("slow10", "paired_slow10"), ("slow20", "paired_slow20")):
                verdict = judge_paired(variants[variant], base, Tolerances())
                row = _row(condition, session, node, to_json_value(verdict), False)
                row["needs_remeasure"] = verdict.needs_remeasure  # paired: judged once, no re-measure
                rows.append(row)
        return rows
    for test_id in doc.test_ids:
        verdict = doc.verdict(test_id)
        measurement = doc.measurement(test_id)
        if verdict is None or measurement is None:
            raise RuntimeError(f"{test_id}: no verdict in the results of a judging session: is its baseline missing?")
        condition = kind.conditions[1] if (kind.name == "aa" and f"::{BAG}[" in test_id) else kind.conditions[0]
        rows.append(_row(condition, session, test_id, verdict, len(measurement.timings.round_sizes) > plan.rounds))
    return rows


# ---------------------------------------------------------------------------
# calibration (a worker process: it imports TensorFlow)


def calibration_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Time variants of the chain, blocks interleaved: per-variant slowdowns; and the bag's added memory."""
    import numpy as np

    sys.path.insert(0, spec["work"])
    module = __import__(MODULE_NAME)
    tf = module.tf
    inputs = {name: module.rows(extra) for name, extra in spec["variants"].items()}
    step = module.chain_step
    for r in inputs.values():  # trace (one trace per input length) and warm up
        for _ in range(20):
            step(module.TABLE, r)
    added = {}
    for extra in spec["bag_rows"]:
        ids = module.bag_ids(extra)
        module.bag_step(module.TABLE, ids)
        tf.config.experimental.reset_memory_stats("CPU:0")
        start = int(tf.config.experimental.get_memory_info("CPU:0")["current"])
        module.bag_step(module.TABLE, ids)
        added[str(extra)] = int(tf.config.experimental.get_memory_info("CPU:0")["peak"]) - start
    names = list(inputs)
    block_ns = spec["block_s"] * 1e9
    fast: dict[str, list[float]] = {n: [] for n in names}
    typical: dict[str, list[float]] = {n: [] for n in names}
    rng = random.Random(spec["seed"])
    for _ in range(spec["blocks"]):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            args = (module.TABLE, inputs[name])
            times = []
            start_ns = time.perf_counter_ns()
            while time.perf_counter_ns() - start_ns < block_ns or len(times) < 10:
                t0 = time.perf_counter_ns()
                step(*args)
                times.append(time.perf_counter_ns() - t0)
            fast[name].append(float(np.percentile(times, 10)))
            typical[name].append(float(np.median(times)))
    out: dict[str, Any] = {"added_bytes": added, "base_median_ms": statistics.median(typical["base"]) / 1e6,
                           "slowdowns": {}}
    for name in names:
        # Throughput ratio to the unchanged chain within the same block. The fastest decile of a
        # block is the variant's undisturbed speed; the median-based figure is kept as a cross-check.
        slow = sorted(1.0 - b / v for b, v in zip(fast["base"], fast[name]))
        slow_median = sorted(1.0 - b / v for b, v in zip(typical["base"], typical[name]))
        out["slowdowns"][name] = {"median": statistics.median(slow), "q25": stats.percentile(slow, 25),
                                  "q75": stats.percentile(slow, 75),
                                  "from_block_medians": statistics.median(slow_median), "blocks": len(slow)}
    return out


def run_worker(work: Path, plan: Plan, spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec, work=str(work), block_s=plan.block_s)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--calibration-worker", json.dumps(spec)],
                          cwd=work, env=_env(1), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"calibration worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


GRID_ROWS = (16, 32, 64, 128, 192)
SLOW = {"slow5": 0.05, "slow10": 0.10, "slow20": 0.20}


def _extra_time(slowdown: float) -> float:
    """Extra time per iteration, as a fraction of the unchanged one, that loses ``slowdown`` of throughput."""
    return 1.0 / (1.0 - slowdown) - 1.0


def _rows_for(rows: float) -> int:
    return int(min(1024, max(1, round(rows))))


MEM_PROBE_ROWS = 64


def calibrate(work: Path, plan: Plan, bag_added: int) -> dict[str, Any]:
    """Fit the extra rows for each slowdown (corrected up to twice) and for +10% memory; measure what they do."""
    grid = {"base": 0, **{f"r{r}": r for r in GRID_ROWS}}
    fit_run = run_worker(work, plan, {"variants": grid, "blocks": plan.calibration_blocks, "seed": plan.seed,
                                      "bag_rows": [0, MEM_PROBE_ROWS]})
    # Time ratio t_variant / t_base = 1 / (1 - slowdown): close to linear in the rows.
    xs = [float(r) for r in GRID_ROWS]
    ys = [1.0 + _extra_time(fit_run["slowdowns"][f"r{r}"]["median"]) for r in GRID_ROWS]
    fit = stats.linear_fit(xs, ys)
    rows = {name: _rows_for(((1.0 + _extra_time(s)) - fit.intercept) / fit.slope) for name, s in SLOW.items()}
    # Memory a bag call adds is linear in the rows it looks up (below the allocator's large-buffer jump).
    probe = fit_run["added_bytes"]
    per_row = (probe[str(MEM_PROBE_ROWS)] - probe["0"]) / MEM_PROBE_ROWS
    mem_rows = _rows_for(0.10 * probe["0"] / per_row)

    def verify(seed: int) -> dict[str, Any]:
        return run_worker(work, plan, {"variants": {"base": 0, **rows}, "blocks": plan.verify_blocks, "seed": seed,
                                       "bag_rows": [0, mem_rows]})

    first = final = verify(plan.seed + 1)
    # Up to two proportional corrections: scale the rows by the extra time wanted over the extra time obtained.
    for attempt in range(2):
        corrected = False
        for name, s in SLOW.items():
            got = final["slowdowns"][name]["median"]
            if abs(got - s) > 0.01:
                rows[name] = _rows_for(rows[name] * (_extra_time(s) / _extra_time(got) if got > 0.002 else 2.0))
                corrected = True
        if not corrected:
            break
        final = verify(plan.seed + 2 + attempt)
    added = final["added_bytes"]
    return {
        "grid_rows": list(GRID_ROWS),
        "grid_time_ratio": ys,
        "fit_time_ratio": {"intercept": fit.intercept, "per_row": fit.slope, "r_squared": fit.r_squared},
        "first_try": {name: first["slowdowns"][name]["median"] for name in SLOW},
        "rows": rows,
        "mem_rows": mem_rows,
        "bag_added_bytes_baseline": bag_added,
        "bag_added_bytes_in_process": added,
        "realised_memory_increase": (added[str(mem_rows)] - added["0"]) / added["0"],
        "base_iteration_ms": final["base_median_ms"],
        "realised": {name: final["slowdowns"][name] for name in SLOW},
    }


def injects(calibration: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Environment of each session kind: the "code change" it runs."""
    rows = calibration["rows"]
    paired = ",".join(str(rows[n]) for n in ("slow5", "slow10", "slow20"))
    return {
        "aa": {},
        **{name: {INJECT_ENV: f"slow:{rows[name]}"} for name in SLOW},
        "mem10": {INJECT_ENV: f"mem:{calibration['mem_rows']}"},
        "paired": {PAIRED_ENV: paired},
    }


# ---------------------------------------------------------------------------
# summaries


def session_order(plan: Plan) -> list[str]:
    """Session kinds interleaved evenly over the study, each cycle shuffled (seeded)."""
    rng = random.Random(plan.seed)
    cycles = max(plan.sessions.values())
    order: list[str] = []
    for i in range(cycles):
        cycle = []
        for kind, n in plan.sessions.items():
            # Bresenham: kind's sessions spread evenly over the cycles
            cycle += [kind] * ((i + 1) * n // cycles - i * n // cycles)
        rng.shuffle(cycle)
        order += cycle
    return order


def _hit(kind: str, row: dict[str, Any]) -> bool:
    if kind in ("mem", "mem_aa"):
        return bool(row["memory_regressed"])
    return row["throughput_status"] == "regressed"


def _median_finite(values: Any) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def _rate_entry(kind: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    hits = sum(_hit(kind, r) for r in rows)
    lo, hi = wilson_interval(hits, n) if n else (None, None)
    changes = [r["throughput_change"] for r in rows if r["throughput_change"] is not None]
    statuses: dict[str, int] = {}
    for r in rows:
        key = r["tf_memory_status"] if kind in ("mem", "mem_aa") else r["throughput_status"]
        statuses[key] = statuses.get(key, 0) + 1
    mem_changes = [r["tf_memory_change"] for r in rows if r["tf_memory_change"] is not None]
    return {
        "verdicts": n,
        "sessions": len({r["session"] for r in rows}),
        "hits": hits,
        "rate": hits / n if n else None,
        "wilson95": [lo, hi],
        "remeasured": sum(r["remeasured"] for r in rows),
        "statuses": statuses,
        "median_estimated_throughput_change": statistics.median(changes) if changes else None,
        "estimated_change_quantiles": ([stats.percentile(changes, q) for q in (5, 25, 50, 75, 95)]
                                       if changes else None),
        "median_minimum_detectable_change": _median_finite(r["throughput_mdc"] for r in rows),
        "median_estimated_memory_change": statistics.median(mem_changes) if mem_changes else None,
    }


def summarise(rows: list[dict[str, Any]], calibration: dict[str, Any]) -> dict[str, Any]:
    """Per condition: the quiet verdicts (the gate's figures), the disturbed ones, and all together."""
    out: dict[str, Any] = {}
    for c in CONDITIONS:
        rs = [r for r in rows if r["condition"] == c.name]
        entry: dict[str, Any] = {
            "label": c.label, "kind": c.kind, "nominal": c.nominal, "target": c.target,
            "quiet": _rate_entry(c.kind, [r for r in rs if r["quiet"]]),
            "disturbed": _rate_entry(c.kind, [r for r in rs if not r["quiet"]]),
            "all": _rate_entry(c.kind, rs),
        }
        slow_name = c.name.replace("paired_", "")
        if slow_name in SLOW:
            entry["realised"] = calibration["realised"][slow_name]
            entry["realised_after"] = calibration.get("realised_after", {}).get(slow_name)
        if c.kind == "mem":
            entry["realised_memory_increase"] = calibration["realised_memory_increase"]
        check = c.check
        entry["target_met"] = None if check is None or not entry["quiet"]["verdicts"] else bool(check(entry["quiet"]))
        out[c.name] = entry
    return out


SWEEP = (0.05, 0.075, 0.10, 0.15, 0.20)


def threshold_sweep(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Alarm / catch rates (quiet verdicts) had the decision threshold been another, same p-values.

    Approximate: the verdicts' re-measures were triggered at the shipped threshold.
    """
    out: dict[str, dict[str, float | None]] = {}
    for c in CONDITIONS:
        if c.kind in ("mem", "mem_aa"):
            continue
        rs = [r for r in rows if r["condition"] == c.name and r["quiet"] and r["throughput_change"] is not None]
        out[c.name] = {
            f"{d:g}": (sum((r["throughput_p"] or 1.0) <= 0.01 and -r["throughput_change"] > d for r in rs) / len(rs)
                       if rs else None)
            for d in SWEEP
        }
    return out


# ---------------------------------------------------------------------------
# report


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.{digits}f}%"


def _realised(c: dict[str, Any]) -> str:
    if "realised" in c:
        text = f"-{_pct(c['realised']['median'])}"
        if c.get("realised_after"):
            text += f" / -{_pct(c['realised_after']['median'])}"
        return text + " throughput"
    if c["kind"] == "mem":
        return f"+{_pct(c['realised_memory_increase'])} added TF memory"
    return "none"


def _table(result: dict[str, Any], names: Sequence[str], which: str, with_target: bool) -> list[str]:
    head = ("| condition | realised change (before / after the judging) | gate's median estimate | verdicts (sessions) "
            "| alarms / caught | rate (95% Wilson) | re-measured |")
    rule = "|---|---|---|---|---|---|---|"
    if with_target:
        head += " target | met |"
        rule += "---|---|"
    lines = [head, rule]
    for name in names:
        c = result["conditions"][name]
        e = c[which]
        if not e["verdicts"]:
            continue
        lo, hi = e["wilson95"]
        if c["kind"] in ("mem", "mem_aa"):
            estimate = f"{_pct(e['median_estimated_memory_change'])} memory"
        else:
            estimate = f"{_pct(e['median_estimated_throughput_change'])} throughput"
        line = (f"| {c['label']} | {_realised(c)} | {estimate} | {e['verdicts']} ({e['sessions']}) | {e['hits']} | "
                f"{_pct(e['rate'])} ({_pct(lo)} to {_pct(hi)}) | {e['remeasured']} |")
        if with_target:
            met = c["target_met"]
            line += f" {c['target']} | {'-' if met is None else ('yes' if met else '**no**')} |"
        lines.append(line)
    return lines


STORED = ("aa", "slow5", "slow10", "slow20", "mem10", "mem_aa")
PAIRED_NAMES = ("paired_aa", "paired_slow5", "paired_slow10", "paired_slow20")


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    cal = result["calibration"]
    load = result["load"]
    m = result["machine"]
    q = result["conditions"]["aa"]["quiet"]["estimated_change_quantiles"]
    lines = [
        f"Validation of the CI gate on this machine ({m['cpu']}, {m['cores']} cores, TensorFlow {m['tensorflow']}), "
        f"{result['created_at'][:10]}. Reproduce with `{result['command']}`.",
        "",
        f"Throughput workload: a `tf.function` chain of four 512x512 matmuls, {cal['base_iteration_ms']:.1f} ms per "
        f"call, measured with `--tfperf-budget {s['budget_s']:g}` ({s['rounds']} rounds of about "
        f"{s['budget_s'] / s['rounds']:.2g} s). Memory workload: an embedding-bag lookup feeding the same chain, "
        f"adding {cal['bag_added_bytes_baseline'] / 2**20:.0f} MiB of TF-allocator memory per call (budget "
        f"{BAG_BUDGET_S:g} s). {s['copies']} test ids per workload, each with its own baseline, recorded by "
        f"`--tfperf-update` in {s['baseline_sessions']} processes; every verdict comes from a fresh `pytest "
        f"--tfperf` process. Gate defaults: tolerance {_pct(s['tolerance'], 0)}, decision threshold "
        f"{_pct(s['decision_threshold'], 1)}, {_pct(s['confidence'], 0)} confidence, one re-measure of borderline "
        f"verdicts; TF-allocator band max(2%, 1 MiB) of the memory a call adds.",
        "",
        f"**Stored baseline** (the gate as shipped), quiet verdicts: other processes used at most "
        f"{s['quiet_cores']:g} cores while the test and its baseline ran:",
        "",
        *_table(result, STORED, "quiet", with_target=True),
        "",
        f"In the A/A runs the gate's estimate of the throughput change ranged {_pct(q[0])} to {_pct(q[4])} "
        f"(5th to 95th percentile; quartiles {_pct(q[1])} and {_pct(q[3])}) for unchanged code: this is the "
        "machine's run-to-run variation, which a comparison against one stored run cannot tell from a change "
        "of the code." if q else "",
        "",
        f"**Paired**: the unchanged chain twice and the three slowed chains measured in one test with "
        f"`tfperf.compare` ({PAIRED_ROUNDS} interleaved rounds of about {s['budget_s'] / PAIRED_ROUNDS:.2g} s "
        f"each), judged by `gates.paired.judge_paired` (same threshold and confidence; one-sided signed-rank test on the "
        f"per-round throughput ratios; judged once, no re-measure). This is what the gate can do when the baseline "
        f"code is measured in the same job, as `tfperf.compare(..., reference=...)` does:",
        "",
        *_table(result, PAIRED_NAMES, "quiet", with_target=True),
        "",
        "Rates at other decision thresholds (quiet verdicts, same p-values; the re-measures were those of the "
        "shipped threshold):",
        "",
        "| condition | " + " | ".join(f"threshold {_pct(d)}" for d in SWEEP) + " |",
        "|---|" + "---|" * len(SWEEP),
    ]
    for c in CONDITIONS:
        rates = result["threshold_sweep"].get(c.name)
        if rates:
            lines.append(f"| {c.label} | " + " | ".join(_pct(rates[f"{d:g}"]) for d in SWEEP) + " |")
    lines.append("")
    disturbed = [n for n in STORED + PAIRED_NAMES if result["conditions"][n]["disturbed"]["verdicts"]]
    if disturbed:
        lines += [
            "Disturbed verdicts (other processes on this shared machine used more CPU than that while the test or "
            "its baseline ran; not the gate's figures):",
            "",
            *_table(result, disturbed, "disturbed", with_target=False),
            "",
        ]
    missed = [result["conditions"][n]["label"] for n in STORED + PAIRED_NAMES
              if result["conditions"][n]["target_met"] is False]
    lines += [
        "Targets missed: " + (", ".join(missed) if missed else "none") + ".",
        "",
        f"Whole study: {result['total_wall_s'] / 60:.1f} minutes wall time ({result['waited_s'] / 60:.1f} of them "
        f"waiting for other processes to quieten), {result['sessions_run']} pytest sessions. Load during the "
        f"judging sessions: 1-minute load average {load['load1_median']:.2f} median ({load['load1_min']:.2f} to "
        f"{load['load1_max']:.2f}; the study itself keeps about 1.8 cores busy); other processes used "
        f"{load['other_cpu_cores_median']:.2f} cores on median (max {load['other_cpu_cores_max']:.2f}) of "
        f"{m['cores']}.",
        "",
        "An alarm or a catch is a throughput verdict \"regressed\" (memory rows: a TF-allocator verdict "
        "\"regressed\"). Realised slowdowns are measured in one process, variants interleaved, from the fastest "
        "decile of each block; the gate's estimate is the median over the verdicts of current / baseline - 1. "
        "Verdicts of one session share its process and are not independent.",
    ]
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from importlib.metadata import version

    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "tensorflow": version("tensorflow")}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# the study


class Study:
    def __init__(self, plan: Plan, work: Path, timeline: CpuTimeline) -> None:
        self.plan = plan
        self.work = work
        self.timeline = timeline
        self.t_start = time.monotonic()
        self.sessions_run = 0
        self.waited_s = 0.0
        self.baseline_others: dict[str, float] = {}
        self.bag_added: list[int] = []
        self.rows: list[dict[str, Any]] = []
        self.sessions: list[dict[str, Any]] = []
        self.counter: dict[str, int] = {}

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t_start

    def wait_quiet(self) -> None:
        waited = self.timeline.wait_until_quiet(self.plan.max_wait_s)
        self.waited_s += waited
        if waited > 1:
            log(f"waited {waited:.0f} s for other processes to quieten")

    def record_baselines(self) -> None:
        """Record every copy's baselines; copies measured on a busy machine are recorded again (a few tries)."""
        plan = self.plan
        todo = list(range(plan.copies))
        for attempt in range(plan.baseline_attempts):
            groups = [todo[i::plan.baseline_sessions] for i in range(min(plan.baseline_sessions, len(todo)))]
            for g, ids in enumerate(groups):
                self.wait_quiet()
                run = run_session(self.work, plan, self.timeline, env=_env(plan.copies), update=True,
                                  targets=[f"{t}[{i}]" for i in ids for t in (CHAIN, BAG)],
                                  json_name=f"baseline-{attempt}-{g}.json")
                self.sessions_run += 1
                for m in run.doc.measurements:
                    self.baseline_others[m.test_id] = run.test_others_cores.get(m.test_id, math.inf)
                    if f"::{BAG}[" in m.test_id:
                        self.bag_added += [p.added_bytes for p in m.memory
                                           if p.source.value == "tf_allocator" and p.added_bytes]
                log(f"baselines (try {attempt + 1}) ids {ids}: {run.wall_s:.1f} s, others up to "
                    f"{max(run.test_others_cores.values()):.2f} cores")
            todo = [i for i in range(plan.copies)
                    if max(self.baseline_others.get(f"{MODULE_NAME}.py::{t}[{i}]", math.inf) for t in (CHAIN, BAG))
                    > QUIET_CORES]
            if not todo:
                break

    def judge_session(self, kind: SessionKind, env: Mapping[str, str]) -> None:
        k = self.counter.get(kind.name, 0)
        self.counter[kind.name] = k + 1
        self.wait_quiet()
        run = run_session(self.work, self.plan, self.timeline, env=_env(self.plan.copies, **env),
                          targets=kind.tests, json_name=f"{kind.name}-{k}.json")
        self.sessions_run += 1
        new = verdict_rows(run.doc, self.plan, kind, k)
        for r in new:
            r["others_cores"] = run.test_others_cores.get(r["test_id"])
            r["baseline_others_cores"] = 0.0 if kind.name == "paired" else self.baseline_others.get(r["test_id"])
            r["quiet"] = (r["others_cores"] is not None and r["others_cores"] <= QUIET_CORES
                          and r["baseline_others_cores"] is not None and r["baseline_others_cores"] <= QUIET_CORES)
        self.rows += new
        summary = []
        for name in kind.conditions:
            rs = [r for r in new if r["condition"] == name]
            summary.append(f"{name} {sum(_hit(BY_NAME[name].kind, r) for r in rs)}/{len(rs)}")
        quiet = sum(r["quiet"] for r in new)
        remeasured = sum(r["remeasured"] for r in new)
        self.sessions.append({"kind": kind.name, "index": k, "pytest_exit": run.exit_code, "summary": summary,
                              "quiet_verdicts": quiet, "remeasured": remeasured, "wall_s": run.wall_s,
                              "load1": run.load1, "other_cpu_cores": run.others_cores})
        log(f"{kind.name}#{k}: {', '.join(summary)} regressed; {quiet}/{len(new)} quiet, {remeasured} re-measured, "
            f"{run.wall_s:.1f} s, load {run.load1:.2f}, others {run.others_cores:.2f} cores")

    def quiet_count(self, condition: str) -> int:
        return sum(r["quiet"] for r in self.rows if r["condition"] == condition)


def study(plan: Plan, command: str, keep: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tfperf-validation-"))
    timeline = CpuTimeline()
    st = Study(plan, work, timeline)
    try:
        (work / f"{MODULE_NAME}.py").write_text(WORKLOAD_MODULE, encoding="utf-8")
        (work / "conftest.py").write_text(TIMES_CONFTEST, encoding="utf-8")
        (work / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly\n", encoding="utf-8")
        (work / "results").mkdir()

        # 1. baselines, the copies spread over several processes
        st.record_baselines()
        bag_added = int(statistics.median(st.bag_added))

        # 2. calibration of the injected changes
        t_cal = time.monotonic()
        st.wait_quiet()
        calibration = calibrate(work, plan, bag_added)
        calibration["others_cores"] = round(timeline.others_cores(t_cal, time.monotonic()), 3)
        calibration["wall_s"] = round(time.monotonic() - t_cal, 1)
        log("calibration: rows " + ", ".join(f"{k} {v} (realised {_pct(calibration['realised'][k]['median'])})"
                                             for k, v in calibration["rows"].items())
            + f"; memory: {calibration['mem_rows']} extra bag rows "
              f"(+{_pct(calibration['realised_memory_increase'])}); others {calibration['others_cores']:.2f} cores")
        envs = injects(calibration)

        # 3. judging sessions, kinds interleaved ...
        for name in session_order(plan):
            st.judge_session(SESSION_KINDS[name], envs[name])
        # ... and more where other processes disturbed too many verdicts, while time allows
        wanted = {name: n * plan.copies for name, n in plan.sessions.items()}
        while st.elapsed_s() < plan.max_minutes * 60:
            short = [(st.quiet_count(SESSION_KINDS[name].conditions[0]) / wanted[name], name) for name in wanted
                     if wanted[name] and st.quiet_count(SESSION_KINDS[name].conditions[0]) < wanted[name]]
            if not short:
                break
            name = min(short)[1]
            st.judge_session(SESSION_KINDS[name], envs[name])

        # 4. the realised slowdowns once more, after the judging
        st.wait_quiet()
        after = run_worker(work, plan, {"variants": {"base": 0, **calibration["rows"]}, "blocks": plan.verify_blocks,
                                        "seed": plan.seed + 9, "bag_rows": [0]})
        calibration["realised_after"] = {name: after["slowdowns"][name] for name in SLOW}
    finally:
        timeline.stop()
        if keep:
            log(f"kept the work directory {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    tol = Tolerances()
    loads = [s["load1"] for s in st.sessions]
    others = [s["other_cpu_cores"] for s in st.sessions]
    return {
        "command": command,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": {"copies": plan.copies, "budget_s": plan.budget_s, "rounds": plan.rounds,
                     "baseline_sessions": plan.baseline_sessions, "sessions": plan.sessions, "seed": plan.seed,
                     "quick": plan.quick, "tolerance": tol.throughput,
                     "decision_threshold": tol.throughput_decision_threshold, "confidence": tol.confidence,
                     "quiet_cores": QUIET_CORES},
        "calibration": calibration,
        "conditions": summarise(st.rows, calibration),
        "threshold_sweep": threshold_sweep(st.rows),
        "load": {"load1_median": statistics.median(loads), "load1_min": min(loads), "load1_max": max(loads),
                 "other_cpu_cores_median": statistics.median(others), "other_cpu_cores_max": max(others)},
        "baseline_others_cores": st.baseline_others,
        "sessions_run": st.sessions_run,
        "waited_s": round(st.waited_s, 1),
        "total_wall_s": round(st.elapsed_s(), 1),
        "sessions": st.sessions,
        "verdicts": st.rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: few sessions, short budget (~3 minutes)")
    parser.add_argument("--copies", type=int, default=10, help="test ids per workload (default 10)")
    parser.add_argument("--aa-sessions", type=int, default=6, help="A/A judging sessions (default 6)")
    parser.add_argument("--sessions", type=int, default=5,
                        help="judging sessions per injected change, and paired sessions (default 5)")
    parser.add_argument("--baseline-sessions", type=int, default=5, help="processes that record the baselines")
    parser.add_argument("--budget", type=float, default=1.0, help="--tfperf-budget in seconds (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="--tfperf-rounds (default 5)")
    parser.add_argument("--max-minutes", type=float, default=25.0,
                        help="stop adding sessions for disturbed verdicts after this long (default 25)")
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--keep", action="store_true", help="keep the generated work directory")
    parser.add_argument("--out-dir", type=Path, default=HERE / "results")
    parser.add_argument("--calibration-worker", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.calibration_worker:
        print(json.dumps(calibration_worker(json.loads(args.calibration_worker))))
        return 0
    plan = make_plan(args)
    command = ".venv/bin/python benchmarks/validation_study.py"
    given = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--keep"]
    if given:
        command += " " + " ".join(given)
    log(f"load average before the study: {_loadavg():.2f}")
    result = study(plan, command, args.keep)
    stem = "validation-quick" if args.quick else "validation"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1, sort_keys=True, allow_nan=False) + "\n",
                                               encoding="utf-8")
    text = markdown(result)
    (args.out_dir / f"{stem}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
