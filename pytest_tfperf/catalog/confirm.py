"""A throughput margin missed once is measured again, directly: a miss must repeat to fail.

The catalog's throughput margins gate the main job. On the 2-core reference VM
a slow spell can fall on the fix's rounds alone: once in six fresh main jobs
(a morning when whole jobs ran twice as long), ``input_pipeline`` read 1.08x
against its 1.1x floor, where the effect is 1.49-1.68x on the quiet machine.
Widening the floor would blunt the gate for every run; a second measurement
only when the first missed costs a few seconds on that run alone, and a fix
that really stopped beating its anti-pattern misses both.

The second measurement is plain: the two variants' own calls, in ABBA rounds
of about ``round_s`` each, timed with one clock read per call, judged by the
same best-round ratio (``effects.throughput_effect``). The effect then reports
both readings, and the verdict is the second's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

from pytest_tfperf.catalog.effects import Effect, throughput_effect
from pytest_tfperf.catalog.scenario import Metric, Scenario

CONFIRM_ROUNDS = 6  # per variant; even, so that ABBA order gives each side the first slot equally often
CONFIRM_ROUND_S = 0.5


def interleaved_rounds(runs: Mapping[str, Callable[[], object]], *, items: float, rounds: int = CONFIRM_ROUNDS,
                       round_s: float = CONFIRM_ROUND_S,
                       clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Items per second of each variant in ``rounds`` rounds, the variants' order reversed every round (ABBA)."""
    if rounds < 2 or round_s <= 0 or items <= 0:
        raise ValueError(f"interleaved_rounds needs rounds >= 2, round_s > 0 and items > 0, "
                         f"got {rounds}, {round_s}, {items}")
    names = list(runs)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            run, calls, start = runs[name], 0, clock()
            while True:
                run()
                calls += 1
                elapsed = clock() - start
                if elapsed >= round_s:
                    break
            out[name].append(items * calls / elapsed)
    return out


def _reread(first: Effect, second: Effect, rounds: int) -> Effect:
    detail = (f"{second.detail} That is a second, direct measurement ({rounds} interleaved rounds a side), taken "
              f"because the harness's rounds read {first.headline()}, short of the margin ({first.detail.strip()})")
    return dataclasses.replace(second, detail=detail)


def confirm_throughput_misses(scenario: Scenario, effects: Sequence[Effect], *, rounds: int = CONFIRM_ROUNDS,
                              round_s: float = CONFIRM_ROUND_S,
                              clock: Callable[[], float] = time.perf_counter) -> list[Effect]:
    """``effects`` with every gated, measured throughput miss replaced by a second measurement's verdict.

    Call it before ``scenario.close()``: the variants must still run. Effects
    that passed, are not gated or were not measured are returned as they are,
    and nothing is run for them.
    """
    comparisons = {(c.anti, c.fix): c for c in scenario.comparisons}
    out = []
    for e in effects:
        if e.metric is not Metric.THROUGHPUT or not e.gated or not e.measured or e.passed:
            out.append(e)
            continue
        runs = {name: scenario.variant(name).run for name in (e.anti, e.fix)}
        rates = interleaved_rounds(runs, items=scenario.items_per_iteration, rounds=rounds, round_s=round_s,
                                   clock=clock)
        second = throughput_effect(e.scenario, comparisons[(e.anti, e.fix)], rates[e.anti], rates[e.fix])
        out.append(_reread(e, second, rounds))
    return out
