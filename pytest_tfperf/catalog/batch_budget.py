"""Batch size against a memory budget: a clear failure, the largest batch that fits, and the fit of peak to batch.

An oversized batch should fail the test that chose it with the numbers that
matter (batch size, peak, budget, device), not crash the session or leave a
bare ``ResourceExhaustedError``. On a CPU the budget is enforced here, by
reading the TensorFlow allocator's peak after a step: a real out-of-memory on a
CPU takes ten seconds (the allocator's retry wait) and a request between free
and physical memory can wake the kernel's OOM killer. On a GPU the budget can
be a real cap (``tf.config.set_logical_device_configuration``) and the real
``ResourceExhaustedError`` is caught and explained the same way.

The search and the fit are pure; only ``measure_peak_bytes``,
``measure_transient_bytes`` and ``run_within_budget`` touch TensorFlow,
imported when called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

_MIB = 2**20


def _mib(value: float) -> str:
    return f"{value / _MIB:,.1f} MiB"


class MemoryBudgetExceeded(Exception):
    """A batch needs more memory than the budget allows (or ran out of it for real)."""

    def __init__(self, *, batch_size: int, peak_bytes: int | None, budget_bytes: int, device: str,
                 cause: str | None = None) -> None:
        self.batch_size = batch_size
        self.peak_bytes = peak_bytes
        self.budget_bytes = budget_bytes
        self.device = device
        self.cause = cause
        if peak_bytes is not None:
            what = (f"batch size {batch_size} needs {_mib(peak_bytes)} of TensorFlow memory on {device} at its "
                    f"peak, over the budget of {_mib(budget_bytes)}")
        else:
            what = (f"batch size {batch_size} ran out of memory on {device} (budget {_mib(budget_bytes)}; peak "
                    f"unknown, the allocation failed): {cause}")
        super().__init__(
            f"{what}. Use a smaller batch (largest_batch_within_budget() finds the largest that fits) or "
            f"accumulate gradients over micro-batches to keep the effective batch size."
        )


@dataclass(frozen=True, slots=True)
class BatchSearch:
    """What ``largest_batch_within_budget`` found, with every probe it made."""

    largest_fitting: int | None  # None: not even the smallest batch tried fits
    budget_bytes: int
    probes: tuple[tuple[int, int | None], ...]  # (batch size, peak bytes; None where it ran out of memory)

    def peak_of(self, batch_size: int) -> int | None:
        for batch, peak in self.probes:
            if batch == batch_size:
                return peak
        raise KeyError(f"batch size {batch_size} was not probed; probed: {[b for b, _ in self.probes]}")


def largest_batch_within_budget(peak_bytes_for: Callable[[int], int], budget_bytes: int, *, start: int = 1,
                                limit: int = 1 << 20) -> BatchSearch:
    """The largest batch size in ``[start, limit]`` whose peak stays within ``budget_bytes``.

    ``peak_bytes_for(batch)`` runs one step at that batch size and returns its
    peak; raising ``MemoryBudgetExceeded`` (a real out-of-memory) counts as not
    fitting. Peak memory must grow with the batch size, as it does for a
    training step; a real step's peak varies from call to call, so let
    ``peak_bytes_for`` return the worst of a few calls
    (``measure_peak_bytes(step, device, calls=3)``) or the bisection can land
    below a batch that fits. The batch doubles until it stops fitting, then bisects:
    about 2 log2(answer) steps.
    """
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    if not 1 <= start <= limit:
        raise ValueError(f"need 1 <= start <= limit, got start={start}, limit={limit}")
    probes: list[tuple[int, int | None]] = []

    def fits(batch: int) -> bool:
        try:
            peak: int | None = int(peak_bytes_for(batch))
        except MemoryBudgetExceeded:
            peak = None
        probes.append((batch, peak))
        return peak is not None and peak <= budget_bytes

    if not fits(start):
        return BatchSearch(None, budget_bytes, tuple(probes))
    good = start
    bad = None
    while bad is None:
        candidate = min(good * 2, limit)
        if candidate == good:  # the limit fits
            return BatchSearch(good, budget_bytes, tuple(probes))
        if fits(candidate):
            good = candidate
        else:
            bad = candidate
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return BatchSearch(good, budget_bytes, tuple(probes))


@dataclass(frozen=True, slots=True)
class PeakModel:
    """Peak memory as a straight line in the batch size: ``fixed_bytes + bytes_per_sample * batch``."""

    fixed_bytes: float
    bytes_per_sample: float
    r_squared: float

    def peak_bytes(self, batch_size: int) -> float:
        return self.fixed_bytes + self.bytes_per_sample * batch_size

    def largest_batch(self, budget_bytes: int) -> int:
        """The batch this line predicts to fit the budget (0 if none does)."""
        if self.bytes_per_sample <= 0:
            raise ValueError("peak memory does not grow with the batch size: the line predicts no limit")
        return max(0, int((budget_bytes - self.fixed_bytes) // self.bytes_per_sample))


def fit_peak_model(batch_sizes: Sequence[int], peak_bytes: Sequence[int]) -> PeakModel:
    """Least-squares line through (batch size, peak) pairs."""
    if len(batch_sizes) != len(peak_bytes):
        raise ValueError(f"{len(batch_sizes)} batch sizes but {len(peak_bytes)} peaks")
    if len(set(batch_sizes)) < 2:
        raise ValueError("fitting a line needs peaks at two different batch sizes at least")
    n = len(batch_sizes)
    mx = sum(batch_sizes) / n
    my = sum(peak_bytes) / n
    sxx = sum((x - mx) ** 2 for x in batch_sizes)
    sxy = sum((x - mx) * (y - my) for x, y in zip(batch_sizes, peak_bytes))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in peak_bytes)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(batch_sizes, peak_bytes))
    r2 = 1.0 if ss_tot == 0 else 1.0 - ss_res / ss_tot
    return PeakModel(fixed_bytes=intercept, bytes_per_sample=slope, r_squared=r2)


def measure_peak_bytes(step: Callable[[], object], device: str = "CPU:0", *, calls: int = 1) -> int:
    """TensorFlow's allocator peak on ``device``, memory already in use included: the highest of ``calls`` calls.

    One call's peak depends on the order in which the executor happens to run
    independent ops, so it differs from call to call: measured here
    (``benchmarks/peak_spread.py``), 30 calls of the catalog's training step at
    batch 4096 spread over up to 1.2x (43 to 51 MiB in one run, 44 to 53 in
    another). A budget has to hold for every
    step, so a search for the batch that fits wants the worst of a few calls.
    """
    import tensorflow as tf

    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    worst = 0
    for _ in range(calls):
        tf.config.experimental.reset_memory_stats(device)
        step()
        worst = max(worst, int(tf.config.experimental.get_memory_info(device)["peak"]))
    return worst


def measure_transient_bytes(step: Callable[[], object], device: str = "CPU:0") -> int:
    """What one call of ``step`` allocates on ``device`` at its peak, above the memory in use before it."""
    import tensorflow as tf

    tf.config.experimental.reset_memory_stats(device)
    in_use = int(tf.config.experimental.get_memory_info(device)["current"])
    step()
    return int(tf.config.experimental.get_memory_info(device)["peak"]) - in_use


def run_within_budget(step: Callable[[], object], *, batch_size: int, budget_bytes: int,
                      device: str = "CPU:0") -> int:
    """Run one step; return its peak, or raise ``MemoryBudgetExceeded`` when it is over budget or out of memory."""
    import tensorflow as tf

    try:
        peak = measure_peak_bytes(step, device)
    except tf.errors.ResourceExhaustedError as exc:
        first_line = (str(exc).strip().splitlines() or ["ResourceExhaustedError"])[0]
        raise MemoryBudgetExceeded(batch_size=batch_size, peak_bytes=None, budget_bytes=budget_bytes,
                                   device=device, cause=first_line[:300]) from exc
    if peak > budget_bytes:
        raise MemoryBudgetExceeded(batch_size=batch_size, peak_bytes=peak, budget_bytes=budget_bytes, device=device)
    return peak
