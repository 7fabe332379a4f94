"""The ``tfperf`` fixture object: what a test calls to measure a workload.

Measures with ``runner``, hands the result to the session (budgets, baseline
gate, reports) and fails the test itself when a limit is crossed, so the
failure belongs to the test whose numbers moved.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, Protocol

import pytest

from pytest_tfperf.diagnoses import numerics
from pytest_tfperf.measuring import runner
from pytest_tfperf.measuring.workload import RunSettings, Workload, build_measurement, dataset_puller
from pytest_tfperf.config import MarkerOptions, SessionConfig
from pytest_tfperf.model import TRACES_EACH, Measurement
from pytest_tfperf.measuring.trace_count import TraceCounter
from pytest_tfperf.measuring.trace_recorder import TraceRecorder
from pytest_tfperf.measuring.watchdog import StallPolicy


PAIRED_ROUNDS = 20


class FixtureAlreadyUsed(pytest.fail.Exception):  # type: ignore[misc,name-defined]  # pytest's public Failed type
    """The ``tfperf`` fixture measures one workload per test.

    A ``pytest.fail`` outcome: the test fails with the one-line message, as a
    misused pytest feature does, without a traceback through the plugin.
    """


class MeasuringSession(Protocol):
    """What the fixture needs of ``session.session.TfPerfSession`` (a protocol: that module imports this one)."""

    effects: list[dict[str, Any]]  # JSON objects (``record_effect``), for the reports

    def measure_and_judge(self, fx: TfPerf, workloads: dict[str, Workload], mode: str, settings: RunSettings,
                          reference: str | None = None) -> dict[str, Measurement]: ...

    def record_failure(self, exc: BaseException, test_id: str, *, batch_size: int | None = None,
                       items_per_iteration: float | None = None) -> str | None: ...


class TfPerf:
    """Measure TensorFlow workloads: ``tfperf(fn, *args, items=...)``, ``.iterate(...)``, ``.compare(...)``.

    Without ``--tfperf`` each method runs its workload once, as a smoke test.
    """

    def __init__(self, test_id: str, options: MarkerOptions, session: MeasuringSession, config: SessionConfig, *,
                 node_id: str | None = None) -> None:
        self._test_id = test_id  # the stable key results and baselines are stored under
        self._node_id = node_id or test_id  # pytest's node id: what a partner session is asked to run
        self._options = options
        self._session = session
        self._config = config
        self._used_by: str | None = None
        self._reference: str | None = None  # compare(reference=...): the variant others are gated against
        self.results: dict[str, Measurement] = {}

    # -- public API ---------------------------------------------------------

    @property
    def measuring(self) -> bool:
        """True under ``--tfperf``; False in a smoke run, where each workload runs once."""
        return self._config.measure

    def __call__(self, fn: Callable[..., object], *args: object, items: float = 1,
                 setup: Callable[[], object] | None = None, functions: Iterable[object] = (),
                 **kwargs: object) -> Measurement:
        """Call ``fn(*args, **kwargs)`` repeatedly and measure it; ``items`` counts work per call.

        ``setup()``, if given, runs once before anything is timed; when it
        returns a tuple, that tuple becomes ``args``.
        """
        self._claim("tfperf(...)")
        self._check_items(items, "tfperf(..., items=...)")
        if not callable(fn):
            self._usage_error(f"tfperf(fn, ...) needs a callable as fn, got {_kind(fn)}")
        if setup is not None and not callable(setup):
            self._usage_error(f"tfperf(..., setup=...) must be a callable that prepares the arguments, "
                              f"got {_kind(setup)}")
        if setup is not None:
            prepared = setup()
            if isinstance(prepared, tuple):
                args = prepared
        workload = Workload(call=_bind(fn, args, kwargs), items_per_iteration=float(items))
        return self._run({"": workload}, "call", roots=[fn, *args, *kwargs.values(), *functions])[""]

    def iterate(self, dataset: Iterable[object], items: float | None = None, *,
                step: Callable[[object], object] | None = None, functions: Iterable[object] = (),
                items_per_element: float | None = None) -> Measurement:
        """Pull elements from ``dataset``; with ``step``, feed each element to ``step(element)``.

        One pull (and step) is one iteration, and ``items`` the work of one
        (as for ``tfperf(fn, items=...)``: samples in a batch, say). A finite
        dataset restarts with a fresh iterator when it ends. With ``step`` the
        time spent waiting for the next element is measured apart from the
        time in the step. ``items_per_element`` is the old name of ``items``.
        """
        if items_per_element is not None:
            # One name for one idea (the work of one iteration); the old one goes in the next release.
            if items is not None:
                self._usage_error("tfperf.iterate(..., items=..., items_per_element=...) are the same setting: "
                                  "keep items")
            warnings.warn(f"{self._node_id}: tfperf.iterate(..., items_per_element=...) is renamed items=...; "
                          "the old name goes in the next release", DeprecationWarning, stacklevel=2)
            items = items_per_element
        items = 1 if items is None else items  # None: not given (so that both names given is caught even at 1)
        self._claim("tfperf.iterate(...)")
        self._check_items(items, "tfperf.iterate(..., items=...)")
        if not hasattr(dataset, "__iter__") and not hasattr(dataset, "__getitem__"):
            self._usage_error(f"tfperf.iterate(dataset, ...) needs an iterable such as a tf.data.Dataset, "
                              f"got {_kind(dataset)}")
        if step is not None and not callable(step):
            self._usage_error(f"tfperf.iterate(..., step=...) must be a callable taking one element, got {_kind(step)}")
        pull = dataset_puller(lambda: iter(dataset))
        if step is None:
            workload = Workload(call=pull, items_per_iteration=float(items))
        else:
            from pytest_tfperf.input_bound.pipeline_shape import shape_of

            workload = Workload(call=pull, pull=pull, step=step, items_per_iteration=float(items),
                                       restarts=lambda: pull.restarts,
                                       fresh_pull=lambda: dataset_puller(lambda: iter(dataset)),
                                       handover=_handover if _is_tf_dataset(dataset) else None,
                                       pipeline=shape_of(dataset))
        roots = [dataset, *functions] + ([step] if step is not None else [])
        return self._run({"": workload}, "iterate", roots=roots)[""]

    def compare(self, variants: Mapping[str, Callable[[], object]], *, items: float = 1,
                functions: Iterable[object] = (), reference: str | None = None) -> dict[str, Measurement]:
        """Measure several variants with their rounds interleaved; one Measurement each.

        Interleaving makes the ratio between variants fair on a noisy machine:
        a slow spell of the machine hits every variant alike.

        With ``reference="main"`` the other variants are gated against that
        one, round by round (the *paired* gate), instead of against stored
        baselines: the reliable gate on a shared CI machine, whose speed swings
        from one process to the next. It measures at least 20 short rounds.
        """
        self._claim("tfperf.compare(...)")
        self._check_items(items, "tfperf.compare(..., items=...)")
        if not isinstance(variants, Mapping):
            self._usage_error(f"tfperf.compare(variants) needs a dict of variants, name -> callable, "
                              f"got {_kind(variants)}")
        if not variants:
            self._usage_error("tfperf.compare(variants) needs at least one variant, got an empty dict")
        for name, fn in variants.items():
            if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
                self._usage_error(f"tfperf.compare(): variant names must be short words like 'anti' or 'fix', "
                                  f"got {name!r}")
            if not callable(fn):
                self._usage_error(f"tfperf.compare(): variant {name!r} must be a callable, got {_kind(fn)}")
        if reference is not None and (reference not in variants or len(variants) < 2):
            self._usage_error(f"tfperf.compare(reference={reference!r}): the reference must be one of at least two "
                              f"variants, got {sorted(variants)}")
        self._reference = reference
        workloads = {name: Workload(call=fn, items_per_iteration=float(items)) for name, fn in variants.items()}
        return self._run(workloads, "call", roots=[*variants.values(), *functions])

    def record_effect(self, effect: Mapping[str, Any]) -> None:
        """Attach a comparison's outcome (``catalog.effects.Effect.to_dict()`` and more) to this run.

        The terminal summary ends with one line per recorded effect, and the
        results JSON and HTML report carry them. Plain data only, so a results
        file can be read where this test's code is not installed.
        """
        self._session.effects.append({**effect, "test": effect.get("test", self._test_id)})

    # -- internals ----------------------------------------------------------

    def _claim(self, what: str) -> None:
        if self._used_by is not None:
            raise FixtureAlreadyUsed(
                f"{self._node_id}: FixtureAlreadyUsed: the tfperf fixture was already used in this test "
                f"({self._used_by}); it measures one workload per test. Split the test in two, or use "
                f"tfperf.compare(...) to measure variants side by side.",
                pytrace=False,
            )
        self._used_by = what

    def _usage_error(self, message: str) -> NoReturn:
        """Fail the test with one line that names it, as pytest reports its own misuse: no plugin frames."""
        _fail(f"{self._node_id}: {message}")

    def _check_items(self, value: object, what: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            self._usage_error(f"{what} must be a positive number of items per iteration, got {value!r}")

    def _variant_id(self, name: str) -> str:
        if not name:
            return self._test_id
        if self._test_id.endswith("]"):
            return f"{self._test_id[:-1]}-{name}]"
        return f"{self._test_id}[{name}]"

    def _stall_policy(self) -> StallPolicy:
        o = self._options
        enabled = self._config.watchdog if o.watchdog is None else o.watchdog
        ceiling = o.stall_ceiling_s if o.stall_ceiling_s is not None else self._config.stall_ceiling_s
        floor = o.stall_floor_s if o.stall_floor_s is not None else min(StallPolicy().floor_s, ceiling)
        multiple = o.stall_multiple if o.stall_multiple is not None else StallPolicy().multiple
        hard_exit = ceiling + 60.0 if (enabled and self._config.hard_exit) else None
        return StallPolicy(enabled=enabled, multiple=multiple, floor_s=floor, ceiling_s=ceiling, hard_exit_s=hard_exit)

    def _settings(self) -> RunSettings:
        o, c = self._options, self._config
        kwargs: dict[str, Any] = {  # RunSettings' keyword arguments, of several types
            "budget_s": o.budget_s if o.budget_s is not None else c.budget_s,
            "rounds": o.rounds if o.rounds is not None else c.rounds,
            "stall": self._stall_policy(),
        }
        if o.warmup_s is not None:
            kwargs["warmup_s"] = o.warmup_s
        if self._reference is not None and self._config.measure:
            # The paired test needs one round of each variant side by side, and
            # 7 pairs at least to reach 99%; 20 short rounds catch a 10% slowdown
            # 49 times in 50 on a 2-core VM (benchmarks/validation_study.py).
            kwargs["rounds"] = kwargs["min_rounds"] = max(kwargs["rounds"], PAIRED_ROUNDS)
        return RunSettings(**kwargs)

    def _run(self, workloads: dict[str, Workload], mode: str, roots: list[object]) -> dict[str, Measurement]:
        tf_loaded = "tensorflow" in sys.modules
        # Every trace as it happens, with its cause, where TensorFlow calls back on each one; else the
        # functions the workload reaches, looked up between rounds (which misses functions made per call).
        recorder = TraceRecorder() if tf_loaded and TraceRecorder.available() else None
        counter = TraceCounter(lambda: roots) if tf_loaded and recorder is None else None
        if counter is not None:
            counter.refresh()

            def trace_total() -> int:
                counter.refresh()
                return counter.total()

        for w in workloads.values():
            if self._options.check_finite:
                w.check_output = numerics.check_finite
            if recorder is not None:
                w.trace_total, w.trace_events, w.trace_counting = recorder.total, recorder.events, TRACES_EACH
            elif counter is not None:
                w.trace_total = trace_total
        settings = self._settings()
        if recorder is not None:
            recorder.install()
        try:
            return self._measure(workloads, mode, settings)
        finally:
            if recorder is not None:
                recorder.uninstall()

    def _measure(self, workloads: dict[str, Workload], mode: str, settings: RunSettings) -> dict[str, Measurement]:
        try:
            if not self._config.measure:
                return self._smoke(workloads, mode, settings)
            return self._session.measure_and_judge(self, workloads, mode, settings, reference=self._reference)
        except Exception as exc:  # noqa: BLE001 - stalls, OOMs and NaNs become clear failures; the rest propagates
            explained = self._session.record_failure(
                exc, self._test_id, batch_size=self._options.batch_size,
                items_per_iteration=next(iter(workloads.values())).items_per_iteration)
            if explained is None:
                raise
        # Failed outside the except block: the text already holds the error,
        # and pytest would otherwise print it a second time as the context.
        _fail(explained)
        raise AssertionError("unreachable")  # pragma: no cover

    def _smoke(self, workloads: dict[str, Workload], mode: str,
               settings: RunSettings) -> dict[str, Measurement]:
        out = {}
        for name, w in workloads.items():
            raw = runner.smoke(w, settings)
            out[name] = build_measurement(self._variant_id(name), mode, raw)
        self.results.update(out)
        return out


def _bind(fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]) -> Callable[[], object]:
    if not args and not kwargs:
        return fn
    if not kwargs:
        return lambda: fn(*args)
    return lambda: fn(*args, **kwargs)


def _is_tf_dataset(obj: object) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(obj, tf.data.Dataset)


def _handover(element: object) -> Callable[[], object]:
    """A pull that hands ``element`` over through a tf.data iterator, already made: the floor of any wait."""
    import tensorflow as tf

    ready = iter(tf.data.Dataset.from_tensors(element).repeat())
    return lambda: next(ready)


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}" if isinstance(value, (int, float, str)) else type(value).__name__


def _fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)
