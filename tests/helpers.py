"""Test helpers that more than one test module needs, written once.

``FakeClock`` stands for the runner's ``time.perf_counter_ns``: it advances only
when a workload 'works'. ``clean_nvml_state`` is an autouse fixture: a module that
imports it gets a visible driver, no ``CUDA_VISIBLE_DEVICES`` and an empty device
inventory in every test, whatever the machine has.
"""

from __future__ import annotations

import pytest

from pytest_tfperf.probes import nvml


class FakeClock:
    """Advances only when a workload 'works': each call of ``work(ns)`` moves time forward."""

    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now

    def work(self, ns: int) -> None:
        self.now += ns


@pytest.fixture(autouse=True)
def clean_nvml_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: True)
    monkeypatch.setattr(nvml, "_inventory_cache", {})
