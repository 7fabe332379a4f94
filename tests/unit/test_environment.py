"""The environment fingerprint: what is hard, what is soft, and that it does not depend on import order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pytest_tfperf.probes import environment
from pytest_tfperf.probes import nvml
from pytest_tfperf.model import Environment, KeyDifference
from tests.fakes import FakeGpu, FakeTensorFlow, make_fake_pynvml

HARD_KEYS = {
    "os", "arch", "cpu.model", "cpu.cores", "cpu.quota", "python", "tensorflow", "tensorflow.build",
    "gpu.count", "gpu.models", "gpu.driver", "tf.threading.intra_op", "tf.threading.inter_op",
    *(f"env.{name}" for name in environment.HARD_ENV_VARS),
}


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU, no TensorFlow loaded, none of the variables the fingerprint reads."""
    for name in list(os.environ):
        if name.startswith(("TF_", "CUDA_")) or name == "OMP_NUM_THREADS":
            monkeypatch.delenv(name)
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: False)
    monkeypatch.setattr(nvml, "_inventory_cache", {})
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)


def test_the_fingerprint_has_every_hard_key() -> None:
    env = environment.collect_environment()
    hard = env.hard_dict()
    assert set(hard) == HARD_KEYS
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert hard["cpu.cores"] == str(cores)
    assert hard["python"] == f"{sys.implementation.name} {sys.version_info.major}.{sys.version_info.minor}"
    assert (hard["gpu.count"], hard["gpu.models"], hard["gpu.driver"]) == ("0", "none", "none")
    assert {"kernel", "hostname", "numpy", "ram.total_gib", "pytest_tfperf", "python.version"} <= set(env.soft_dict())


def test_fingerprint_is_the_same_with_tensorflow_loaded_at_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    before = environment.collect_environment()
    monkeypatch.setitem(sys.modules, "tensorflow", FakeTensorFlow())
    assert environment.collect_environment() == before


def test_thread_counts_set_through_tf_config_change_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = environment.collect_environment()
    monkeypatch.setitem(sys.modules, "tensorflow", FakeTensorFlow(intra_op_threads=1, inter_op_threads=2))
    after = environment.collect_environment()
    assert after.fingerprint != before.fingerprint
    assert (after.hard_dict()["tf.threading.intra_op"], after.hard_dict()["tf.threading.inter_op"]) == ("1", "2")


def test_a_stand_in_tensorflow_without_the_api_is_treated_as_default(monkeypatch: pytest.MonkeyPatch) -> None:
    before = environment.collect_environment()
    monkeypatch.setitem(sys.modules, "tensorflow", object())
    assert environment.collect_environment() == before


@pytest.mark.parametrize(
    ("name", "value", "recorded"),
    [
        ("OMP_NUM_THREADS", "1", "1"),
        ("TF_NUM_INTRAOP_THREADS", "2", "2"),
        ("TF_ENABLE_ONEDNN_OPTS", "1", "true"),
        ("TF_CPU_ALLOCATOR_USE_BFC", "true", "true"),
        ("TF_XLA_FLAGS", "--tf_xla_auto_jit=2", "--tf_xla_auto_jit=2"),
    ],
)
def test_settings_that_change_results_are_hard_keys(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, recorded: str
) -> None:
    before = environment.collect_environment()
    monkeypatch.setenv(name, value)
    after = environment.collect_environment()
    assert after.fingerprint != before.fingerprint
    assert before.differences(after, hard=True) == (KeyDifference(f"env.{name}", "unset", recorded),)
    assert before.differences(after, hard=False) == ()


def test_boolean_spellings_that_tensorflow_treats_alike_give_one_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    zero = environment.collect_environment()
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "False")
    assert environment.collect_environment().fingerprint == zero.fingerprint


def test_other_tensorflow_variables_are_soft(monkeypatch: pytest.MonkeyPatch) -> None:
    before = environment.collect_environment()
    monkeypatch.setenv("TF_GPU_THREAD_MODE", "gpu_private")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # logging changes nothing measured: not recorded
    after = environment.collect_environment()
    assert after.fingerprint == before.fingerprint
    assert before.differences(after, hard=True) == ()
    assert before.differences(after, hard=False) == (KeyDifference("env.TF_GPU_THREAD_MODE", None, "gpu_private"),)


def test_terraform_variables_and_secrets_are_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_TOKEN_app_terraform_io", "secret-token")
    monkeypatch.setenv("TF_VAR_password", "hunter2")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", "/root/.terraformrc")
    monkeypatch.setenv("TF_MY_API_KEY", "k")
    env = environment.collect_environment()
    text = repr(env)
    for leaked in ("secret-token", "hunter2", "terraformrc", "TF_MY_API_KEY"):
        assert leaked not in text


def test_gpus_enter_the_hard_keys_and_their_uuids_the_soft_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: True)
    gpus = [FakeGpu(name="NVIDIA L4", uuid="GPU-1"), FakeGpu(name="NVIDIA L4", uuid="GPU-2")]
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(gpus, driver_version="535.104.05"))
    env = environment.collect_environment()
    hard, soft = env.hard_dict(), env.soft_dict()
    assert (hard["gpu.count"], hard["gpu.models"], hard["gpu.driver"]) == ("2", "NVIDIA L4, NVIDIA L4", "535.104.05")
    assert soft["gpu.uuids"] == "GPU-1, GPU-2"


def test_a_failing_nvml_is_recorded_as_unknown_not_as_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "nvidia_driver_visible", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([FakeGpu()], init_error="DriverNotLoaded"))
    hard = environment.collect_environment().hard_dict()
    assert hard["gpu.count"].startswith("unknown (") and "NVMLError_DriverNotLoaded" in hard["gpu.count"]


def test_differences_list_hard_and_soft_keys_apart_sorted_with_absent_keys_as_none() -> None:
    a = Environment(hard=(("cpu.model", "A"), ("gone", "x")), soft=(("hostname", "h1"),))
    b = Environment(hard=(("cpu.model", "B"), ("new", "y")), soft=(("hostname", "h2"),))
    assert a.differences(b, hard=True) == (
        KeyDifference("cpu.model", "A", "B"),
        KeyDifference("gone", "x", None),
        KeyDifference("new", None, "y"),
    )
    assert a.differences(b, hard=False) == (KeyDifference("hostname", "h1", "h2"),)
    assert a.differences(a, hard=True) == () and a.differences(a, hard=False) == ()


def test_build_info_is_parsed_without_importing_tensorflow() -> None:
    source = (
        '"""Auto-generated module providing information about the build."""\nimport collections\n\n'
        "build_info = collections.OrderedDict([('cpu_compiler', 'clang'), ('cuda_version', '12.5.1'), "
        "('cudnn_version', '9'), ('is_cuda_build', True), ('is_rocm_build', False)])\n"
    )
    info = environment.parse_build_info(source)
    assert environment.describe_build(info) == "cuda 12.5.1, cudnn 9"
    assert environment.describe_build(environment.parse_build_info("build_info = {'is_cuda_build': False}")) == "cpu"
    assert environment.describe_build({"is_rocm_build": True, "rocm_version": "6.1"}) == "rocm 6.1"
    with pytest.raises(ValueError, match="no build_info assignment"):
        environment.parse_build_info("x = 1")


_ORDER_SCRIPT = """
import json, sys
from pytest_tfperf.probes import environment
before = environment.collect_environment()
loaded = [m for m in ("tensorflow", "pandas", "numpy") if m in sys.modules]
import tensorflow as tf
tf.constant(1.0) + 1.0
environment._static_hard.cache_clear()
environment._static_soft.cache_clear()
after = environment.collect_environment()
print("RESULT " + json.dumps({
    "loaded_by_collect": loaded,
    "same": before == after,
    "build": before.hard_dict()["tensorflow.build"],
    "expected_build": environment.describe_build(dict(tf.sysconfig.get_build_info())),
    "version": before.hard_dict()["tensorflow"],
    "tf_version": tf.__version__,
}))
"""


def test_real_tensorflow_import_order_does_not_change_the_fingerprint() -> None:
    pytest.importorskip("tensorflow")
    env = {k: v for k, v in os.environ.items()}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", _ORDER_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["loaded_by_collect"] == []
    assert result["same"] is True
    assert result["build"] == result["expected_build"]
    assert result["version"].endswith(" " + result["tf_version"])


# -- whether TensorFlow can be imported, without importing it ----------------------


class _RefuseTensorFlow:
    """A meta-path finder that hides TensorFlow, as a broken or partial install does."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)")
        return None


def test_an_importable_tensorflow_is_no_problem_and_is_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment.importlib.util, "find_spec", lambda name: object())
    assert environment.tensorflow_problem() is None
    assert "tensorflow" not in sys.modules


def test_a_loaded_tensorflow_is_no_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", FakeTensorFlow())
    assert environment.tensorflow_problem() is None


def test_a_hidden_tensorflow_is_reported_with_the_distribution_that_is_installed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "meta_path", [_RefuseTensorFlow(), *sys.meta_path])
    monkeypatch.setattr(environment, "_installed", lambda names: [("tensorflow-cpu", "2.21.0")])
    problem = environment.tensorflow_problem()
    assert problem is not None
    assert problem.startswith("TensorFlow cannot be imported: tensorflow-cpu 2.21.0 is installed, yet no "
                              "'tensorflow' module can be imported (ModuleNotFoundError: ")
    assert "pip install 'pytest-tfperf[tensorflow]'" in problem and "tensorflow-cpu on CPU-only CI" in problem


def test_no_tensorflow_at_all_says_how_to_install_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # every import of it fails
    monkeypatch.setattr(environment, "_installed", lambda names: [])
    problem = environment.tensorflow_problem()
    assert problem is not None
    assert problem.startswith(f"TensorFlow cannot be imported: no distribution of it (tensorflow, tensorflow-cpu, "
                              f"...) is installed for {sys.executable}. Plain Python workloads are measured")
