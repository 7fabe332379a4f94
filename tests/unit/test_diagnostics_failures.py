"""Stalls, out-of-memory errors and NaNs turned into failures with a diagnosis: no TensorFlow, fake errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tfperf.diagnoses.failures import (
    device_of,
    diagnose_failure,
    failure_summary_lines,
    requested_allocation,
)
from pytest_tfperf.diagnoses.numerics import NonFiniteError
from pytest_tfperf.measuring.watchdog import StallError


class ResourceExhaustedError(Exception):
    """Stands in for tf.errors.ResourceExhaustedError: recognised by class name when TF is not loaded."""


CPU_OOM = ("{{function_node __wrapped__Fill_device_/job:localhost/replica:0/task:0/device:CPU:0}} OOM when "
           "allocating tensor with shape[274877906944] and type float on /job:localhost/replica:0/task:0/device:"
           "CPU:0 by allocator mklcpu [Op:Fill] name: ")
GPU_OOM = ("OOM when allocating tensor with shape[16,12,300,300] and type float on "
           "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")


def test_an_oom_names_device_request_peaks_batch_size_and_what_to_try() -> None:
    exc = ResourceExhaustedError(CPU_OOM)
    exc.tfperf_phase = "round 2/5"  # type: ignore[attr-defined]
    exc.tfperf_peaks = (("tf_allocator", "CPU:0", 3 * 2**30, None),  # type: ignore[attr-defined]
                        ("rss_hwm", "host", 5 * 2**30, None))
    exc.tfperf_peaks_since = "this round"  # type: ignore[attr-defined]
    failure = diagnose_failure(exc, "test_x", batch_size=65536)
    assert failure is not None
    lines = failure.message.splitlines()
    assert lines[0] == ("test_x: out of memory on CPU:0 in the round 2/5 (ResourceExhaustedError): a float tensor of "
                        "shape [274877906944] (1.0 TiB) could not be allocated.")
    assert lines[1] == ("  Peak reached: TF allocator on CPU:0 3.0 GiB since this round; process RSS high-water "
                        "5.0 GiB since this round.")
    text = failure.message
    assert "Batch size: 65,536 (from @pytest.mark.tfperf(batch_size=...))" in text
    assert "TensorFlow said: {{function_node" in text
    assert "Try: check the shape first" in text and "halve the batch size (65,536 now)" in text
    assert "set_memory_growth" not in text  # GPU advice only for GPUs
    d = failure.diagnosis
    assert d.kind == "oom" and d.severity == "failure"
    assert d.summary.endswith("could not be allocated; batch size 65,536")
    figures = dict(d.figures)
    assert figures["requested_bytes"] == 2**40 and figures["batch_size"] == 65536
    assert figures["peak_tf_allocator[CPU:0]_bytes"] == 3 * 2**30


def test_a_gpu_oom_gets_gpu_advice_and_no_shape_warning_for_a_plausible_tensor() -> None:
    failure = diagnose_failure(ResourceExhaustedError(GPU_OOM), "t", items_per_iteration=16)
    assert failure is not None
    text = failure.message
    assert "out of memory on GPU:0" in text and "shape [16, 12, 300, 300] (65.9 MiB)" in text
    assert "set_memory_growth(gpu, True)" in text and "cuda_malloc_async" in text and "mixed_float16" in text
    assert "check the shape first" not in text
    assert "Batch size: not given; each iteration counts 16 items" in text


def test_a_python_memory_error_is_an_oom_of_host_memory() -> None:
    failure = diagnose_failure(MemoryError(), "t")
    assert failure is not None
    assert failure.message.startswith("t: out of memory on host memory (MemoryError)")
    assert "Batch size: unknown (name it with @pytest.mark.tfperf(batch_size=...))" in failure.message


def test_other_errors_are_left_alone() -> None:
    assert diagnose_failure(ValueError("bad shape"), "t") is None


def test_a_stall_keeps_its_report_and_its_numbers() -> None:
    exc = StallError("stalled in the round 2/5: the iteration has run 3.1 s", "Stacks of every Python thread...",
                     waited_ns=3_100_000_000, deadline_ns=3_000_000_000, phase="round 2/5", iterations_done=412)
    failure = diagnose_failure(exc, "t")
    assert failure is not None
    assert failure.message.startswith("t: stalled in the round 2/5")
    assert "Stacks of every Python thread" in failure.message
    d = failure.diagnosis
    assert d.kind == "stall" and d.summary == exc.summary
    assert dict(d.figures) == {"waited_s": 3.1, "deadline_s": 3.0, "iterations_done": 412.0}


def test_a_non_finite_loss_names_its_iteration() -> None:
    failure = diagnose_failure(NonFiniteError(37, "output['loss']", float("nan")), "t")
    assert failure is not None
    assert failure.diagnosis.kind == "non_finite"
    assert failure.diagnosis.summary == ("non-finite value at iteration 37 (counting the first call as 0): "
                                         "output['loss'] = nan")
    assert dict(failure.diagnosis.figures) == {"iteration": 37.0}
    assert "learning rate" in failure.message


@pytest.mark.parametrize(("message", "device"), [
    (CPU_OOM, "CPU:0"), (GPU_OOM, "GPU:0"),
    ("Allocator (GPU_1_bfc) ran out of memory trying to allocate 34.10MiB ... by allocator GPU_1_bfc", "GPU:1"),
    ("OOM somewhere", None),
])
def test_the_device_is_read_from_the_message(message: str, device: str | None) -> None:
    assert device_of(message) == device


def test_the_requested_allocation_is_parsed_with_its_dtype() -> None:
    assert requested_allocation(GPU_OOM) == ((16, 12, 300, 300), "float", 16 * 12 * 300 * 300 * 4)
    assert requested_allocation("shape[3] and type string on") == ((3,), "string", None)
    assert requested_allocation("no shape here") is None


def test_failures_go_to_the_summary_and_round_trip_through_the_results_json(tmp_path: Path) -> None:
    from pytest_tfperf.model import Environment
    from pytest_tfperf.storage.results_json import load_results, results_to_dict, write_results

    failure = diagnose_failure(NonFiniteError(3, "output", float("inf")), "tests/test_a.py::test_nan")
    assert failure is not None
    lines = failure_summary_lines([failure])
    assert lines[0] == ("tests/test_a.py::test_nan: FAILED (non_finite): non-finite value at iteration 3 "
                        "(counting the first call as 0): output = inf")
    path = write_results(tmp_path / "r.json", results_to_dict(Environment(hard=(("tf", "2.21"),)), [],
                                                              {failure.test_id: failure.verdict_dict()}))
    doc = load_results(path)
    verdict = doc.verdict("tests/test_a.py::test_nan")
    assert verdict is not None and verdict["status"] == "failed" and verdict["kind"] == "non_finite"
    assert verdict["diagnoses"][0]["figures"] == {"iteration": 3.0}
    assert doc.measurement("tests/test_a.py::test_nan") is None
