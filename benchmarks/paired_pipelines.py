"""The paired gate (``--tfperf-against``) on tests written as users write them: tf.data pipelines with
TensorFlow's default options, Keras ``fit`` and ``train_on_batch``, a ``tf.function`` step.

Run:   .venv/bin/python benchmarks/paired_pipelines.py --aa 20 --planted 10 --cost 5
Writes benchmarks/results/paired_pipelines.json and .md.

Two directories hold the same six tests, as two checkouts would (``base/`` and ``change/``):

* ``test_image_map``: ``from_tensor_slices(...).repeat().batch(64).map(augment).prefetch(AUTOTUNE)`` (random
  flips, brightness and a resize; TensorFlow's default options: autotune, map parallelization, an injected
  prefetch), consumed by a small ``tf.function`` step through ``tfperf.iterate``;
* ``test_spectrogram``: ``map(stft).cache().repeat().batch(8).prefetch(AUTOTUNE)``, the same consumer;
* ``test_shuffled_augment``: ``shuffle(256).map(flip, num_parallel_calls=AUTOTUNE).batch(32).prefetch``;
* ``test_train_on_batch``: a small Keras CNN, ``model.train_on_batch``;
* ``test_fit``: the same model, ``model.fit`` over a prefetched dataset, one epoch a call;
* ``test_tf_function_step``: four 256x256 matmuls and tanh in a ``tf.function``.

A/A sessions: both trees identical; every "regressed" throughput verdict is a false alarm. Planted sessions:
``change/`` declares ``1 / (1 + plant)`` times the items per call of ``base/`` with identical work, so its
throughput is exactly ``plant`` lower on the books while the timing, noise and all, is the real one; this
measures the statistics' power at a known change without a calibrated slowdown (a real slowdown's dynamics
are not exercised here; the CI workflow check plants real work). Each session is one CI job:
``pytest --tfperf --tfperf-against=../base --tfperf-json=...`` in ``change/``. Cost: a plain
``pytest --tfperf`` and a paired run of the same tests on unchanged code, alternating ``--cost`` times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SUITE = '''
import numpy as np
import tensorflow as tf
import keras

AUTOTUNE = tf.data.AUTOTUNE
K = {k}  # items declared per item: 1 in base/, 1/(1+plant) in a planted change/


def augment(x):
    x = tf.image.random_flip_left_right(x)
    x = tf.image.random_brightness(x, 0.1)
    return tf.image.resize(x, (40, 40))


@tf.function
def small_step(x):
    return tf.reduce_mean(tf.nn.relu(tf.reduce_mean(x, axis=[1, 2])))


def test_image_map(tfperf):
    ds = tf.data.Dataset.from_tensor_slices(np.random.rand(512, 32, 32, 3).astype("float32")).repeat()
    ds = ds.batch(64).map(augment).prefetch(AUTOTUNE)
    tfperf.iterate(ds, items=64 * K, step=small_step)


def spectro(x):
    s = tf.signal.stft(x, frame_length=256, frame_step=128)
    return tf.math.log(tf.abs(s) + 1e-6)


def test_spectrogram(tfperf):
    ds = tf.data.Dataset.from_tensor_slices(np.random.rand(64, 8000).astype("float32"))
    ds = ds.map(spectro).cache().repeat().batch(8).prefetch(AUTOTUNE)
    tfperf.iterate(ds, items=8 * K, step=small_step)


def test_shuffled_augment(tfperf):
    ds = tf.data.Dataset.from_tensor_slices(np.random.rand(1024, 24, 24, 3).astype("float32")).repeat()
    ds = ds.shuffle(256).map(lambda x: tf.image.random_flip_up_down(x) * 1.1, num_parallel_calls=AUTOTUNE)
    ds = ds.batch(32).prefetch(AUTOTUNE)
    tfperf.iterate(ds, items=32 * K, step=small_step)


def _model():
    m = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    m.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_train_on_batch(tfperf):
    m = _model()
    x = np.random.rand(32, 16, 16, 3).astype("float32")
    y = np.random.randint(0, 10, 32)
    tfperf(lambda: m.train_on_batch(x, y), items=32 * K)


def test_fit(tfperf):
    m = _model()
    ds = tf.data.Dataset.from_tensor_slices((np.random.rand(256, 16, 16, 3).astype("float32"),
                                             np.random.randint(0, 10, 256))).batch(32).prefetch(AUTOTUNE)
    tfperf(lambda: m.fit(ds, epochs=1, verbose=0), items=256 * K)


W = tf.random.normal([256, 256])


@tf.function
def mm(x):
    for _ in range(4):
        x = tf.tanh(tf.matmul(x, W))
    return x


def test_tf_function_step(tfperf):
    x = tf.random.normal([64, 256])
    tfperf(lambda: mm(x), items=64 * K)
'''

KINDS = {"test_image_map": "pipeline", "test_spectrogram": "pipeline", "test_shuffled_augment": "pipeline",
         "test_train_on_batch": "keras", "test_fit": "keras", "test_tf_function_step": "step"}


def make_trees(root: Path, plant: float, explain: bool = True) -> None:
    # Without explanations a red session costs only its verdicts: a power run at a large plant, where every
    # test goes red, would otherwise spend most of its time profiling (the verdicts are the same either way).
    ini = "[pytest]\nfilterwarnings = ignore\n" + ("" if explain else "tfperf_explain = false\n")
    for tree, k in (("base", "1.0"), ("change", repr(1.0 / (1.0 + plant)) if plant else "1.0")):
        (root / tree).mkdir(parents=True, exist_ok=True)
        (root / tree / "test_user_suite.py").write_text(SUITE.replace("{k}", k))
        (root / tree / "pytest.ini").write_text(ini)


def pytest_run(cwd: Path, *args: str) -> tuple[float, int, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tfperf", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    return time.monotonic() - start, proc.returncode, proc.stdout[-8000:]


def verdicts(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    rows = []
    for test_id, entry in doc["tests"].items():
        verdict = entry.get("verdict") or {}
        t = next((m for m in verdict.get("metrics", []) if m["metric"] == "throughput"), None)
        if t is None:
            continue
        name = test_id.split("::")[-1]
        rows.append({"test": name, "kind": KINDS.get(name, "?"), "status": t["status"],
                     "change": t["relative_change"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
                     "mde": t["minimum_detectable_change"], "failed": verdict.get("status") == "regressed",
                     # the notice of a cost on a few iterations (``gates.paired.periodic_cost``): on unchanged
                     # code, each one is a false notice
                     "periodic_notice": "mean time per item" in str(t.get("message", "")),
                     "message": str(t.get("message", ""))})
    return rows


def session(root: Path, label: str, i: int, only: str | None = None) -> dict[str, Any]:
    out = root / f"{label}-{i}.json"
    wall, code, tail = pytest_run(root / "change", "--tfperf-against=../base", f"--tfperf-json={out}",
                                  *(["-k", only] if only else []))
    rows = verdicts(out) if out.exists() else []
    # Tests whose first pair read the mean time per item slower, so that fresh pairs were measured for the
    # notice (``against.periodic``): the notice's cost on unchanged code.
    checked = tail.count("this pair of processes read the mean time per item")
    # A red session keeps what its verdicts said of their confirmation (which pair read what), so that a false
    # alarm can be traced to its path afterwards; a crashed one keeps its output's tail.
    said = [line for line in tail.splitlines() if "confirmed" in line or "could not be measured again" in line]
    return {"label": label, "i": i, "wall_s": wall, "exit": code, "rows": rows,
            "load": os.getloadavg()[0], "tail": tail if code not in (0, 1) else "",
            "confirmations": said if code == 1 else [], "periodic_checked": checked}


def statement_check(sessions: list[dict[str, Any]], plant: float) -> dict[str, int]:
    """Does the stated limit hold? Of the planted verdicts whose stated limit was at most the planted slowdown
    (``1 - 1 / (1 + plant)`` of the throughput), how many failed the test: at least 95% should."""
    slowdown = 1.0 - 1.0 / (1.0 + plant)
    rows = [r for s in sessions for r in s["rows"] if r["mde"] is not None and r["mde"] <= slowdown]
    return {"stated_at_most_the_plant": len(rows), "caught": sum(r["status"] == "regressed" for r in rows)}


def monotone_rates(rates: list[tuple[float, int, int]]) -> list[tuple[float, float]]:
    """Catch rates by planted size, made non-decreasing by pooling adjacent sizes that violate it (weighted by
    their verdicts: pool-adjacent-violators). Runs at different sizes meet different spells of the machine, so
    a larger slowdown can be caught less often by chance; a power curve cannot fall."""
    blocks: list[list[float]] = []  # [first size, last size, caught, verdicts]
    for size, caught, n in sorted(r for r in rates if r[2]):
        blocks.append([size, size, caught, n])
        while len(blocks) > 1 and blocks[-2][2] / blocks[-2][3] > blocks[-1][2] / blocks[-1][3]:
            last = blocks.pop()
            blocks[-1][1], blocks[-1][2], blocks[-1][3] = last[1], blocks[-1][2] + last[2], blocks[-1][3] + last[3]
    sizes = sorted(r[0] for r in rates if r[2])
    return [(size, next(b[2] / b[3] for b in blocks if b[0] <= size <= b[1])) for size in sizes]


def half_point(rates: list[tuple[float, int, int]]) -> str:
    """The smallest slowdown caught in half of the trials, from (slowdown, caught, verdicts) at each planted
    size: on the monotone fit, linear between the two sizes around 50%, or a bound where every size lies on
    one side of it."""
    points = monotone_rates(rates)
    if not points:
        return "-"
    if points[0][1] >= 0.5:
        return f"below {points[0][0]:.1%}"
    for (s0, r0), (s1, r1) in zip(points, points[1:]):
        if r1 >= 0.5:
            return f"about {s0 + (0.5 - r0) / (r1 - r0) * (s1 - s0):.0%}"
    return f"above {points[-1][0]:.1%}"


def power_table(paths: list[str]) -> list[str]:
    """Per workload kind and per test: the planted slowdowns caught at each size measured, and the smallest
    slowdown caught in half of the trials (``--power``)."""
    runs = []
    for path in paths:
        done = json.loads(Path(path).read_text())
        runs.append((1.0 - 1.0 / (1.0 + done["plant"]), f"{Path(path).name} (commit {done.get('commit', '?')})",
                     [r for sess in done.get("planted_sessions", []) for r in sess["rows"]]))
    runs.sort(key=lambda run: run[0])
    head = " | ".join(f"-{size:.1%} caught" for size, _, _ in runs)
    lines = ["planted runs: " + ", ".join(f"-{size:.1%}: {source}" for size, source, _ in runs), "",
             f"| kind or test | {head} | caught in half the trials (monotone fit) |",
             "|---|" + "---|" * (len(runs) + 1)]
    groups = [(kind, lambda r, k=kind: r["kind"] == k) for kind in sorted(set(KINDS.values()))]
    groups += [(f"`{name}`", lambda r, n=name: r["test"] == n) for name in KINDS]
    for label, wanted in groups:
        rates = []
        for size, _, rows in runs:
            mine = [r for r in rows if wanted(r)]
            rates.append((size, sum(r["status"] == "regressed" for r in mine), len(mine)))
        cells = " | ".join(f"{c} of {n}" for _, c, n in rates)
        lines.append(f"| {label} | {cells} | {half_point(rates)} |")
    return lines


def summarise(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [r for s in sessions for r in s["rows"]]
    by_kind: dict[str, Any] = {}
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        mdes = [r["mde"] for r in mine if r["mde"] is not None and r["mde"] != float("inf")]
        by_kind[kind] = {"verdicts": len(mine), "regressed": sum(r["status"] == "regressed" for r in mine),
                         "noisy": sum(r["status"] == "noisy" for r in mine),
                         "median_stated_limit": statistics.median(mdes) if mdes else None}
    return {"sessions": len(sessions), "verdicts": len(rows),
            "regressed": sum(r["status"] == "regressed" for r in rows),
            "noisy": sum(r["status"] == "noisy" for r in rows), "by_kind": by_kind,
            "periodic_notices": sum(bool(r.get("periodic_notice")) for r in rows),
            "periodic_checked": sum(int(s.get("periodic_checked", 0)) for s in sessions),
            "median_wall_s": statistics.median(s["wall_s"] for s in sessions) if sessions else None}


def write_results(result: dict[str, Any], args: argparse.Namespace, cost: list[dict[str, float]]) -> list[str]:
    """The JSON and Markdown results so far: written after every session, so that a run stopped early (by
    its deadline or by hand) keeps what it measured."""
    result["aa"] = summarise(result.get("aa_sessions", []))
    result["planted_summary"] = summarise(result.get("planted_sessions", []))
    result["statement"] = statement_check(result.get("planted_sessions", []), args.plant)
    result["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    Path(args.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    aa, pl = result["aa"], result["planted_summary"]
    lines = [f"# Paired gate on user-style tests (commit {result['commit']})", "",
             f"`.venv/bin/python benchmarks/paired_pipelines.py --aa {args.aa} --planted {args.planted} "
             f"--plant {args.plant} --cost {args.cost}{' --no-explain' if args.no_explain else ''}"
             f"{f' --only {args.only}' if args.only else ''}`, "
             f"{result['started']} to {result['finished']}", "",
             f"- A/A: {aa['regressed']} false alarms in {aa['verdicts']} verdicts ({aa['sessions']} sessions); "
             f"noisy {aa['noisy']} of {aa['verdicts']}; a notice of a cost on a few iterations (false, on unchanged "
             f"code) {aa.get('periodic_notices', 0)}, fresh pairs measured for it {aa.get('periodic_checked', 0)} "
             "times",
             f"- planted {1 - 1 / (1 + args.plant):.1%} slower (declared items 1/{1 + args.plant:.4g}): "
             f"caught {pl['regressed']} of {pl['verdicts']} ({pl['sessions']} sessions)",
             f"- verdicts whose stated limit was at most the planted {1 - 1 / (1 + args.plant):.1%}: "
             f"{result['statement']['stated_at_most_the_plant']}, caught {result['statement']['caught']}",
             f"- cost: paired / plain wall time, median of {len(cost)}: "
             f"{result['cost']['median_ratio']:.2f}" if cost else "- cost: not measured", "",
             "| kind | A/A verdicts | false alarms | noisy | median stated limit | planted verdicts | caught |",
             "|---|---|---|---|---|---|---|"]
    for kind in sorted(set(aa["by_kind"]) | set(pl["by_kind"])):
        a, p = aa["by_kind"].get(kind, {}), pl["by_kind"].get(kind, {})
        limit = a.get("median_stated_limit")
        lines.append(f"| {kind} | {a.get('verdicts', 0)} | {a.get('regressed', 0)} | {a.get('noisy', 0)} | "
                     f"{'-' if limit is None else f'{limit:.1%}'} | {p.get('verdicts', 0)} | {p.get('regressed', 0)} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aa", type=int, default=20, help="A/A sessions (6 verdicts each)")
    parser.add_argument("--planted", type=int, default=10, help="sessions with the planted change")
    parser.add_argument("--plant", type=float, default=0.10, help="planted throughput loss (fraction)")
    parser.add_argument("--cost", type=int, default=5, help="plain/paired pairs for the cost ratio")
    parser.add_argument("--out", default=str(HERE / "results" / "paired_pipelines"))
    parser.add_argument("--no-explain", action="store_true", help="tfperf_explain = false in both trees")
    parser.add_argument("--only", metavar="EXPR", help="only the tests pytest's -k EXPR selects")
    parser.add_argument("--power", metavar="JSON", nargs="+",
                        help="only print, from planted runs at several sizes, the slowdown caught half the time")
    parser.add_argument("--check", metavar="JSON", help="only print the stated-limit check of a results file")
    args = parser.parse_args()
    if args.power:
        print("\n".join(power_table(args.power)))
        return 0
    if args.check:
        done = json.loads(Path(args.check).read_text())
        print(json.dumps(statement_check(done.get("planted_sessions", []), done["plant"])))
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    result: dict[str, Any] = {"commit": commit, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "plant": args.plant, "explain": not args.no_explain}
    with tempfile.TemporaryDirectory(prefix="tfperf-paired-") as tmp:
        aa_root, planted_root = Path(tmp) / "aa", Path(tmp) / "planted"
        make_trees(aa_root, 0.0, explain=not args.no_explain)
        make_trees(planted_root, args.plant, explain=not args.no_explain)
        cost = []
        for i in range(args.cost):
            plain, _, _ = pytest_run(aa_root / "change")
            paired = session(aa_root, "cost", i)
            cost.append({"plain_s": plain, "paired_s": paired["wall_s"], "ratio": paired["wall_s"] / plain})
            result.setdefault("aa_sessions", []).append(paired)
            print(f"cost {i}: plain {plain:.1f} s, paired {paired['wall_s']:.1f} s", flush=True)
        result["cost"] = {"pairs": cost, "median_ratio": statistics.median(c["ratio"] for c in cost) if cost else None}
        for i in range(args.aa):
            s = session(aa_root, "aa", i, args.only)
            result.setdefault("aa_sessions", []).append(s)
            print(f"aa {i}: {[r['status'] for r in s['rows']]} {s['wall_s']:.0f} s load {s['load']:.1f}", flush=True)
            write_results(result, args, cost)
        for i in range(args.planted):
            s = session(planted_root, "planted", i, args.only)
            result.setdefault("planted_sessions", []).append(s)
            print(f"planted {i}: {[r['status'] for r in s['rows']]} {s['wall_s']:.0f} s", flush=True)
            write_results(result, args, cost)
    lines = write_results(result, args, cost)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
