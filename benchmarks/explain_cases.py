"""Planted regressions on real models, explained from TensorFlow's profile: is the top cause the planted one?

Run:   nice -n 15 .venv/bin/python benchmarks/explain_cases.py          (all cases, 3 fresh processes each)
       nice -n 15 .venv/bin/python benchmarks/explain_cases.py --case mnv2_added_conv --processes 1
Writes benchmarks/results/explain_cases.json and .md (not with --case).

Each case builds a workload nobody tuned for (keras.applications MobileNetV2
with weights=None, an Embedding+LSTM and a small Transformer text model, a
small CNN under ``model.fit``, tf.data pipelines) in a base and a changed
variant, plus a second instance of the base (the A/A arm, same code built
twice). In one fresh process per repeat it:

1. times the arms in interleaved rounds (base, changed, base again; median
   time per iteration of ``ROUNDS`` rounds each): the measured change, as a
   gate would measure it;
2. profiles the arms through ``pytest_tfperf.profiling`` (``WINDOWS`` windows
   of ``WINDOW_SECONDS`` each per arm, host tracer level 2) in ONE profiler
   session with the arms' windows alternating (``profile_steps``); a pipeline
   arm pulls half a window unmarked before each of its windows (``settle``),
   so that what it did ahead on tf.data threads is not read as free; the
   whole pass within the measured rounds' time (``budget_s``: a calibration
   session, then iterations per window cut, and down to ``MIN_WINDOWS``
   windows, so that stopping the profiler and reading the profile fit);
3. attributes the measured change (changed vs base) and the A/A change
   (base again vs base), and records: whether the top cause is the planted
   group, how much of the measured change the causes explain, whether the
   profiled pass's own change agrees with the measured one within 10%, what
   the profiled pass cost against the measured rounds, and the stored size
   of a profile.

The raw profiles go to a temporary folder (``--keep-profiles DIR`` keeps them
for ``tensorboard --logdir``).
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
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

ROUNDS = 5
ROUND_SECONDS = 0.4
WINDOWS = 6
MIN_WINDOWS = 5  # the budget may cut a window, not more: the attribution's noise is the windows' spread
WINDOW_SECONDS = 0.1
RESULTS = HERE / "results"

# name -> (what is planted, how the planted group's key is recognised)
CASES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "mnv2_added_conv": ("MobileNetV2 (alpha 0.35, 64x64) train_on_batch: a Conv2D(128) added after the backbone",
                        lambda k: "planted_conv" in k),
    "mnv2_widened_dense": ("MobileNetV2 (alpha 0.35, 64x64) train_on_batch: head Dense widened 32 -> 8192",
                           lambda k: "head_dense" in k),
    "mnv2_float64_head": ("MobileNetV2 (alpha 0.35, 64x64) predict step: two head Dense(2048) computed in float64",
                          lambda k: "head_dense" in k),
    "lstm_widened": ("Embedding+LSTM text classifier train_on_batch: LSTM widened 32 -> 160",
                     lambda k: "lstm" in k),
    "transformer_widened_ffn": ("Transformer block text classifier train_on_batch: feed-forward widened 64 -> 768",
                                lambda k: "ffn" in k),
    "transformer_added_attention": ("Transformer block text classifier train_on_batch: a second attention layer added",
                                    lambda k: "planted_attention" in k),
    "cnn_fit_added_layer": ("small CNN under model.fit on a tf.data pipeline: a Conv2D(64) added",
                            lambda k: "planted_conv" in k),
    "step_py_function": ("tf.function train step of a small CNN: a py_function (numpy sort) added to the step",
                         lambda k: "planted_py" in k or k == "op:PyFunc"),
    "step_retrace_scalar": ("tf.function step called with a Python float that changes each call (retraces)",
                            lambda k: k.startswith("retracing:")),
    "pipeline_py_function_parse": ("tf.data: CSV lines (batches of 128) parsed by a py_function (Python split) instead of "
                                   "tf.io.decode_csv", lambda k: (k.startswith("stage:") and "Map" in k)
                                   or k == "tfdata:PyFunc"),
    "pipeline_slow_source": ("tf.data: records from a Python generator (1.5 ms each) instead of from_tensor_slices",
                             lambda k: k.startswith("stage:") and ("Generator" in k or "FlatMap" in k)),
    "pipeline_dropped_cache": ("tf.data: a 3 ms per record map whose .cache() was dropped (work repeated each epoch)",
                               lambda k: k.startswith("stage:Prefetch/Map") or k == "tfdata:PyFunc"
                               or (k.startswith("stage:") and "Map" in k)),
}


# ---------------------------------------------------------------- workloads (built in the worker process)

def _build(case: str, variant: str) -> Callable[[], Any]:
    """A no-argument step for ``variant`` ("base" or "changed") of ``case``; TensorFlow is imported here."""
    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    changed = variant == "changed"

    def mnv2(head: Callable[[Any], Any], compile_: bool = True) -> keras.Model:
        backbone = keras.applications.MobileNetV2(weights=None, include_top=False, input_shape=(64, 64, 3),
                                                  alpha=0.35)
        out = head(backbone.output)
        model = keras.Model(backbone.input, out)
        if compile_:
            model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    if case.startswith("mnv2_"):
        x = rng.random((8, 64, 64, 3), dtype=np.float32)
        y = rng.integers(0, 10, 8)
        if case == "mnv2_added_conv":
            def head(h: Any) -> Any:
                if changed:
                    h = keras.layers.Conv2D(128, 3, padding="same", activation="relu", name="planted_conv")(h)
                return keras.layers.Dense(10, name="classifier")(keras.layers.GlobalAveragePooling2D()(h))
        elif case == "mnv2_widened_dense":
            def head(h: Any) -> Any:
                h = keras.layers.GlobalAveragePooling2D()(h)
                h = keras.layers.Dense(8192 if changed else 32, activation="relu", name="head_dense")(h)
                return keras.layers.Dense(10, name="classifier")(h)
        else:  # mnv2_float64_head: inference step, the head in float64
            def head(h: Any) -> Any:
                h = keras.layers.GlobalAveragePooling2D()(h)
                h = keras.layers.Dense(2048, activation="relu", name="head_dense",
                                       dtype="float64" if changed else "float32")(h)
                h = keras.layers.Dense(2048, activation="relu", name="head_dense2",
                                       dtype="float64" if changed else "float32")(h)
                return keras.layers.Dense(10, name="classifier", dtype="float32")(h)
            model = mnv2(head, compile_=False)
            xs = tf.constant(rng.random((32, 64, 64, 3), dtype=np.float32))
            predict = tf.function(lambda t: model(t, training=False))
            return lambda: predict(xs)
        model = mnv2(head)
        return lambda: model.train_on_batch(x, y)

    if case == "lstm_widened":
        model = keras.Sequential([keras.Input((40,), dtype="int32"), keras.layers.Embedding(2000, 32),
                                  keras.layers.LSTM(160 if changed else 32), keras.layers.Dense(2)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.integers(0, 2000, (32, 40))
        y = rng.integers(0, 2, 32)
        return lambda: model.train_on_batch(x, y)

    if case.startswith("transformer_"):
        wide = changed and case == "transformer_widened_ffn"
        inputs = keras.Input((64,), dtype="int32")
        h = keras.layers.Embedding(4000, 64)(inputs)
        attn = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(h, h)
        h = keras.layers.LayerNormalization()(h + attn)
        if changed and case == "transformer_added_attention":
            attn = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16, name="planted_attention")(h, h)
            h = keras.layers.LayerNormalization()(h + attn)
        ff = keras.layers.Dense(768 if wide else 64, activation="relu", name="ffn_in")(h)
        ff = keras.layers.Dense(64, name="ffn_out")(ff)
        h = keras.layers.LayerNormalization()(h + ff)
        out = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))
        model = keras.Model(inputs, out)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.integers(0, 4000, (16, 64))
        y = rng.integers(0, 2, 16)
        return lambda: model.train_on_batch(x, y)

    if case == "cnn_fit_added_layer":
        layers = [keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                  keras.layers.MaxPooling2D()]
        if changed:
            layers.append(keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="planted_conv"))
        layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
        model = keras.Sequential(layers)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        images = rng.random((256, 32, 32, 3), dtype=np.float32)
        labels = rng.integers(0, 10, 256)
        ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(32).repeat().prefetch(tf.data.AUTOTUNE)
        return lambda: model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)

    if case == "step_py_function":
        model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.01)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        x = tf.constant(rng.random((32, 32, 32, 3), dtype=np.float32))
        y = tf.constant(rng.integers(0, 10, 32))

        def numpy_sort(t: Any) -> Any:
            return np.sort(t.numpy(), axis=None)[:1].astype(np.float32)

        @tf.function
        def train_step(images: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(images, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            if changed:
                with tf.name_scope("planted_py"):
                    loss += 0.0 * tf.py_function(numpy_sort, [tf.tile(images, [8, 1, 1, 1])], tf.float32)[0]
            return loss
        return lambda: train_step(x, y)

    if case == "step_retrace_scalar":
        w = tf.Variable(tf.random.normal((256, 256)))
        x = tf.random.normal((64, 256))

        @tf.function
        def scaled(t: Any, scale: Any) -> Any:
            return tf.reduce_sum(tf.nn.relu(tf.matmul(tf.matmul(t, w), w)) * scale)
        count = [0]

        def step() -> Any:
            count[0] += 1
            # the planted bug: a Python float that changes each call makes a new trace each call
            scale = 1.0 + count[0] * 1e-6 if changed else tf.constant(1.0)
            return scaled(x, scale)
        return step

    if case.startswith("pipeline_"):
        options = tf.data.Options()
        # the plants are what a user wrote: TensorFlow's rewrites would hide or undo them
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.map_and_batch_fusion = False
        # Three arms share one process and its 2 cores: a pipeline that works ahead (an injected, autotuned
        # prefetch buffer) fills it on its own threads while the other arms are timed and profiled, and is
        # read as free in its own windows. Without them each pull waits for its work, as the timed rounds do.
        options.experimental_optimization.inject_prefetch = False
        options.autotune.enabled = False
        work = np.arange(2000, dtype=np.float64)

        def slow_record(i: Any, ms: float) -> Any:
            end = time.perf_counter() + ms / 1e3
            while time.perf_counter() < end:  # busy work, as a parser or augmentation would do
                np.sort(work)
            return i

        if case == "pipeline_py_function_parse":
            lines = [",".join(f"{v:.4f}" for v in row) for row in rng.random((4096, 16))]

            def parse_py(line: Any) -> Any:  # what a user writes when decode_csv looks unfamiliar
                return np.array([float(v) for v in line.numpy().decode().split(",")], dtype=np.float32)
            if changed:
                def parse(line: Any) -> Any:
                    return tf.ensure_shape(tf.py_function(parse_py, [line], tf.float32), (16,))
            else:
                def parse(line: Any) -> Any:
                    return tf.stack(tf.io.decode_csv(line, record_defaults=[0.0] * 16))
            ds = tf.data.Dataset.from_tensor_slices(lines).repeat().map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            ds = ds.batch(128).with_options(options)
        elif case == "pipeline_slow_source":
            records = rng.random((100000, 16), dtype=np.float32)
            if changed:
                def gen() -> Any:
                    for row in records:
                        slow_record(0, 1.5)
                        yield row
                ds = tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((16,), tf.float32))
            else:
                ds = tf.data.Dataset.from_tensor_slices(records)
            ds = ds.map(lambda r: r * 2.0, num_parallel_calls=tf.data.AUTOTUNE).batch(4).with_options(options)
        else:  # pipeline_dropped_cache
            ds = tf.data.Dataset.range(24).map(
                lambda i: tf.py_function(lambda v: slow_record(v, 3.0), [i], tf.int64))
            if not changed:
                ds = ds.cache()
            ds = ds.batch(4).repeat().with_options(options)
        iterator = iter(ds)
        # the consumer's own step: a small matmul, so there is a step to wait for input
        m = tf.random.normal((128, 128))
        consume = tf.function(lambda e: tf.reduce_sum(tf.matmul(m, m)))

        def pull() -> Any:
            return consume(next(iterator))
        return pull

    raise SystemExit(f"unknown case {case!r}")


# ---------------------------------------------------------------- one process: time, profile, attribute

def _iterations_for(step: Callable[[], Any], seconds: float) -> tuple[int, float]:
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < 0.3 or n < 2:
        step()
        n += 1
    per = (time.perf_counter() - start) / n
    return max(1, round(seconds / per)), per


def run_case(case: str, profile_dir: Path) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pytest_tfperf.profiling.capture import profile_steps

    t0 = time.perf_counter()
    arms = {"base": _build(case, "base"), "changed": _build(case, "changed"), "base_again": _build(case, "base")}
    for step in arms.values():  # first calls trace and build
        for _ in range(3):
            step()
    build_s = time.perf_counter() - t0
    # each arm its own round length: a step 100x slower must not run 100x longer rounds
    n = {arm: _iterations_for(step, ROUND_SECONDS)[0] for arm, step in arms.items()}
    rounds: dict[str, list[float]] = {a: [] for a in arms}
    t1 = time.perf_counter()
    for _ in range(ROUNDS):
        for arm, step in arms.items():
            # A pipeline works ahead while the other arms run: drain what it buffered before timing it.
            for _ in range(n[arm] // 2 if case.startswith("pipeline_") else 0):
                step()
            start = time.perf_counter()
            for _ in range(n[arm]):
                step()
            rounds[arm].append((time.perf_counter() - start) / n[arm])
    measured_s = time.perf_counter() - t1
    per_iter = {a: statistics.median(v) for a, v in rounds.items()}

    profiles = {}
    outcome_info = {}
    iterations = {arm: max(2, round(WINDOW_SECONDS / per_iter[arm])) for arm in arms}
    pass_started = time.perf_counter()
    # One profiler session, the arms' windows alternating: the machine's drift falls on every arm alike.
    # A pipeline arm gets settle calls before each of its windows, as its timed rounds do: with TensorFlow's
    # injected prefetch and autotuning off (see _build) the only work done ahead is a parallel map's few
    # elements in flight, finished meanwhile on tf.data threads; pulled unmarked, they are not read as free
    # in the window, and what the arm did ahead lands in its own settle calls, outside every window.
    settle = {arm: max(1, iterations[arm] // 2) for arm in arms} if case.startswith("pipeline_") else 0
    # The whole pass (warm-up, calibration, windows, stop, reading) within the measured rounds' time, as
    # --tfperf-explain sizes it: the budget cuts the windows' iterations (and a window) when the profiler's
    # stop and reading would cost more than is left (profiling.profile_budget).
    outcomes = profile_steps(arms, profile_dir / case / "all", windows=WINDOWS, iterations=iterations, warmup=1,
                             settle=settle, budget_s=measured_s, min_windows=MIN_WINDOWS)
    pass_s = time.perf_counter() - pass_started
    events = _events(next(iter(outcomes.values())))  # after the pass, not counted in it
    for arm, outcome in outcomes.items():
        outcome_info[arm] = _outcome_info(outcome, iterations[arm], interleaved=True, events=events)
        profiles[arm] = outcome.profile
    out: dict[str, Any] = {"case": case, "pid": os.getpid(), "round_iterations": n, "build_s": round(build_s, 1),
                           "measured_rounds_s": round(measured_s, 2), "profiled_pass_s": round(pass_s, 2),
                           "load_average": [round(v, 2) for v in os.getloadavg()],
                           "per_iteration_ms": {a: round(v * 1e3, 3) for a, v in per_iter.items()},
                           "profiled": outcome_info}
    if any(p is None for p in profiles.values()):
        out["error"] = "; ".join(f"{a}: {i['line']}" for a, i in outcome_info.items())
        return out
    base, changed, again = profiles["base"], profiles["changed"], profiles["base_again"]
    # the compact profiles themselves, beside the raw ones, so the attribution can be studied again offline
    (profile_dir / case / f"compact-{os.getpid()}.json").write_text(
        json.dumps({a: p.to_dict() for a, p in profiles.items()} | {"per_iteration_s": per_iter}))
    out["profile_bytes"] = max(len(json.dumps(p.to_dict())) for p in profiles.values())
    # the profiled pass of all arms (drains included) against the measured rounds of all arms
    out["profiled_vs_rounds"] = round(pass_s / measured_s, 2)
    out.update(_attributions(case, base, changed, again, per_iter))
    return out


def _events(outcome: Any) -> int | None:
    """Host events in the pass's windows (all sides), read again from its raw profile: the calibration's
    estimate of the stop's and the reading's cost per event is checked against it."""
    if outcome.run_dir is None:
        return None
    from pytest_tfperf.profiling.xspace import load_xspace, window_costs

    paths = sorted(Path(outcome.run_dir).glob("*.xplane.pb"))
    return sum(e for _, e, _ in window_costs(load_xspace(paths[-1], max_bytes=2**31)).values()) if paths else None


def _outcome_info(outcome: Any, iterations: int, *, interleaved: bool,
                  events: int | None = None) -> dict[str, Any]:
    plan = outcome.plan
    # the iterations per window the profile holds (the budget may have cut the ceiling the benchmark asked for)
    held = outcome.profile.iterations if outcome.profile is not None else iterations
    return {"line": outcome.line, "seconds": round(outcome.seconds, 2), "iterations": held,
            "iterations_ceiling": iterations,
            "seconds_windows": round(outcome.seconds_windows, 2), "seconds_stop": round(outcome.seconds_stop, 2),
            "seconds_calibration": round(outcome.seconds_calibration, 2), "windows_run": outcome.windows_run,
            "seconds_read": round(outcome.seconds_read, 2), "seconds_per_event": outcome.seconds_per_event,
            "events": events,
            "planned": None if plan is None else {
                "windows": plan.windows, "iterations": dict(plan.iterations), "fits": plan.fits,
                "seconds_windows": round(plan.seconds_windows, 2), "seconds_after": round(plan.seconds_after, 2)},
            "interleaved": interleaved}


def _attributions(case: str, base: Any, changed: Any, again: Any, per_iter: dict[str, float]) -> dict[str, Any]:
    """The planted change and the A/A change attributed, as the results record them."""
    from pytest_tfperf.profiling.attribution import attribute, explanation_lines

    planted = CASES[case][1]
    out: dict[str, Any] = {}
    for label, cur, measured in (("planted", changed, per_iter["changed"] - per_iter["base"]),
                                 ("aa", again, per_iter["base_again"] - per_iter["base"])):
        att = attribute(base, cur, measured)
        top = att.top
        out[label] = {
            "measured_ms": round(measured * 1e3, 3),
            "profiled_ms": round(att.profiled * 1e3, 3),
            "explained_ms": round(att.explained * 1e3, 3),
            "drift_ms": round(att.drift * 1e3, 3),
            "input_drift_ms": round(att.input_drift * 1e3, 3),
            "scale": round(att.scale, 4),
            "remainder_ms": round(att.remainder * 1e3, 3),
            "remainder_parts_ms": {"within_noise_groups": round(att.within_noise_delta * 1e3, 3),
                                   "outside_ops": round(att.outside * 1e3, 3),
                                   "moved_unlisted": round(att.unlisted_delta * 1e3, 3),
                                   "timed_vs_profiled": round(att.timed_vs_profiled * 1e3, 3)},
            "top": top.key if top else None,
            "causes": [{"key": c.key, "how": c.how, "delta_ms": round(c.delta * 1e3, 3),
                        "noise_ms": round(c.noise * 1e3, 3)} for c in att.causes],
            "nothing_moved": att.nothing_moved,
            # the parts add up to the profiled pass; that pass within 10% of the measured change (a check that can fail)
            "adds_up": att.adds_up,
            "profile_agrees_10pct": abs(att.profiled - measured) <= 0.1 * abs(measured) if measured else None,
            "lines": explanation_lines(att),
        }
        if label == "planted":
            out[label]["top_is_planted"] = bool(top and planted(top.key))
            ranked = ([att.paced_by] if att.paced_by else []) + list(att.causes) + list(att.pipeline)
            out[label]["planted_in_top3"] = any(planted(c.key) for c in ranked[:3])
    return out


def _from_raw(run: dict[str, Any], case_dir: Path) -> dict[str, Any]:
    """The compact profiles read again from the raw .xplane.pb files the run left (the reader as it is now)."""
    from pytest_tfperf.profiling.xspace import load_xspace, summarise, summarise_sides

    arms = ("base", "changed", "base_again")
    if run["profiled"]["base"].get("interleaved"):
        (path,) = sorted((case_dir / "all").glob("plugins/profile/*/*.xplane.pb"))
        sides = summarise_sides(load_xspace(path, max_bytes=2**30),
                                iterations={a: run["profiled"][a]["iterations"] for a in arms},
                                logdir=str(case_dir / "all"))
        return {a: sides[a].to_dict() for a in arms}
    out = {}
    for arm in arms:
        (path,) = sorted((case_dir / arm).glob("plugins/profile/*/*.xplane.pb"))
        space = load_xspace(path, max_bytes=2**30)
        out[arm] = summarise(space, name=f"{run['case']}:{arm}", iterations=run["profiled"][arm]["iterations"],
                             logdir=str(case_dir / arm)).to_dict()
    return out


def _cross_process(stored_by_case: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A/A across processes, as a stored baseline is compared: the same arm of two fresh processes."""
    from pytest_tfperf.profiling.attribution import attribute

    cross = []
    for case, entries in stored_by_case.items():
        for i, first in enumerate(entries):
            for second in entries[i + 1:]:
                for arm in ("base", "base_again"):
                    att = attribute(first["profiles"][arm], second["profiles"][arm],
                                    second["per"][arm] - first["per"][arm])
                    cross.append({"case": case, "arm": arm, "processes": [first["process"], second["process"]],
                                  "nothing_moved": att.nothing_moved, "scale": round(att.scale, 3),
                                  "causes": [c.key for c in att.causes]})
    return cross


def _stored_by_case(runs: list[dict[str, Any]], profile_dir: Path) -> dict[str, list[dict[str, Any]]]:
    from pytest_tfperf.profiling.profile_model import Profile

    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if "error" in run:
            continue
        stored = json.loads((profile_dir / f"p{run['process']}" / run["case"] / f"compact-{run['pid']}.json").read_text())
        out.setdefault(run["case"], []).append({
            "profiles": {a: Profile.from_dict(stored[a]) for a in ("base", "changed", "base_again")},
            "per": stored["per_iteration_s"], "process": run["process"]})
    return out


def reattribute(results: Path, profile_dir: Path, *, from_raw: bool = False) -> None:
    """Attribute the stored compact profiles again (the attribution is a pure function of them) and rewrite.

    With ``from_raw``, the compact profiles are first rebuilt from the raw profiles, so that a change to
    the reader (how events are grouped) is measured on the same recorded runs.
    """
    from pytest_tfperf.profiling.profile_model import Profile

    result = json.loads(results.read_text())
    stored_by_case: dict[str, list[dict[str, Any]]] = {}
    for run in result["runs"]:
        if "error" in run:
            continue
        path = profile_dir / f"p{run['process']}" / run["case"] / f"compact-{run['pid']}.json"
        stored = json.loads(path.read_text())
        if from_raw:
            stored.update(_from_raw(run, path.parent))
            run["profile_bytes"] = max(len(json.dumps(stored[a])) for a in ("base", "changed", "base_again"))
        profiles = {a: Profile.from_dict(stored[a]) for a in ("base", "changed", "base_again")}
        run.update(_attributions(run["case"], profiles["base"], profiles["changed"], profiles["base_again"],
                                 stored["per_iteration_s"]))
        stored_by_case.setdefault(run["case"], []).append({"profiles": profiles, "per": stored["per_iteration_s"],
                                                          "process": run["process"]})
    result["aa_cross_process"] = _cross_process(stored_by_case)
    result["summary"] = _summary(result["runs"], result["aa_cross_process"])
    result["reattributed"] = datetime.now(timezone.utc).isoformat(timespec="seconds") + (
        ", profiles read again from the raw .xplane.pb files" if from_raw else "")
    result["reattribute_command"] = (f"nice -n 15 .venv/bin/python benchmarks/explain_cases.py --reattribute "
                                     f"{profile_dir}" + (" --from-raw" if from_raw else ""))
    results.write_text(json.dumps(result, indent=1) + "\n")
    results.with_suffix(".md").write_text(_markdown(result))
    print(json.dumps(result["summary"], indent=1))


# ---------------------------------------------------------------- the driver: fresh processes, summary

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="run only this case (repeatable); results not written")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--update", action="store_true",
                        help="with --case: replace those cases' runs in the results and write them again")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--profile-dir", help=argparse.SUPPRESS)
    parser.add_argument("--keep-profiles", help="keep the raw profiles under this folder")
    parser.add_argument("--reattribute", metavar="PROFILE_DIR",
                        help="attribute the compact profiles a run kept under PROFILE_DIR again; rewrite the results")
    parser.add_argument("--from-raw", action="store_true",
                        help="with --reattribute: rebuild the compact profiles from the raw profiles first")
    args = parser.parse_args()
    if args.reattribute:
        reattribute(RESULTS / "explain_cases.json", Path(args.reattribute), from_raw=args.from_raw)
        return
    if args.worker:
        print(json.dumps(run_case(args.worker, Path(args.profile_dir))))
        return
    cases = args.case or list(CASES)
    base_dir = Path(args.keep_profiles) if args.keep_profiles else Path(tempfile.mkdtemp(prefix="tfperf-explain-"))
    started = time.time()
    load_start = [round(v, 2) for v in os.getloadavg()]
    runs = []
    for case in cases:
        for process in range(args.processes):
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--worker", case, "--profile-dir",
                                   str(base_dir / f"p{process}")], capture_output=True, text=True, timeout=900)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode or not lines:
                run = {"case": case, "error": f"worker exited {proc.returncode}: {proc.stderr.strip()[-600:]}"}
            else:
                run = json.loads(lines[-1])
            run["process"] = process
            run["wall_s"] = round(time.perf_counter() - t, 1)
            runs.append(run)
            _print_run(run)
    if args.case and not args.update:
        return
    if args.update:
        old = json.loads((RESULTS / "explain_cases.json").read_text())
        runs = [r for r in old["runs"] if r["case"] not in cases] + runs
        cases = list(old["cases"])
        started -= old["seconds"]
    cross = _cross_process(_stored_by_case(runs, base_dir))
    summary = _summary(runs, cross)
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": _command(),
              "machine": f"{os.cpu_count()} CPUs", "seconds": round(time.time() - started),
              "settings": {"rounds": ROUNDS, "round_seconds": ROUND_SECONDS, "windows": WINDOWS,
                           "window_seconds": WINDOW_SECONDS},
              "load_average_start": load_start, "load_average_end": [round(v, 2) for v in os.getloadavg()],
              "cases": {c: CASES[c][0] for c in cases}, "summary": summary, "runs": runs, "aa_cross_process": cross}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "explain_cases.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "explain_cases.md").write_text(_markdown(result))
    print(json.dumps(summary, indent=1))


def _command() -> str:
    return "nice -n 15 .venv/bin/python benchmarks/explain_cases.py " + " ".join(sys.argv[1:])


def _print_run(run: dict[str, Any]) -> None:
    if "error" in run:
        print(f"{run['case']} p{run['process']}: ERROR {run['error'][:300]}", flush=True)
        return
    p, a = run["planted"], run["aa"]
    print(f"{run['case']} p{run['process']}: top={p['top']} planted={p['top_is_planted']} "
          f"measured={p['measured_ms']:.2f}ms explained={p['explained_ms']:.2f} profiled={p['profiled_ms']:.2f} "
          f"| A/A measured={a['measured_ms']:.2f} causes={len(a['causes'])} | {run['wall_s']}s", flush=True)
    for line in p["lines"]:
        print("   ", line)
    if a["causes"]:
        for line in a["lines"]:
            print("    A/A", line)


def _summary(runs: list[dict[str, Any]], cross: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_case.setdefault(r["case"], []).append(r)
    per_case = {}
    for case, rs in by_case.items():
        good = [r for r in rs if "error" not in r]
        per_case[case] = {
            "processes": len(rs),
            "errors": len(rs) - len(good),
            "top_is_planted": sum(r["planted"]["top_is_planted"] for r in good),
            "profile_agrees_10pct": sum(bool(r["planted"]["profile_agrees_10pct"]) for r in good),
            "explained_share": [round(r["planted"]["explained_ms"] / r["planted"]["measured_ms"], 2)
                                if r["planted"]["measured_ms"] else None for r in good],
            "measured_ms": [r["planted"]["measured_ms"] for r in good],
            "aa_nothing_moved": sum(r["aa"]["nothing_moved"] for r in good),
        }
    all_three = sum(1 for c in per_case.values() if c["errors"] == 0 and c["top_is_planted"] == c["processes"])

    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    passes = [r["profiled_pass_s"] for r in ok]
    windows = [sum(i["seconds_windows"] for i in _passes(r)) for r in ok]
    stops = [sum(i["seconds_stop"] for i in _passes(r)) for r in ok]
    calibrations = [sum(i.get("seconds_calibration", 0.0) for i in _passes(r)) for r in ok]
    reads = [sum(i.get("seconds_read", 0.0) for i in _passes(r)) for r in ok]
    planted = [r["planted"] for r in ok]
    return {
        "cases": len(per_case),
        "cases_top_planted_in_every_process": all_three,
        "runs": len(runs),
        "runs_ok": len(ok),
        "runs_top_planted": sum(p["top_is_planted"] for p in planted),
        "runs_planted_in_top3": sum(p.get("planted_in_top3", False) for p in planted),
        "runs_adds_up": sum(p["adds_up"] for p in planted),
        "runs_profile_agrees_10pct": sum(bool(p["profile_agrees_10pct"]) for p in planted),
        "runs_remainder_smaller_than_change": sum(abs(p["remainder_ms"]) < abs(p["measured_ms"]) for p in planted),
        "median_abs_common_factor_minus_1": med([abs(p["scale"] - 1) for p in planted]),
        "aa_runs": len(ok),
        "aa_nothing_moved": sum(r["aa"]["nothing_moved"] for r in ok),
        "aa_cross_process_runs": len(cross),
        "aa_cross_process_nothing_moved": sum(c["nothing_moved"] for c in cross),
        "max_profile_bytes": max((r["profile_bytes"] for r in ok), default=None),
        "profiled_vs_rounds_median": med([r["profiled_vs_rounds"] for r in ok]),
        "profiled_vs_rounds_max": max((r["profiled_vs_rounds"] for r in ok), default=None),
        "runs_profiled_within_rounds": sum(r["profiled_vs_rounds"] <= 1.0 for r in ok),
        "profiled_pass_s_median": med(passes),
        "profiled_windows_s_median": med(windows),
        "profiler_stop_s_median": med(stops),
        "profiler_calibration_s_median": med(calibrations),
        "reading_s_median": med(reads),
        "warmup_and_reading_s_median": med([p - w - t - c for p, w, t, c in zip(passes, windows, stops, calibrations)]),
        "runs_windows_cut": sum(any(i.get("windows_run", WINDOWS) < WINDOWS for i in _passes(r)) for r in ok),
        "runs_iterations_cut": sum(any(i.get("planned") and i["planned"]["iterations"].get(a, 0)
                                       < i.get("iterations_ceiling", i["iterations"]) for a, i in r["profiled"].items())
                                   for r in ok),
        "runs_plan_over_budget": sum(any(i.get("planned") and not i["planned"]["fits"] for i in _passes(r))
                                     for r in ok),
        "measured_rounds_s_median": med([r["measured_rounds_s"] for r in ok]),
        "load_average_1min": [r["load_average"][0] for r in ok],
        "per_case": per_case,
    }


def _passes(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The profiler sessions of a run: one for alternating arms (each arm records it), else one per arm."""
    info = list(run["profiled"].values())
    return info[:1] if info and info[0].get("interleaved") else info


def _markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    loads = s.get("load_average_1min") or [0.0]
    out = [f"# Planted regressions explained ({result['date']}, {result['machine']})", "",
           f"Command: `{result['command']}` ({result['seconds']} s). Settings: {result['settings']}.", "",
           *([f"Attributed again ({result['reattributed']}): `"
              + result.get("reattribute_command", "nice -n 15 .venv/bin/python benchmarks/explain_cases.py "
                           "--reattribute /tmp/explain-profiles --from-raw") + "`", ""]
             if "reattributed" in result else []),
           f"- cases whose top cause is the planted group in every process: "
           f"**{s['cases_top_planted_in_every_process']} of {s['cases']}**",
           f"- runs with the planted group on top: {s['runs_top_planted']} of {s['runs_ok']} "
           f"({s['runs'] - s['runs_ok']} runs failed); among the first three named: "
           f"{s['runs_planted_in_top3']} of {s['runs_ok']}",
           f"- parts + common drift + remainder == measured change: {s['runs_adds_up']} of {s['runs_ok']} "
           "(by construction)",
           f"- the profiled pass's own change (its parts, before 'timed rounds vs profiled pass') within 10% of "
           f"the measured change: {s['runs_profile_agrees_10pct']} of {s['runs_ok']}; remainder smaller than "
           f"the change: {s['runs_remainder_smaller_than_change']} of {s['runs_ok']}; median |common factor - 1|: "
           f"{s['median_abs_common_factor_minus_1']}",
           f"- A/A in one process (two instances of the base, alternating windows): nothing moved beyond noise in "
           f"{s['aa_nothing_moved']} of {s['aa_runs']} runs",
           f"- A/A across fresh processes (same arm, two processes, as a stored baseline is compared): nothing "
           f"moved beyond noise in {s['aa_cross_process_nothing_moved']} of {s['aa_cross_process_runs']}",
           f"- largest stored profile: {s['max_profile_bytes']} bytes of JSON",
           f"- profiled pass (all arms) / measured rounds (all arms): median {s['profiled_vs_rounds_median']}, "
           f"max {s['profiled_vs_rounds_max']}; at most 1 in {s['runs_profiled_within_rounds']} of {s['runs_ok']}",
           f"- one run's profiled pass, median: {s['profiled_pass_s_median']} s (calibration "
           f"{s.get('profiler_calibration_s_median')} s, windows {s['profiled_windows_s_median']} s, profiler stop "
           f"{s['profiler_stop_s_median']} s, warm-up and reading {s['warmup_and_reading_s_median']} s, of which "
           f"reading {s.get('reading_s_median')} s); measured rounds {s['measured_rounds_s_median']} s",
           f"- the budget (the measured rounds' time) cut an arm's iterations per window in "
           f"{s.get('runs_iterations_cut')} runs and a window in {s.get('runs_windows_cut')}; its smallest pass "
           f"({MIN_WINDOWS} windows of one iteration) did not fit in {s.get('runs_plan_over_budget')}",
           f"- machine load (1-minute load average on 2 cores) at each run's end: min {min(loads)}, median "
           f"{statistics.median(loads)}, max {max(loads)}; at start/end of the whole run: "
           f"{result.get('load_average_start')} / {result.get('load_average_end')}", "",
           "| case | top = planted | measured change ms/iter | explained share | profile within 10% | A/A quiet |",
           "|---|---|---|---|---|---|"]
    for case, c in s["per_case"].items():
        out.append(f"| {case} | {c['top_is_planted']}/{c['processes']} | {c['measured_ms']} | "
                   f"{c['explained_share']} | {c['profile_agrees_10pct']}/{c['processes']} | "
                   f"{c['aa_nothing_moved']}/{c['processes'] - c['errors']} |")
    out += ["", "## Cases", ""] + [f"- `{k}`: {v}" for k, v in result["cases"].items()]
    out += ["", "## First process's explanation per case", ""]
    seen = set()
    for r in result["runs"]:
        if r["case"] in seen or "error" in r:
            continue
        seen.add(r["case"])
        out += [f"### {r['case']}", "", "```", *r["planted"]["lines"], "```", ""]
    errors = [r for r in result["runs"] if "error" in r]
    if errors:
        out += ["## Failed runs", ""] + [f"- {r['case']} p{r['process']}: {r['error'][:300]}" for r in errors]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
