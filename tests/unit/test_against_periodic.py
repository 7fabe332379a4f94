"""The --tfperf-against notice of a cost on a few iterations (``against.periodic``), with the partners faked: given
beside an unchanged or noisy verdict only when two fresh pairs of processes read the mean time per item slower too."""

from __future__ import annotations

import random
from typing import Any

from pytest_tfperf.config import MarkerOptions, SessionConfig
from pytest_tfperf.measuring.workload import RunSettings
from pytest_tfperf.model import Measurement, Timings
from pytest_tfperf.session.session import TfPerfSession

TEST_ID = "tests/test_pipeline.py::test_step"


def periodic(seed: int, *, stall: float, rounds: int = 20, per_round: int = 64) -> Measurement:
    """1 ms iterations (3% noise), every eighth one ``stall`` ms longer: the median iteration never moves."""
    rng = random.Random(seed)
    samples = [int(1e6 * rng.lognormvariate(0.0, 0.03) + (stall * 1e6 if i % 8 == 7 else 0.0))
               for _ in range(rounds) for i in range(per_round)]
    return Measurement(test_id=TEST_ID, mode="call",
                       timings=Timings(tuple(samples), (per_round,) * rounds, 1.0, 1), traces_steady=0)


SLOW, FAST = periodic(1, stall=4.0), periodic(2, stall=0.0)  # 1.5x the time per item at the mean
SETTINGS = RunSettings()


class FakePartner:
    def restart(self) -> None:
        pass


def judged(first: tuple[Measurement, Measurement], fresh: list[tuple[Measurement, Measurement] | None],
           again: tuple[Measurement, Measurement] | None = None) -> tuple[Any, list[int]]:
    """The plan's outcome for the first pair ``first`` (ours, theirs), the fresh pairs answering ``fresh`` in turn
    (None: could not be started); and the rounds each fresh pair was asked for. ``again``: what the first pair
    measures when its verdict was borderline (None: it must not be asked)."""
    s = TfPerfSession(SessionConfig(measure=True, against="origin/main"), "/nonexistent")
    s._partner = FakePartner()  # type: ignore[assignment]
    answers = iter(fresh)
    asked: list[int] = []

    def confirm(test_id: str, settings: RunSettings, is_fresh: bool = True) -> Any:
        assert is_fresh and test_id == TEST_ID
        asked.append(settings.rounds)
        pair = next(answers)
        return (pair, None) if pair is not None else (None, "the partner did not start")

    s._confirm_against = confirm  # type: ignore[method-assign]
    if again is None:
        s._measure_beside_partner = lambda *a, **k: (_ for _ in ()).throw(AssertionError("looked again"))  # type: ignore[method-assign]
    else:
        s._measure_beside_partner = lambda *a, **k: ({"": again[0]}, again[1], "")  # type: ignore[method-assign]
    outcome = s._judge_against(TEST_ID, {"": first[0]}, "", first[1], MarkerOptions(), SETTINGS, None)  # type: ignore[arg-type]
    return outcome, asked


def message(outcome: Any) -> str:
    throughput = outcome.verdict.metric("throughput")
    assert throughput is not None and str(throughput.status) == "unchanged"  # the verdict stays the median's
    return str(throughput.message)


def test_a_cost_every_eighth_iteration_read_by_two_fresh_pairs_too_is_told_beside_the_unchanged_verdict() -> None:
    outcome, asked = judged((SLOW, FAST), [(periodic(3, stall=4.0), periodic(4, stall=0.0)),
                                           (periodic(5, stall=4.0), periodic(6, stall=0.0))])
    assert asked == [20, 20]  # two fresh pairs, as many rounds as the first
    assert "; but the mean time per item is 3" in message(outcome)
    assert "the mean of 3 pairs of processes, each read it slower; this pair 3" in message(outcome)
    assert "make one iteration cover the cost's period (items=)" in message(outcome)


def test_a_mean_that_a_fresh_pair_does_not_read_slower_is_a_difference_between_processes_and_not_told() -> None:
    outcome, asked = judged((SLOW, FAST), [(periodic(3, stall=0.0), periodic(4, stall=0.0))])
    assert asked == [20]  # the search ends at the first pair that does not read it
    assert "mean time per item" not in message(outcome)
    assert outcome.notices[-1].startswith(f"{TEST_ID}: this pair of processes read the mean time per item 3")
    assert "a fresh pair of processes, one of each version, did not (mean time per item" in outcome.notices[-1]


def test_the_second_fresh_pair_must_read_it_too() -> None:
    outcome, asked = judged((SLOW, FAST), [(periodic(3, stall=4.0), periodic(4, stall=0.0)),
                                           (periodic(5, stall=0.0), periodic(6, stall=0.0))])
    assert asked == [20, 20]
    assert "mean time per item" not in message(outcome)
    assert "the second fresh pair of processes" in outcome.notices[-1]


def test_fresh_pairs_that_cannot_be_started_leave_the_verdict_as_it_was_and_say_so() -> None:
    outcome, asked = judged((SLOW, FAST), [None])
    assert asked == [20]
    assert "mean time per item" not in message(outcome)
    assert outcome.notices[-1].endswith("but it could not be measured again in fresh processes (the partner did not "
                                        "start); nothing said of it")


def test_no_fresh_pair_is_started_when_the_first_pair_reads_the_mean_alike() -> None:
    outcome, asked = judged((periodic(1, stall=4.0), periodic(2, stall=4.0)), [])
    assert asked == [] and outcome.notices == []
    assert "mean time per item" not in message(outcome)


def noisy_periodic(seed: int, *, stall: float, rounds: int = 20, per_round: int = 64) -> Measurement:
    """As ``periodic``, each round also 25% faster or slower as a whole (lognormal): the rounds' medians vary so much
    that the median's verdict is "noisy", while the mean time per item, 1.5x with the stall, still reads it."""
    rng = random.Random(seed)
    samples = []
    for _ in range(rounds):
        spell = rng.lognormvariate(0.0, 0.25)
        samples += [int(1e6 * spell * rng.lognormvariate(0.0, 0.03) + (stall * 1e6 if i % 8 == 7 else 0.0))
                    for i in range(per_round)]
    return Measurement(test_id=TEST_ID, mode="call",
                       timings=Timings(tuple(samples), (per_round,) * rounds, 1.0, 1), traces_steady=0)


def test_a_cost_on_a_few_iterations_is_told_beside_a_noisy_verdict_too() -> None:
    outcome, asked = judged((noisy_periodic(1, stall=4.0), noisy_periodic(2, stall=0.0)),
                            [(noisy_periodic(3, stall=4.0), noisy_periodic(4, stall=0.0)),
                             (noisy_periodic(5, stall=4.0), noisy_periodic(6, stall=0.0))],
                            again=(noisy_periodic(7, stall=4.0), noisy_periodic(8, stall=0.0)))
    throughput = outcome.verdict.metric("throughput")
    assert str(throughput.status) == "noisy"  # the verdict stays the median's
    assert asked == [40, 40]  # as many rounds as the first pair's two looks pooled
    assert "; but the mean time per item is " in str(throughput.message)
