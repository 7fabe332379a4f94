"""Allocations by op: TensorFlow's MemoryAllocation/MemoryDeallocation events replayed into each window's added
peak and its split over the ops that allocated, and a measured change of the peak attributed. Synthetic XSpace
protos (built with TensorFlow's xplane_pb2, as test_profiling_xspace.py does; TensorFlow is not imported)."""

from __future__ import annotations

import pytest

from pytest_tfperf.profiling.memory_profile import (
    FREED_FROM_BEFORE,
    MemoryGroup,
    MemoryFormatError,
    MemoryProfile,
    attribute_memory,
    memory_from_dict,
    memory_to_dict,
    memory_dict,
    memory_lines,
    read_memory,
)
from pytest_tfperf.profiling.xspace import ProfileUnavailable
from tests.unit.test_profiling_xspace import Space

KIB, MIB = 1024, 2**20
BFC = "bfc_cpu_allocator_for_gpu"


def alloc(s: Space, line: str, at: float, size: int, addr: int, op: str, allocator: str = BFC) -> None:
    s.event(line, "MemoryAllocation", at, 0, allocator_name=allocator, allocation_bytes=size, addr=addr,
            tf_op=op, region_type="output")


def free(s: Space, line: str, at: float, size: int, addr: int, allocator: str = BFC) -> None:
    s.event(line, "MemoryDeallocation", at, 0, allocator_name=allocator, allocation_bytes=size, addr=addr)


def step_space(wide: int = 1 * MIB, windows: int = 3) -> Space:
    """Per window: a Dense layer's output (inside its op event, which names the type), a wide layer's output,
    a temporary of an op outside layers; the first two live at the peak, the temporary freed before it.
    A weight allocated before the windows is freed in each window (an optimizer's swap, say)."""
    s = Space()
    s.windows(windows, 1000)
    alloc(s, "python", -50, 64 * KIB, 999, "sgd/ReadVariableOp")  # before the first window
    for w in range(windows):
        t = w * 1000.0
        free(s, "tf_Compute/1", t + 5, 64 * KIB, 999 if w == 0 else 104 + (w - 1) * 10)
        alloc(s, "tf_Compute/1", t + 8, 64 * KIB, 104 + w * 10, "sgd/ReadVariableOp")
        s.event("tf_Compute/1", "functional_1/dense_1/MatMul:_MklMatMul", t + 10, 20)
        alloc(s, "tf_Compute/1", t + 15, 256 * KIB, 100 + w * 10, "functional_1/dense_1/MatMul")
        alloc(s, "tf_Compute/2", t + 40, 8 * KIB, 101 + w * 10, "pow_1")
        free(s, "tf_Compute/2", t + 45, 8 * KIB, 101 + w * 10)
        alloc(s, "tf_Compute/1", t + 50, wide, 102 + w * 10, "functional_1/wide_2/Relu")
        alloc(s, "python", t + 60, 4 * KIB, 103 + w * 10, "Add", allocator="cpu")  # another allocator: ignored
        free(s, "tf_Compute/1", t + 900, 256 * KIB, 100 + w * 10)
        free(s, "tf_Compute/1", t + 910, wide, 102 + w * 10)
    return s


def test_each_windows_added_peak_is_split_over_the_ops_live_at_it() -> None:
    profile = read_memory(step_space().parsed(), logdir="/p")
    assert profile.allocator == BFC and profile.logdir == "/p"
    # The peak: dense 256 KiB + wide 1 MiB live, the weight swapped (64 KiB freed from before, 64 KiB new).
    assert profile.peaks == (256 * KIB + MIB,) * 3
    by_key = {g.key: g for g in profile.groups}
    assert by_key["layer:functional/wide"].per_window == (MIB,) * 3
    assert by_key["layer:functional/dense"].per_window == (256 * KIB,) * 3
    assert by_key["layer:functional/dense"].label == "dense (MatMul family)"  # the op event around it names the type
    assert by_key["layer:sgd"].per_window == (64 * KIB,) * 3
    assert by_key[FREED_FROM_BEFORE].per_window == (-64 * KIB,) * 3
    assert "op:pow" not in by_key  # freed before the peak
    for w in range(3):
        assert sum(g.per_window[w] for g in profile.groups) == profile.peaks[w]  # the parts add up
    assert profile.allocations == 3 * 4 + 1 - 1  # the one before the windows is not in them


def test_a_widened_layer_is_the_cause_and_the_parts_add_up_to_the_measured_change() -> None:
    base = read_memory(step_space(wide=1 * MIB).parsed(), logdir="/base")
    current = read_memory(step_space(wide=5 * MIB).parsed(), logdir="/current")
    att = attribute_memory(base, current, measured=4.2 * MIB)
    assert [(c.label, c.how) for c in att.causes] == [("wide", "grew")]
    assert att.causes[0].delta == 4 * MIB
    assert att.remainder == pytest.approx(0.2 * MIB)
    assert sum(c.delta for c in att.causes) + att.remainder == pytest.approx(att.measured)
    assert att.profiled == 4 * MIB
    lines = memory_lines(att)
    assert lines[0] == ("where the memory went: +4.20 MiB added peak measured (profiled windows +4.00 MiB, "
                        f"allocator {BFC})")
    assert lines[1].startswith("  wide grew +4.00 MiB at the peak ±")
    data = memory_dict(att)
    assert data["causes"][0]["delta_bytes"] == 4 * MIB and data["lines"] == lines  # type: ignore[index]
    assert data["base_logdir"] == "/base" and data["current_logdir"] == "/current"


def test_unchanged_code_moves_nothing_beyond_noise_and_spread_widens_the_noise() -> None:
    base = read_memory(step_space().parsed())
    att = attribute_memory(base, read_memory(step_space().parsed()), measured=0.0)
    assert att.causes == () and att.remainder == 0.0 and att.within_noise == len(base.groups)
    assert "no op's bytes at the peak moved beyond their noise" in memory_lines(att)[1]
    jumpy = MemoryProfile(BFC, (1.0, 1.0, 1.0), (MemoryGroup("layer:x", "x", (0.0, 4 * MIB, 0.0)),), 3)
    steady = MemoryProfile(BFC, (1.0, 1.0, 1.0), (MemoryGroup("layer:x", "x", (0.0, 0.0, 0.0)),), 3)
    assert attribute_memory(steady, jumpy, measured=MIB).causes == ()  # one window's jump is within its spread


def test_a_layer_that_appeared_or_vanished_is_named_so() -> None:
    a = MemoryProfile(BFC, (MIB,) * 3, (MemoryGroup("layer:m/old", "old", (MIB,) * 3),), 3)
    b = MemoryProfile(BFC, (2 * MIB,) * 3, (MemoryGroup("layer:m/new", "new", (2 * MIB,) * 3),), 3)
    att = attribute_memory(a, b, measured=MIB)
    assert [(c.label, c.how, c.delta) for c in att.causes] == [("new", "appeared", 2 * MIB),
                                                               ("old", "vanished", -MIB)]
    with pytest.raises(ValueError, match="finite"):
        attribute_memory(a, b, measured=float("nan"))


def test_a_profile_without_allocation_events_says_so_in_one_line() -> None:
    s = Space()
    s.windows(2, 1000)
    s.event("tf_Compute/1", "functional_1/dense_1/MatMul:_MklMatMul", 10, 20)
    with pytest.raises(ProfileUnavailable, match="no MemoryAllocation events .* TF_CPU_ALLOCATOR_USE_BFC=true"):
        read_memory(s.parsed())
    empty = Space()
    empty.event("python", "x", 0, 1)
    with pytest.raises(ProfileUnavailable, match="window"):
        read_memory(empty.parsed())


def test_the_stored_form_is_compact_keeps_the_parts_adding_up_and_refuses_what_it_cannot_read() -> None:
    profile = read_memory(step_space().parsed())
    data = memory_to_dict(profile, top=2)
    assert [g["key"] for g in data["groups"]] == [g.key for g in profile.groups[:2]] + ["other"]
    again = memory_from_dict(data, logdir="/stored")
    assert again.logdir == "/stored" and again.peaks == profile.peaks
    for w in range(3):
        assert sum(g.per_window[w] for g in again.groups) == again.peaks[w]
    assert len(__import__("json").dumps(memory_to_dict(profile))) < 2000
    with pytest.raises(MemoryFormatError, match="version 2 is not 1"):
        memory_from_dict({**data, "version": 2})
    with pytest.raises(MemoryFormatError, match="malformed: KeyError"):
        memory_from_dict({"version": 1})
    with pytest.raises(MemoryFormatError, match="window counts differ"):
        memory_from_dict({**data, "peaks": [1.0]})


def test_a_pair_profiled_in_one_session_is_read_side_by_side() -> None:
    """explain_pair profiles both sides in one session, windows alternating: each side's allocations are read
    from its own windows (the marker's side stat), not from every window."""
    s = Space()
    for w, side in enumerate(["reference", "variant", "variant", "reference"]):
        t = w * 1000.0
        s.event("python", "tfperf_window", t, 1000, step_num=w // 2, _r=1, side=side)
        size = 4 * MIB if side == "variant" else 1 * MIB
        alloc(s, "tf_Compute/1", t + 10, size, 200 + w, "functional_1/planted/Tile")
        free(s, "tf_Compute/1", t + 900, size, 200 + w)
    reference = read_memory(s.parsed(), side="reference")
    variant = read_memory(s.parsed(), side="variant")
    assert [p / MIB for p in reference.peaks] == [1.0, 1.0]
    assert [p / MIB for p in variant.peaks] == [4.0, 4.0]
    with pytest.raises(ProfileUnavailable, match="of side 'other'"):
        read_memory(s.parsed(), side="other")
