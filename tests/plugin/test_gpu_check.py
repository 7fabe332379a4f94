"""``python -m pytest_tfperf.gpu_check``: for real on this machine (no GPU), and every GPU path on an emulated GPU.

The emulated GPU (``tests.fakes.gpu``) stands in for CuPy/PyTorch and NVML at
once, in this process and in the pytest process the self-check starts, so the
self-check's whole NVML path runs here as it will on a real GPU: probe, plugin
run, results JSON, evaluation. Its figures are emulated; what is asserted is
that each check reaches its verdict from them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tfperf.cli import gpu_plugin_checks, gpu_selfcheck, gpu_tf_checks
from pytest_tfperf.probes import nvml

ROOT = Path(__file__).resolve().parents[2]
EMULATED = "tests.fakes.gpu:FakeOps"


def test_without_a_gpu_the_self_check_runs_and_says_no_gpu(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if nvml.nvidia_driver_visible():
        env["CUDA_VISIBLE_DEVICES"] = ""  # a machine with a GPU: hide it, the same "no GPU" path runs
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, "-m", "pytest_tfperf.gpu_check", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no GPU: " in proc.stdout
    assert "nothing to check without a GPU" in proc.stdout
    document = json.loads(out.read_text())
    assert document["schema"] == gpu_selfcheck.SCHEMA and document["failed"] == 0
    assert document["machine"]["gpu"] is None and document["machine"]["no_gpu"]
    assert {c["status"] for c in document["checks"]} == {"not run"}
    assert [c["name"] for c in document["checks"]] == [name for name, _ in gpu_selfcheck.ALL_CHECKS]
    assert "tensorflow" not in proc.stderr.lower()  # nothing heavy imported without a GPU


@pytest.fixture
def emulated_gpu(monkeypatch: pytest.MonkeyPatch) -> object:
    """The emulated GPU in this process, undone afterwards."""
    from tests.fakes import gpu

    monkeypatch.setattr(nvml, "nvidia_driver_visible", nvml.nvidia_driver_visible)  # restored afterwards
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(gpu, "DEVICE", None)
    monkeypatch.setattr(nvml, "_inventory_cache", {})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(gpu_selfcheck.OPS_ENV, EMULATED)
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)  # the self-check sets it; restored afterwards
    return gpu.FakeOps()


def test_every_nvml_check_reaches_its_verdict_on_an_emulated_gpu(emulated_gpu: object, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # TensorFlow stays out of this process (other tests tell a stand-in error class from TensorFlow's by
    # whether TensorFlow is loaded); its no-GPU path is tested on a fake below.
    installed = gpu_selfcheck.available_libraries()
    monkeypatch.setattr(gpu_selfcheck, "available_libraries", lambda: {**installed, "tensorflow": False})
    checks, facts = gpu_selfcheck.run_checks(ops_spec=EMULATED, workdir=tmp_path, plugin_budget_s=0.5,
                                         cost_pairs=2, cost_calls=3)
    by_name = {c.name: c for c in checks}
    assert [c.name for c in checks] == [name for name, _ in gpu_selfcheck.ALL_CHECKS]
    assert facts["gpu"][0]["name"] == "NVIDIA H200 (emulated)"
    assert by_name["GPU inventory (NVML)"].status == "info"
    expected_pass = [
        "NVML probe reads a known 1 GiB allocation",
        "plugin: 1 GiB allocation in the results JSON",
        "plugin: max_peak_device_bytes=256 MiB fails",
        "plugin: GPU busy, saturated vs input-starved step",
        "plugin: min_gpu_busy_fraction=0.5 fails a starved step",
    ]
    assert {n: by_name[n].status for n in expected_pass} == {n: "pass" for n in expected_pass}, \
        "\n".join(gpu_selfcheck.format_table(checks)) + "\n" + "\n".join(facts.get("plugin_run", {}).get("output_tail", []))
    known = by_name["NVML probe reads a known 1 GiB allocation"]
    assert known.figures["added_bytes"] == 2**30 and known.figures["scope"] == "process"
    budget = by_name["plugin: max_peak_device_bytes=256 MiB fails"]
    assert "peak_nvml[GPU:0]: measured 1,544.0 MiB, limit 256.0 MiB (the limit applies to the absolute peak" in budget.found
    busy = by_name["plugin: GPU busy, saturated vs input-starved step"]
    assert busy.figures["saturated_busy"] > busy.figures["starved_busy"]  # type: ignore[operator]
    # The plugin's own terminal summary, in that run, has the GPU columns.
    tail = facts["plugin_run"]["output_tail"]
    assert any("GPU mem" in line and "GPU busy" in line for line in tail), "\n".join(tail)
    cost = by_name["NVML sampler cost on a GPU step (on/off)"]
    assert cost.status in ("pass", "FAIL") and isinstance(cost.figures["median_ratio"], float)  # ran; emulated timing
    tf_checks = [c for c in checks if c.needs == "TensorFlow (CUDA)"]
    assert {c.found for c in tf_checks} == {"TensorFlow is not installed"}


def test_a_plugin_run_without_results_is_one_failed_check_with_the_output_tail() -> None:
    run = gpu_plugin_checks.PytestRun(returncode=4, output="ERROR: usage\nno such option: --tfperf", results=None, seconds=1.0)
    [check] = gpu_plugin_checks.evaluate_plugin_run(run)
    assert check.status == "FAIL" and "pytest exited 4" in check.found and "no such option" in check.found


def test_a_plugin_run_whose_gpu_never_got_busy_fails_the_busy_check() -> None:
    def measurement(busy: float) -> dict[str, object]:
        return {"extra_metrics": {"gpu_busy_fraction": busy},
                "diagnoses": [{"kind": "gpu_busy", "severity": "warning", "summary": "the GPU waits: ..."}],
                "gpu_busy": [{"device": "GPU:0", "process_fraction": None}], "summary": {"median_ns": 4e6}}

    tests = {f"{gpu_plugin_checks.PLUGIN_FILE}::test_saturated": {"measurement": measurement(0.2)},
             f"{gpu_plugin_checks.PLUGIN_FILE}::test_starved": {"measurement": measurement(0.1)}}
    run = gpu_plugin_checks.PytestRun(returncode=1, output="", results={"tests": tests}, seconds=1.0)
    checks = {c.name: c for c in gpu_plugin_checks.evaluate_plugin_run(run)}
    assert checks["plugin: GPU busy, saturated vs input-starved step"].status == "FAIL"
    assert checks["plugin: 1 GiB allocation in the results JSON"].found == "not measured: no measurement"
    assert checks["plugin: max_peak_device_bytes=256 MiB fails"].status == "FAIL"


def test_a_gpu_without_cupy_or_pytorch_runs_the_inventory_and_says_what_the_rest_needs(
        emulated_gpu: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpu_selfcheck, "available_libraries",
                        lambda: {"tensorflow": False, "torch": False, "cupy": False, "pynvml": True})
    checks, _ = gpu_selfcheck.run_checks(ops_spec="", workdir=tmp_path)
    assert checks[0].status == "info"
    assert {c.found for c in checks if c.needs == "CuPy or PyTorch"} == {"needs CuPy or PyTorch (neither is installed)"}
    assert {c.found for c in checks if c.needs == "TensorFlow (CUDA)"} == {"TensorFlow is not installed"}


def test_the_tensorflow_allocator_check_reads_a_known_tensor_on_a_fake_gpu() -> None:
    from tests.fakes import FakeTensorFlow

    check = gpu_tf_checks._tf_allocator(FakeTensorFlow(gpus=1))
    assert check.status == "pass" and check.figures["added_bytes"] == 256 * 2**20


def test_tensorflow_without_a_gpu_says_so_for_each_of_its_checks(tmp_path: Path) -> None:
    from tests.fakes import FakeTensorFlow

    checks = gpu_tf_checks.tensorflow_checks(FakeTensorFlow(gpus=0), tmp_path)
    assert [c.name for c in checks] == [n for n, needs in gpu_selfcheck.ALL_CHECKS if needs == "TensorFlow (CUDA)"]
    assert {(c.status, c.found) for c in checks} == {
        ("not run", "TensorFlow sees no GPU (a CPU-only build, or its CUDA libraries are missing)")}
