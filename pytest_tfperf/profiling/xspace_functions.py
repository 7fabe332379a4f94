"""Which ``tf.data`` stage ran each op of a ``tf.data`` function, read from TensorFlow's XPlane profile.

A stage's thread calls its function (``InstantiatedCapturedFunction::RunAsync``, ``RunWithBorrowedArgs``...)
inside the stage's own ``Iterator::`` event or, for a parallel map, inside a ``...Produce`` event
(``ParallelMapProduce``, ``MapAndBatchProduce``) that also holds the event of the stage's input; the function's
ops run on tf.data's thread pool under ``ExecutorState::Process`` events that carry the call's ``id`` stat.
Seen in TensorFlow 2.21's profiles of parallel maps, fused map-and-batch, sequential maps and filters.

The ops' time stays grouped by op family (``tfdata:<family>``, the key compared between profiles), so a stage
inserted above another does not rename its function's ops; the stage only names the group (``work_label``).
``xspace``'s pass over the profile asks this module, event by event, what it needs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_tfperf.profiling.names import is_stage, stage_key

FUNCTION_CALL_PREFIX = "InstantiatedCapturedFunction::"
EXECUTOR_PROCESS = "ExecutorState::Process"
PRODUCE_SUFFIX = "Produce"
WORK_STAGE_SHARE = 0.9  # the share of a tf.data work group's time one stage's function ran, to name that stage alone
MARK = "\x00fn:"  # a group's key until the stage of its call is known, after every line is read


class FunctionLinks:
    """The calls seen (id -> the key of the stage that made them), and per line which call each event is under."""

    def __init__(self, names: Mapping[int, str], stat_names: Mapping[int, str]) -> None:
        self.names = names
        self.calls = {mid for mid, n in names.items() if n.startswith(FUNCTION_CALL_PREFIX)}
        self.processes = {mid for mid, n in names.items() if n == EXECUTOR_PROCESS}
        self.produces = {mid for mid, n in names.items() if n.endswith(PRODUCE_SUFFIX) and not is_stage(n)}
        self.id_stat = next((mid for mid, n in stat_names.items() if n == "id"), None)
        self.active = bool(self.calls and self.processes and self.id_stat is not None)
        self.watched = self.calls | self.processes
        self.call_stage: dict[int, str] = {}
        self.under: list[int | None] = []  # this line: the call whose ops each event is, or is under
        self.stage_at: dict[int, str] = {}  # this line: index of a stage or ...Produce event -> the stage it runs

    def new_line(self, events: int) -> None:
        self.under = [None] * events
        self.stage_at = {}

    def see(self, index: int, parent: int, parent_mid: int, mid: int, event: Any, stage: str | None,
            stack: list[int]) -> None:
        """One event of the line, in start order; ``stage`` is its group key when it is a stage's event."""
        if parent >= 0:
            self.under[index] = self.under[parent]
        if stage is None and mid not in self.watched:
            return
        if stage is not None:
            self.stage_at[index] = stage
            if parent >= 0 and parent_mid in self.produces and parent not in self.stage_at:
                # the first stage under a ...Produce event is the producing stage's input: one level up is the stage
                above = self.names.get(mid, "").rsplit("::", 1)[0]
                if is_stage(above):
                    self.stage_at[parent] = "stage:" + stage_key(above)
        elif mid in self.processes:
            self.under[index] = _id(event, self.id_stat)
        else:
            call = _id(event, self.id_stat)
            if call is not None and call not in self.call_stage:
                for i in reversed(stack):
                    if i in self.stage_at:
                        self.call_stage[call] = self.stage_at[i]
                        break

    def group(self, index: int, family: str) -> str | None:
        """The provisional group of a function op at ``index`` (None when it is under no call)."""
        call = self.under[index]
        return None if call is None else f"{MARK}{call}:{family}"

    def resolve(self, self_time: dict[str, list[float]], op_events: dict[str, list[int]],
                families: dict[str, list[Counter[str]]], work_stages: dict[str, list[Counter[str]]], windows: int,
                register: Callable[[str], str]) -> None:
        """Each provisional group's time into its family's group (``register(family)`` gives its key), and the
        stage whose function ran it into ``work_stages``."""
        for mark in [key for key in self_time if key.startswith(MARK)]:
            call, family = mark[len(MARK):].split(":", 1)
            stage = self.call_stage.get(int(call))
            key = register(family)
            into = self_time[key]
            by_stage = work_stages.setdefault(key, [Counter() for _ in range(windows)])
            for w, value in enumerate(self_time.pop(mark)):
                into[w] += value
                if stage is not None and value:
                    by_stage[w][stage] += value
            counts = op_events.pop(mark, None)
            if counts is not None:
                for w, count in enumerate(counts):
                    op_events[key][w] += count
            for w, found in enumerate(families.pop(mark, ())):
                families[key][w].update(found)


def work_label(label: str, family: str, by_stage: Counter[str], total: float) -> str:
    """``ResizeBilinear in the function of tf.data stage Prefetch/MapAndBatch`` where that stage's function ran at
    least WORK_STAGE_SHARE of the group's time; the stage that ran most of it where that is over half; else as read."""
    if not by_stage or total <= 0:
        return label
    stage, time_ps = by_stage.most_common(1)[0]
    path = stage[len("stage:"):]
    if time_ps >= WORK_STAGE_SHARE * total:
        return f"{family} in the function of tf.data stage {path}"
    if time_ps > 0.5 * total:
        return f"{family} in tf.data functions, {time_ps / total:.0%} of it in stage {path}'s"
    return label


def stage_functions(work_stages: Mapping[str, list[Counter[str]]], windows: Sequence[int], most: int = 4
                    ) -> dict[str, tuple[str, ...]]:
    """Each stage's function's op families over ``windows`` (``most`` of them, largest first), from the tf.data work
    groups' time per stage (``FunctionLinks.resolve``): what tells two maps apart (``stage_alignment``)."""
    by_stage: dict[str, Counter[str]] = {}
    for key, per_window in work_stages.items():
        family = key[len("tfdata:"):]
        for w in windows:
            for stage, ps in per_window[w].items():
                by_stage.setdefault(stage, Counter())[family] += ps
    return {stage: tuple(f for f, _ in found.most_common(most)) for stage, found in by_stage.items()}


def _id(event: Any, stat_id: int | None) -> int | None:
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return int(stat.int64_value or stat.uint64_value) or None
    return None
