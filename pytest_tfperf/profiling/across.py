"""Across pairs of processes: under ``--tfperf-against`` each host group is tested on the pairs where it was traced.

The first pair's profiles are read by ``attribution``; the other pairs (``replicates``) lend each group the spread
between processes that one pair cannot see: two processes run an op, a tf.data stage or the consumer's wait each
their own way for as long as they live (autotune's choices, thread placement). Here a group's test is replaced by
the test across the pairs (``noise.replicate_tests``), and the change it prints by what the pairs moved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from pytest_tfperf import stats
from pytest_tfperf.profiling import noise
from pytest_tfperf.profiling.noise import Test
from pytest_tfperf.profiling.parts import CPU_KINDS
from pytest_tfperf.profiling.profile_model import Profile

# Tested across pairs of processes, in families that share a prior for their spread: the host's op groups (one
# executor runs them), and tf.data's stages and functions with the consumer's wait (they spread otherwise). A group
# is tested across the pairs where it was traced on both sides, at least this many (one degree of freedom of its
# own beside the prior's); one found in the first pair alone is left out of the family (not tested).
ACROSS_FAMILIES = (noise.HOST_OP_KINDS, ("stage", "tf.data work", "input wait"))
MIN_ACROSS_PAIRS = 3


def pair_prepared(base: Profile, current: Profile) -> tuple[Profile, Profile]:
    """A replicate pair taken as ``attribute`` takes its own: within the CPU clock, each window's load steadied."""
    base, current = noise.within_cpu(base, CPU_KINDS), noise.within_cpu(current, CPU_KINDS)
    if noise.STEADY_WINDOWS:
        base, current = noise.steadied(base, current)
    return base, current


def _pair_logs(base: Profile, current: Profile, kinds: Sequence[str]) -> dict[str, float]:
    """Each host group of ``kinds``, fully traced on both sides of one pair of processes: its log-ratio current over
    baseline. No common factor is taken out: the pair's two processes start together and are profiled one after
    the other, so which of them runs the faster is a draw, and across the pairs each process's load is part of
    every group's spread; a pair's factor, the median over its groups, moves with a cost spread over most of
    them and took that cost as load (the planted layers first in 7 of 12 spread red verdicts with it taken out,
    11 of 12 without, on the same profiles; ``benchmarks/explain_kept_offline.py``). A group of short ops traced in
    part on a side (``noise.traced_in_part``) says nothing of its change in that pair, so the pair is left out of
    its test rather than read as a move."""
    return {g.key: math.log(o.mean / g.mean) for g in base.groups
            if g.kind in kinds and not g.on_device and (o := current.group(g.key)) is not None and g.mean > 0.0
            and o.mean > 0.0
            and not noise.traced_in_part(g, o)}


def across_pairs(pending: list[tuple[Test, dict[str, object]]], pairs: Sequence[tuple[Profile, Profile]]
                  ) -> list[tuple[Test, dict[str, object]]]:
    """The host's groups tested across the pairs of processes (``noise.replicate_tests``), each family
    (``ACROSS_FAMILIES``) with its own prior for the spread: a group traced in full on both sides of at least
    ``MIN_ACROSS_PAIRS`` pairs is tested across those pairs on its log-ratios, and its change given as what
    those pairs moved in seconds, on average. Two processes run a group, a tf.data stage and the consumer's wait each their own way for as
    long as they live (autotune's choices, thread placement); one pair cannot tell that from a change, and
    tested within one pair the default-option pipeline's stages, its input wait and a short op traced in some
    processes only were blamed in 16 of 200 A/A draws (five pairs, ``benchmarks/explain_pairs_offline.py``).

    An op missing from a side of the first pair, or traced there in part, but found on that side in another
    pair, exists in both versions: the tracer left it out of one process (TensorFlow traces short ops only
    while its cost model deems them expensive; a 15 us ``RealDiv`` in a tf.data map appeared or vanished in 8
    of 40 A/A draws of a pipeline). Such an op is tested across the pairs where it was traced, or not at all
    where those are too few, never read as "appeared". A stage is traced whenever it runs, so one on a side
    only is a pipeline of another shape; it, and a group found on one side of every pair, keep their one-pair
    test (appeared, vanished). The change printed and ranked is the one tested (``Test.across``)."""
    out = list(pending)
    for kinds in ACROSS_FAMILIES:
        per_pair = [_pair_logs(b, c, kinds) for b, c in pairs]
        keys = set().union(*per_pair)
        found = {k: [p[k] for p in per_pair if k in p] for k in keys}
        moved = {k: [_seconds(k, b, c) for (b, c), p in zip(pairs, per_pair) if k in p] for k in keys}
        logs = {k: v for k, v in found.items() if len(v) >= MIN_ACROSS_PAIRS}
        levels = {k: _level(k, pairs) for k in logs}
        tests = noise.replicate_tests(dict(sorted(logs.items())), levels)
        for i, (test, info) in enumerate(out):
            key = str(info["key"])
            if info["kind"] not in kinds or (test.sides == 2 and not test.hidden and key not in found):
                continue
            if test.sides != 2 and info["kind"] not in noise.OP_KINDS:
                continue  # a stage on one side only: a pipeline of another shape (above)
            across = tests.get(key)
            if across is None:
                if key in found or _on_both_sides(key, pairs):
                    # in both versions, but traced in too few pairs to read its spread between processes:
                    # within one pair a short op a process happens to trace slower reads as a change
                    out[i] = (replace(test, tested=False), info)
                continue
            # The test is the log-ratios'; the change printed and ranked is what the pairs moved in seconds, on
            # average, and its standard error is scaled alike, so that ``shrunk`` over ``se`` stays the log-scale
            # test. A wait or a stage can move by a factor of ten from a near-empty start: the log-ratios' mean
            # at the first pair's level read a consumer's wait +25.3 ms where the step moved +3.4 ms (and ranked
            # the stage that waited on a slower source before the source).
            m, seconds = across.delta, stats.mean(moved[key])
            if seconds * m <= 0.0:  # the pairs' seconds and their log-ratios disagree in sign: first order
                seconds = levels[key] * m
            per_log = seconds / m if m else 0.0
            out[i] = (replace(test, shrunk=per_log * across.shrunk, se=abs(per_log) * across.se, df=across.df,
                              across=seconds, pairs=len(logs[key]), sides=2, hidden=0.0),
                      {**info, "how": "grew" if m >= 0 else "shrank", "below_cutoff": False})
    return out


def _seconds(key: str, base: Profile, current: Profile) -> float:
    """A group's change in one pair of processes, seconds per iteration (a side without it counts as none)."""
    b, c = base.group(key), current.group(key)
    return (c.mean if c is not None else 0.0) - (b.mean if b is not None else 0.0)


def _level(key: str, pairs: Sequence[tuple[Profile, Profile]]) -> float:
    """A group's baseline time per iteration: the first pair's where it was traced there, else the first pair's
    that traced it (its size for the prior's trend, and the level of the first-order change where the pairs'
    seconds and log-ratios disagree in sign)."""
    for b, _ in pairs:
        g = b.group(key)
        if g is not None and g.mean > 0.0:
            return g.mean
    return 0.0


def _on_both_sides(key: str, pairs: Sequence[tuple[Profile, Profile]]) -> bool:
    """Found in some baseline process and in some current one (not necessarily of one pair)."""
    return any(b.group(key) is not None for b, _ in pairs) and any(c.group(key) is not None for _, c in pairs)
