from __future__ import annotations

import math

import pytest

from pytest_tfperf.catalog.batch_budget import (
    BatchSearch,
    MemoryBudgetExceeded,
    PeakModel,
    fit_peak_model,
    largest_batch_within_budget,
)

MIB = 2**20


def linear_peak(fixed: int, per_sample: int):
    calls: list[int] = []

    def peak(batch: int) -> int:
        calls.append(batch)
        return fixed + per_sample * batch

    return peak, calls


@pytest.mark.parametrize("budget_mib", [8, 9, 20, 100, 1000, 4096])
def test_finds_the_largest_batch_within_the_budget(budget_mib: int) -> None:
    fixed, per_sample = 7 * MIB, 13 * 1024  # the Dense model measured on CPU: 7.4 MiB + 12.95 KiB/sample
    peak, _ = linear_peak(fixed, per_sample)
    found = largest_batch_within_budget(peak, budget_mib * MIB)
    expected = (budget_mib * MIB - fixed) // per_sample
    assert found.largest_fitting == expected
    assert peak(expected) <= budget_mib * MIB < peak(expected + 1)


def test_search_costs_about_two_log2_steps() -> None:
    peak, calls = linear_peak(0, 1)
    found = largest_batch_within_budget(peak, 100_000)
    assert found.largest_fitting == 100_000
    assert len(calls) <= 2 * math.ceil(math.log2(100_000)) + 1


def test_a_real_out_of_memory_counts_as_not_fitting() -> None:
    def peak(batch: int) -> int:
        if batch > 300:
            raise MemoryBudgetExceeded(batch_size=batch, peak_bytes=None, budget_bytes=10**9, device="GPU:0",
                                       cause="OOM when allocating tensor")
        return batch

    found = largest_batch_within_budget(peak, 10**9)
    assert found.largest_fitting == 300
    assert found.peak_of(512) is None
    assert found.peak_of(256) == 256


def test_nothing_fits_when_the_smallest_batch_is_over_budget() -> None:
    found = largest_batch_within_budget(lambda b: 10 * MIB + b, 1 * MIB)
    assert found == BatchSearch(largest_fitting=None, budget_bytes=MIB, probes=((1, 10 * MIB + 1),))


def test_stops_at_the_limit_when_everything_fits() -> None:
    found = largest_batch_within_budget(lambda b: b, 10**12, start=4, limit=1000)
    assert found.largest_fitting == 1000
    assert max(b for b, _ in found.probes) == 1000


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"budget_bytes": 0}, "budget_bytes must be positive"),
    ({"budget_bytes": 10, "start": 0}, "1 <= start <= limit"),
    ({"budget_bytes": 10, "start": 8, "limit": 4}, "1 <= start <= limit"),
])
def test_bad_search_arguments_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        largest_batch_within_budget(lambda b: b, **kwargs)


def test_budget_message_names_batch_peak_budget_and_device() -> None:
    err = MemoryBudgetExceeded(batch_size=8192, peak_bytes=120 * MIB, budget_bytes=64 * MIB, device="CPU:0")
    text = str(err)
    assert "batch size 8192" in text
    assert "120.0 MiB" in text
    assert "64.0 MiB" in text
    assert "CPU:0" in text
    assert "accumulate gradients" in text


def test_out_of_memory_message_keeps_the_cause() -> None:
    err = MemoryBudgetExceeded(batch_size=64, peak_bytes=None, budget_bytes=MIB, device="GPU:0",
                               cause="OOM when allocating tensor with shape[64,1024]")
    assert "ran out of memory on GPU:0" in str(err)
    assert "shape[64,1024]" in str(err)


def test_fit_recovers_fixed_and_per_sample_cost() -> None:
    batches = [32, 256, 2048, 16384]
    model = fit_peak_model(batches, [7 * MIB + 13_000 * b for b in batches])
    assert model.fixed_bytes == pytest.approx(7 * MIB)
    assert model.bytes_per_sample == pytest.approx(13_000)
    assert model.r_squared == pytest.approx(1.0)
    assert model.largest_batch(64 * MIB) == (64 * MIB - 7 * MIB) // 13_000


def test_fit_needs_two_batch_sizes() -> None:
    with pytest.raises(ValueError, match="two different batch sizes"):
        fit_peak_model([8, 8], [1, 2])


def test_a_flat_line_predicts_no_limit() -> None:
    with pytest.raises(ValueError, match="does not grow"):
        PeakModel(fixed_bytes=1.0, bytes_per_sample=0.0, r_squared=1.0).largest_batch(10)


class _FakeExperimental:
    """``tf.config.experimental``'s two memory calls over a scripted list of per-call peaks."""

    def __init__(self, peaks: list[int]) -> None:
        self.peaks, self.peak, self.resets = list(peaks), 0, 0

    def reset_memory_stats(self, device: str) -> None:
        self.resets += 1
        self.peak = 0

    def step(self) -> None:
        self.peak = self.peaks.pop(0)

    def get_memory_info(self, device: str) -> dict[str, int]:
        return {"current": 0, "peak": self.peak}


@pytest.fixture
def fake_tf(monkeypatch: pytest.MonkeyPatch):
    import sys
    import types

    def install(peaks: list[int]) -> _FakeExperimental:
        experimental = _FakeExperimental(peaks)
        module = types.ModuleType("tensorflow")
        module.config = types.SimpleNamespace(experimental=experimental)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "tensorflow", module)
        return experimental

    return install


def test_measure_peak_bytes_is_the_worst_of_its_calls_each_measured_from_a_reset(fake_tf) -> None:
    from pytest_tfperf.catalog.batch_budget import measure_peak_bytes

    tf = fake_tf([44 * MIB, 51 * MIB, 46 * MIB])
    assert measure_peak_bytes(tf.step, "GPU:0", calls=3) == 51 * MIB
    assert tf.resets == 3 and tf.peaks == []
    tf = fake_tf([30 * MIB, 99 * MIB])
    assert measure_peak_bytes(tf.step) == 30 * MIB  # one call by default
    with pytest.raises(ValueError, match="calls must be at least 1"):
        measure_peak_bytes(tf.step, calls=0)
