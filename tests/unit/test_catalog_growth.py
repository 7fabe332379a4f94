from __future__ import annotations

import random

import pytest

from pytest_tfperf.catalog.growth import GrowthLedger, pooled_slope


def test_slope_of_a_straight_line_is_its_step() -> None:
    assert pooled_slope([[10.0 + 3.0 * i for i in range(20)]]) == pytest.approx(3.0)


def test_flat_memory_has_no_slope() -> None:
    assert pooled_slope([[5.0] * 10, [7.0] * 4]) == 0.0


def test_jumps_between_segments_do_not_count() -> None:
    # Each segment is flat, but the level rises between them, as it does for a
    # fix variant while the anti-pattern variant piles up memory between its rounds.
    segments = [[100.0] * 5, [900.0] * 5, [2000.0] * 5]
    assert pooled_slope(segments) == 0.0


def test_segments_with_their_own_intercepts_pool_to_the_common_slope() -> None:
    rng = random.Random(7)
    segments = [[base + 1024.0 * i + rng.uniform(-8, 8) for i in range(40)] for base in (0.0, 5e6, 9e6)]
    assert pooled_slope(segments) == pytest.approx(1024.0, rel=0.01)


def test_no_slope_without_two_points_in_a_segment() -> None:
    assert pooled_slope([]) is None
    assert pooled_slope([[1.0], [2.0]]) is None


def test_ledger_starts_a_new_segment_when_another_variant_ran_in_between() -> None:
    memory = {"value": 0}
    ledger = GrowthLedger(lambda: memory["value"])

    def leak() -> None:
        memory["value"] += 100

    def steady() -> None:
        return None

    anti = ledger.wrap("anti", leak)
    fix = ledger.wrap("fix", steady)
    for _ in range(3):  # warm-up segment of each
        anti()
    fix()
    for _ in range(2):  # two interleaved rounds
        for _ in range(4):
            anti()
        for _ in range(4):
            fix()
    assert [len(s) for s in ledger.segments("anti")] == [3, 4, 4]
    assert [len(s) for s in ledger.segments("fix")] == [1, 4, 4]
    assert ledger.slope_bytes_per_iteration("anti") == pytest.approx(100.0)
    assert ledger.slope_bytes_per_iteration("fix") == 0.0


def test_ledger_has_no_slope_after_a_single_call() -> None:
    ledger = GrowthLedger(lambda: 0)
    ledger.wrap("fix", lambda: None)()
    assert ledger.slope_bytes_per_iteration("fix") is None
