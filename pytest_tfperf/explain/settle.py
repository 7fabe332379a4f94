"""A profiled pass starts where the timed rounds were: a pipeline's buffers drained first.

Pure of TensorFlow: a pull is a callable, the clock a function (the tests' is fake).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from pytest_tfperf.measuring.workload import DatasetPuller, Workload

# A pipeline works ahead on its own threads while its process waits (the partner's pass, the verdict, the
# other side's pass, the pass's own calibration and the profiler's start): its buffers fill, and windows that
# start on them read elements made before they began (seen under --tfperf-against: a Python filter measured
# 14x slower read as unchanged in the pass). So a pass over a dataset first pulls, unprofiled, until the pulls
# take what the measured rounds' iterations took: SETTLE_CALLS in a row averaging at least SETTLE_SHARE of the
# rounds' median (an element waiting in a buffer comes back in microseconds, one made while the consumer waits
# takes the rounds' time). It runs inside the pass, right before its first window (``profiling.capture``'s
# ``before_windows``): settled before the pass instead, the buffers filled again during its calibration (a CSV
# decode 36x slower read +0.1 ms against +2.9 ms measured). At most SETTLE_MAX_S, and at most a quarter of the
# pass's budget; the rest of the pass keeps the other three quarters.
SETTLE_CALLS = 5
SETTLE_SHARE = 0.5
SETTLE_MAX_S = 5.0
# A step that is not a dataset's pull may still hold a pipeline (``next(it)`` in its body): two processes of one
# version, profiled one after the other beside another version, read its tf.data stage 2.4 us in the process that
# waited with its buffers filling against 282 us in the one that did not (A/A, five pairs). It is settled too, with
# SETTLE_RESERVE_CALLS of its iterations set aside from the pass's budget rather than a quarter of it: a step with
# no pipeline settles in SETTLE_CALLS calls, and one that drains a buffer seldom needs more than twice that long.
SETTLE_RESERVE_CALLS = 2 * SETTLE_CALLS


def reserve_s(median_s: float, cap: float) -> float:
    """Seconds of a pass's budget set aside to settle a step that does not pull from a dataset itself."""
    return min(cap, SETTLE_RESERVE_CALLS * median_s) if math.isfinite(median_s) and median_s > 0.0 else 0.0


def pulls_from_dataset(workload: Workload) -> bool:
    """Whether an iteration pulls from a dataset (``tfperf.iterate``), whose pipeline can work ahead."""
    return workload.pull is not None or isinstance(workload.call, DatasetPuller)


# The settling's clock, looked up at each call: the tests replace it with a fake one.
_clock: Callable[[], float] = time.perf_counter


def settle(call: Callable[[], object], median_s: float, max_s: float = SETTLE_MAX_S) -> tuple[int, float]:
    """Call ``call`` until ``SETTLE_CALLS`` calls in a row average at least ``SETTLE_SHARE`` of ``median_s`` (the
    pipeline's buffers drained: it now makes what it hands over), or for ``max_s``; (calls made, seconds)."""
    if not math.isfinite(median_s) or median_s <= 0.0 or max_s <= 0.0:
        return 0, 0.0
    clock = _clock
    started = clock()
    recent: deque[float] = deque(maxlen=SETTLE_CALLS)
    calls = 0
    while True:
        before = clock()
        call()
        after = clock()
        calls += 1
        recent.append(after - before)
        if len(recent) == SETTLE_CALLS and sum(recent) / SETTLE_CALLS >= SETTLE_SHARE * median_s:
            break
        if after - started >= max_s:
            break
    return calls, clock() - started
