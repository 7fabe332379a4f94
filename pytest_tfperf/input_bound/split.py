"""A dataset feeding a step, measured three ways: together, the dataset alone, and the step alone.

The together phase is what is gated and compared; the two alone phases, run
after it within the same budget, let a user see which side moved
(``RawRun.input_split``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pytest_tfperf.measuring.variant_state import VariantState
from pytest_tfperf.measuring.workload import DatasetPuller, InputSplit, RunSettings, Workload
from pytest_tfperf.model import Timings

# With ``step``, the measured budget is split: most of it for the pipeline and
# the step together (the figure that is gated and compared), the rest for the
# dataset alone and the step alone, so that a user can see which side moved.
# The two extra phases run after every round of the together phase, each
# round after round, and the dataset alone on an iterator of its own:
# interleaved with the together rounds, pulling from the same iterator, they
# drained the prefetch buffer that then refilled during the next together
# round (a false allocator "leak" of 0.5-4.9 MiB per iteration, and a
# dataset-alone rate 10-20x what back-to-back pulls sustain).
TOGETHER_SHARE = 0.6
ALONE_SHARE = 0.2
ALONE_WARMUP_FRACTION = 0.25  # the step was already warmed up together
TOGETHER = "dataset and step together"
DATASET_ALONE = "dataset alone"
STEP_ALONE = "step alone"


def alone_states(name: str, w: Workload) -> list[VariantState]:
    """The dataset-alone and step-alone phases of a pull+step workload."""
    pull, step = w.pull, w.step
    assert pull is not None and step is not None
    prefix = f"{name}: " if name else ""
    # The dataset alone: back-to-back pulls from an iterator of its own (the
    # together phase's iterator is left as it was), dropped afterwards.
    own: dict[str, DatasetPuller] = {}

    def fresh() -> None:
        if w.fresh_pull is not None:
            own["pull"] = w.fresh_pull()

    def pull_alone() -> object:
        return own["pull"]() if "pull" in own else pull()

    def restarts_alone() -> int:
        if "pull" in own:
            return own["pull"].restarts
        return w.restarts() if w.restarts is not None else 0

    dataset = VariantState(f"{name}\0dataset",
                            Workload(call=pull_alone, items_per_iteration=w.items_per_iteration,
                                     restarts=restarts_alone),
                            label=prefix + DATASET_ALONE, share=ALONE_SHARE, aux_of=name, prepare=fresh,
                            cleanup=own.clear)
    # The step alone: one element, handed over ready-made each time, so the
    # handover (the floor of any wait) is measured on its own.
    handing: dict[str, Callable[[], object]] = {}

    def prepare_step() -> None:
        element = pull()
        handing["pull"] = w.handover(element) if w.handover is not None else (lambda: element)

    stepped = VariantState(f"{name}\0step",
                            Workload(call=lambda: None, pull=lambda: handing["pull"](), step=step,
                                     items_per_iteration=w.items_per_iteration),
                            label=prefix + STEP_ALONE, share=ALONE_SHARE, aux_of=name, prepare=prepare_step,
                            cleanup=handing.clear)
    return [dataset, stepped]

def alone_warmup(settings: RunSettings) -> RunSettings:
    return dataclasses.replace(settings, warmup_s=settings.warmup_s * ALONE_WARMUP_FRACTION)

def input_split(dataset: VariantState, stepped: VariantState) -> InputSplit:
    restarted = set(dataset.restart_marks)
    pulled = dataset.samples.values()
    pulls = [ns for i, ns in enumerate(pulled) if i not in restarted]
    restarts = tuple(pulled[i] for i in sorted(restarted))
    if not pulls:  # every pull restarted (a one-element dataset): report them as they are
        pulls, restarts = list(pulled), ()
    handover = stepped.waits.values()
    stepped_ns = stepped.samples.values()
    step_only = [max(0, t - h) for t, h in zip(stepped_ns, handover)] if handover else list(stepped_ns)
    return InputSplit(
        dataset_alone=Timings(samples_ns=tuple(pulls), round_sizes=(len(pulls),),
                              items_per_iteration=dataset.workload.items_per_iteration,
                              first_call_ns=dataset.first_call_ns),
        step_alone=Timings(samples_ns=tuple(step_only), round_sizes=tuple(stepped.round_sizes),
                           items_per_iteration=stepped.workload.items_per_iteration,
                           first_call_ns=stepped.first_call_ns),
        handover_ns=handover, dataset_restarts_ns=restarts)
