"""The catalog's effects that need no clock, checked with a few direct calls.

A run without ``--tfperf`` calls each workload once: too little for a growth
slope, a steady-state trace count or a loss that takes a few steps to diverge.
These metrics are deterministic (allocator bytes, trace counts, NaNs), so a
dozen calls per variant, in two interleaved segments, settle them without any
timing; CI runs them at small sizes in seconds. Throughput is left to
``--tfperf``.
"""

from __future__ import annotations

from pytest_tfperf.catalog.effects import (
    Effect,
    device_memory_effect,
    growth_effect,
    non_finite_effect,
    peak_effect,
    throughput_effect,
    traces_effect,
)
from pytest_tfperf.catalog.scenario import Metric, Scenario
from pytest_tfperf.measuring.trace_count import TraceCounter

SEGMENTS = 2


def quick_effects(scenario: Scenario, calls_per_segment: int = 6, memory_device: str = "CPU:0") -> list[Effect]:
    """Run every variant once (warm-up), then ``SEGMENTS`` interleaved segments of calls; judge what needs no clock."""
    import tensorflow as tf

    # Counted as the plugin counts them: the functions the variants reach
    # (Keras models' compiled step functions included, and new ones a
    # recompile creates), plus those the scenario names.
    counter = TraceCounter(lambda: [*(v.run for v in scenario.variants), *scenario.functions])

    def traces() -> int:
        counter.refresh()
        return counter.total()

    peaks: dict[str, list[int]] = {v.name: [] for v in scenario.variants}
    steady_traces = {v.name: 0 for v in scenario.variants}
    calls = {v.name: 0 for v in scenario.variants}
    for v in scenario.variants:
        v.run()
        calls[v.name] += 1
    for segment in range(SEGMENTS):
        order = scenario.variants if segment % 2 == 0 else tuple(reversed(scenario.variants))
        for v in order:
            tf.config.experimental.reset_memory_stats(memory_device)
            base = int(tf.config.experimental.get_memory_info(memory_device)["current"])
            before = traces()
            for _ in range(calls_per_segment):
                v.run()
                # Found after every call: the counter holds functions weakly, and a function that a
                # recompile creates and the next one drops would otherwise die unseen with its trace.
                counter.refresh()
            calls[v.name] += calls_per_segment
            steady_traces[v.name] += traces() - before
            peaks[v.name].append(int(tf.config.experimental.get_memory_info(memory_device)["peak"]) - base)
    observed = {v.name: (v.observe() if v.observe is not None else None) for v in scenario.variants}
    steady_calls = SEGMENTS * calls_per_segment
    out = []
    for c in scenario.comparisons:
        if scenario.metric is Metric.TF_PEAK:
            out.append(peak_effect(scenario.key, c, peaks[c.anti], peaks[c.fix], memory_device))
        elif scenario.metric is Metric.GROWTH:
            out.append(growth_effect(scenario.key, c, observed[c.anti], observed[c.fix]))
        elif scenario.metric is Metric.TRACES:
            out.append(traces_effect(scenario.key, c, steady_traces[c.anti], steady_calls, steady_traces[c.fix],
                                     steady_calls))
        elif scenario.metric is Metric.FIRST_NON_FINITE:
            out.append(non_finite_effect(scenario.key, c, observed[c.anti], observed[c.fix], calls[c.anti],
                                         calls[c.fix]))
        elif scenario.metric is Metric.DEVICE_RESERVED:
            out.append(device_memory_effect(scenario.key, c, observed[c.anti], observed[c.fix]))
        else:  # throughput needs the harness's timed rounds
            out.append(throughput_effect(scenario.key, c, [], []))
    return out
