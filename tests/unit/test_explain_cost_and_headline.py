"""What an explained failure says beyond the attribution: a profiled pass over its budget (one line), where the
stored baseline's raw profile is (or how to make one here), and the one-line answer the Markdown and HTML lead
with (the cause, not the symptom). Fake profiler, no TensorFlow."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from pytest_tfperf.profiling.capture import ProfileOutcome
from pytest_tfperf.reports.explain_headline import headline
from pytest_tfperf.reports.report_model import explanation_views
from pytest_tfperf.explain.explanation import explain_pair, explain_stored, over_budget
from tests.unit.test_explain_session import BASE, MS, PLANTED, FakeProfiler, workloads


class LateProfiler(FakeProfiler):
    """A fake profiled pass that reports it took ``seconds`` (its clock), with the plan it was given."""

    def __init__(self, seconds: float, fits: bool = True, **by_side: object) -> None:
        super().__init__(**by_side)
        self.seconds, self.fits = seconds, fits

    def __call__(self, *args: object, **kw: object) -> ProfileOutcome:
        outcome = super().__call__(*args, **kw)
        plan = SimpleNamespace(fits=self.fits, windows=5)
        return ProfileOutcome(outcome.profile, outcome.reason, outcome.run_dir, self.seconds, plan=plan)  # type: ignore[arg-type]


def test_a_pass_over_its_budget_is_one_line_in_the_message_and_the_json(tmp_path: Path) -> None:
    _, current, _ = workloads()
    late = LateProfiler(3.0, current=PLANTED)
    out = explain_stored("t.py::test", BASE.to_dict(), current, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                         rootdir=tmp_path, profiler=late, rounds_s=1.0)
    assert out.lines[-1] == ("  cost: the current side's profiled pass took 3.0 s, over its budget of 1.0 s (the "
                             "measured rounds' time): the machine ran slower than its calibration found")
    assert out.to_dict()["cost"] == [out.lines[-1].strip()]
    # within the budget: nothing said
    on_time = explain_stored("t.py::test", BASE.to_dict(), current, measured_s=8 * MS, median_s=20 * MS,
                             budget_s=2.0, rootdir=tmp_path, profiler=LateProfiler(0.9, current=PLANTED), rounds_s=1.0)
    assert not any("cost:" in line for line in on_time.lines) and "cost" not in on_time.to_dict()
    # even the smallest plan did not fit: said, also when there is no explanation
    reference, variant, _ = workloads()
    tight = LateProfiler(0.5, fits=False, reference="no profiler here", variant=PLANTED)
    none = explain_pair("t.py::test", reference, variant, measured_s=MS, median_s=MS, budget_s=1.0,
                        rootdir=tmp_path, profiler=tight, rounds_s=2.0)
    assert none.lines[0].startswith("no explanation: the reference side could not be profiled")
    assert none.lines[1].endswith("even 5 windows of one iteration did not fit")
    (view,) = explanation_views(none.to_dict())
    assert view.reason is not None and view.notes == (none.lines[1].strip(),)


def test_over_budget_needs_a_budget() -> None:
    assert over_budget(SimpleNamespace(seconds=9.0, plan=None), None, "x") is None
    assert over_budget(SimpleNamespace(seconds=9.0, plan=None), 10.0, "x") is None


def test_a_stored_baselines_raw_profile_is_pointed_at_when_here_and_made_here_when_not(tmp_path: Path) -> None:
    _, current, _ = workloads()
    stored = {**BASE.to_dict(), "logdir": ".tfperf/profiles/t.py_test/baseline"}
    runs = SimpleNamespace(runs=(SimpleNamespace(git_commit="0123456789abcdef0123"),))
    from pytest_tfperf.explain.explanation import baseline_commit

    out = explain_stored("t.py::test[a]", stored, current, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                         rootdir=tmp_path, profiler=FakeProfiler(current=PLANTED), commit=baseline_commit(runs))
    command = "pytest --tfperf --tfperf-against=0123456789ab t.py::test"
    assert out.lines[-1] == (f"  raw profile: tensorboard --logdir {tmp_path}/.tfperf/profiles/t.py_test_a/current "
                             "(current); the baseline's raw profile is not in this checkout (.tfperf/ stays where "
                             f"the baseline was refreshed): {command} profiles both sides here")
    data = out.to_dict()
    assert data["base_logdir"] is None and data["baseline_profile_command"] == command
    assert data["lines"][-1] == out.lines[-1]
    (view,) = explanation_views(data)
    assert ("baseline: its raw profile is not in this checkout; profiles both sides here", command) in view.commands
    # where the refresh ran, the raw profile is there: its folder, made absolute
    raw = tmp_path / ".tfperf/profiles/t.py_test/baseline/plugins/profile/run"
    raw.mkdir(parents=True)
    (raw / "host.xplane.pb").write_bytes(b"x")
    here = explain_stored("t.py::test[a]", stored, current, measured_s=8 * MS, median_s=20 * MS, budget_s=2.0,
                          rootdir=tmp_path, profiler=FakeProfiler(current=PLANTED))
    assert here.lines[-1] == (f"  raw profiles: tensorboard --logdir {tmp_path}/.tfperf/profiles/t.py_test/baseline "
                              f"(baseline), tensorboard --logdir {tmp_path}/.tfperf/profiles/t.py_test_a/current "
                              "(current)")
    assert baseline_commit(SimpleNamespace(runs=())) == ""


WAIT = {"key": "wait:input", "kind": "input wait", "label": "input wait (consumer)", "how": "grew",
        "delta_ms": 0.91, "noise_ms": 0.502}
STAGE = {"key": "stage:Batch/Map/Map", "kind": "stage", "label": "Batch/Map/Map", "how": "appeared",
         "delta_ms": 0.5135, "noise_ms": 0.154, "base_parallel": None, "current_parallel": False}
HINT = ("  most of the profiled change is outside every op and stage TensorFlow traced: Python work between ops, "
        "such as a Session, graph, model or tf.function built on every call")


def test_the_headline_is_the_stage_behind_a_wait_not_the_wait() -> None:
    data = {"causes": [WAIT], "paced_by": STAGE, "pipeline": [STAGE], "lines": ["where the time went: ..."]}
    assert headline(data) == ("tf.data stage Batch/Map/Map (sequential) appeared +0.51 ms/iteration behind the "
                              "consumer's wait for input (grew +0.91 ms/iteration)")
    # a stage named because it is the busiest now, not because it moved: said so
    guess = {**STAGE, "how": "grew", "delta_ms": 0.01, "noise_ms": 0.2, "base_parallel": True}
    assert headline({**data, "paced_by": guess}) == (
        "tf.data stage Batch/Map/Map (sequential, was parallel), the busiest stage now, behind the consumer's wait "
        "for input (grew +0.91 ms/iteration)")


def test_the_headline_is_the_outside_every_op_hint_with_its_share_not_a_tiny_op() -> None:
    matmul = {"key": "op:MatMul", "kind": "op", "label": "MatMul outside layers", "how": "grew", "delta_ms": 0.03,
              "noise_ms": 0.03}
    data = {"causes": [matmul], "profiled_ms": 5.46, "remainder_parts_ms": {"outside_ops": 5.42},
            "lines": ["where the time went: +4.89 ms/iteration measured", "  MatMul outside layers grew", HINT]}
    assert headline(data) == ("most of the profiled change is outside every op and stage TensorFlow traced (+5.42 of "
                              "+5.46 ms/iteration profiled, 99%): Python work between ops, such as a Session, graph, "
                              "model or tf.function built on every call")
    # without the hint, the top cause
    assert headline({**data, "lines": data["lines"][:2]}) == "MatMul outside layers grew +0.03 ms/iteration"


def test_the_headline_is_the_idle_or_untraced_cpu_hint_with_its_own_part_in_the_cpu_frame() -> None:
    """In the CPU frame the parts outside the listed groups are untraced CPU time and time no thread computed: a
    planted ``time.sleep`` whose tiny side effects on ``dense`` passed their test was headlined "dense grew
    +0.07 ms" of +5.57 ms, and the untraced-CPU hint took its share from the self-time frame's part (0%)."""
    dense = {"key": "layer:m/dense", "kind": "layer", "label": "dense (MatMul family)", "how": "grew",
             "delta_ms": 0.25, "noise_ms": 0.08}
    idle = ("  most of the profiled change is time no thread computed: waits for input, I/O, sleeps or locks, or work "
            "that ran on parallel threads before and no longer does")
    data = {"causes": [dense], "frame": "cpu", "profiled_ms": 5.69,
            "remainder_parts_ms": {"outside_ops": 0.0, "untraced_cpu": 2.12, "idle": 3.16},
            "lines": ["where the time went: +5.57 ms/iteration measured", "  dense grew", idle]}
    assert headline(data) == ("most of the profiled change is time no thread computed (+3.16 of +5.69 ms/iteration "
                              "profiled, 56%): waits for input, I/O, sleeps or locks, or work that ran on parallel "
                              "threads before and no longer does")
    cpu = {**data, "remainder_parts_ms": {"outside_ops": 0.0, "untraced_cpu": 4.0, "idle": 1.0},
           "lines": data["lines"][:2] + [HINT]}
    assert headline(cpu).startswith("most of the profiled change is outside every op and stage TensorFlow traced "
                                    "(+4.00 of +5.69 ms/iteration profiled, 70%)")


def test_the_headline_without_a_cause_on_the_path_names_the_stage_that_moved_or_says_nothing_moved() -> None:
    assert headline({"causes": [], "pipeline": [STAGE], "lines": []}) == (
        "tf.data stage Batch/Map/Map (sequential) appeared +0.51 ms/iteration (nothing on the step's own path moved "
        "beyond its noise; tf.data stage times overlap)")
    quiet = ["where the time went: ...", "  no op or stage moved beyond its noise (4 groups compared)"]
    assert headline({"causes": [], "lines": quiet}) == "no op or stage moved beyond its noise (4 groups compared)"
    assert headline({"lines": ["no explanation: busy"], "reason": "busy"}) == "no explanation: busy"
