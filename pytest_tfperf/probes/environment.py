"""Where a measurement was taken: the environment fingerprint.

Hard keys must match for two results to be compared (a different CPU, core
count, TF build, GPU or thread setting makes a throughput figure meaningless
as a baseline); soft keys are reported when they differ but never block a
comparison.

The fingerprint must not depend on *when* it is collected: a session may
collect it before or after the workload imports TensorFlow. So nothing here
imports TensorFlow (nor pandas or numpy): TF's version comes from the installed
distribution's metadata, its build (CUDA/cuDNN) from the ``build_info.py`` file
of the installed package, read as text, and oneDNN, allocator and thread
settings from the environment variables TensorFlow reads at start-up. The one
value taken from a loaded TensorFlow is a thread count set through
``tf.config.threading``, and only when it is not the default: such a value can
only exist once TensorFlow is loaded, and an unloaded TensorFlow has the same
default, so both orders give the same fingerprint. Collect the environment
after any ``tf.config.threading.set_*`` call the tests make.

Cost: a few milliseconds (cached per process for the parts that cannot change),
except that on a machine with an NVIDIA driver the first call starts NVML.
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import sys
from collections.abc import Iterable

from pytest_tfperf.probes import nvml
from pytest_tfperf.model import Environment

# Distributions that install the ``tensorflow`` module.
_TF_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tensorflow-macos",
    "tensorflow-aarch64",
    "tensorflow-rocm",
    "intel-tensorflow",
    "tf-nightly",
    "tf-nightly-cpu",
)

# Environment variables that change what TensorFlow computes with or how memory
# is counted: a change makes old figures incomparable.
HARD_ENV_VARS = (
    "TF_ENABLE_ONEDNN_OPTS",  # oneDNN kernels and the CPU allocator
    "TF_CPU_ALLOCATOR_USE_BFC",  # counts allocations under 256 KiB
    "TF_ONEDNN_USE_SYSTEM_ALLOCATOR",  # TF allocator counters read zero
    "TF_GPU_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",  # NVML figures: whole card vs grown pool
    "TF_XLA_FLAGS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "OMP_NUM_THREADS",
)
_LOGGING_ENV_VARS = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_MIN_VLOG_LEVEL", "TF_CPP_VMODULE")
_SOFT_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
# Terraform also uses the TF_ prefix; its variables say nothing about TensorFlow
# and some hold credentials (TF_TOKEN_*, TF_VAR_*), which must never reach a
# results file that is committed to git.
_TERRAFORM_PREFIXES = (
    "TF_VAR_", "TF_CLI_", "TF_LOG", "TF_INPUT", "TF_DATA_DIR", "TF_WORKSPACE", "TF_IN_AUTOMATION",
    "TF_REGISTRY_", "TF_PLUGIN_CACHE_", "TF_TOKEN_", "TF_IGNORE", "TF_STATE_", "TF_APPEND_USER_AGENT",
)
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "KEY")
_BOOLEAN_ENV_VARS = frozenset(
    {"TF_ENABLE_ONEDNN_OPTS", "TF_CPU_ALLOCATOR_USE_BFC", "TF_ONEDNN_USE_SYSTEM_ALLOCATOR", "TF_FORCE_GPU_ALLOW_GROWTH"}
)
_BOOLEAN_WORDS = {"1": "true", "true": "true", "0": "false", "false": "false"}  # what TF's ReadBoolFromEnvVar accepts


def collect_environment() -> Environment:
    """The fingerprint of this process's machine and settings. Never imports TensorFlow."""
    hard = dict(_static_hard())
    soft = dict(_static_soft())
    for name in HARD_ENV_VARS:
        hard[f"env.{name}"] = _env_value(name)
    hard.update(_tf_api_threads())
    hard.update(_gpu_keys(soft))
    for name, value in os.environ.items():
        if name in _SOFT_ENV_VARS or _is_soft_tensorflow_variable(name):
            soft[f"env.{name}"] = value
    return Environment(hard=tuple(sorted(hard.items())), soft=tuple(sorted(soft.items())))


def _is_soft_tensorflow_variable(name: str) -> bool:
    return (
        name.startswith("TF_")
        and name not in HARD_ENV_VARS
        and name not in _LOGGING_ENV_VARS
        and not name.startswith(_TERRAFORM_PREFIXES)
        and not any(word in name for word in _SECRET_WORDS)
    )


@functools.lru_cache(maxsize=1)
def _static_hard() -> tuple[tuple[str, str], ...]:
    return (
        ("os", platform.system() or sys.platform),
        ("arch", platform.machine() or "unknown"),
        ("cpu.model", _cpu_model()),
        ("cpu.cores", str(_cores_available())),
        ("cpu.quota", _cpu_quota()),
        ("python", f"{sys.implementation.name} {sys.version_info.major}.{sys.version_info.minor}"),
        ("tensorflow", _tf_distributions()),
        ("tensorflow.build", _tf_build()),
    )


@functools.lru_cache(maxsize=1)
def _static_soft() -> tuple[tuple[str, str], ...]:
    return (
        ("kernel", platform.release()),
        ("hostname", platform.node()),
        ("python.version", platform.python_version()),
        ("numpy", _version_or("numpy", "not installed")),
        ("ram.total_gib", _ram_total_gib()),
        ("pytest_tfperf", _version_or("pytest-tfperf", "not installed")),
    )


def _env_value(name: str) -> str:
    raw = os.environ.get(name)
    if raw is None:
        return "unset"
    value = raw.strip()
    if name in _BOOLEAN_ENV_VARS:
        return _BOOLEAN_WORDS.get(value.lower(), value)
    return value


def _tf_api_threads() -> dict[str, str]:
    keys = {"tf.threading.intra_op": "default", "tf.threading.inter_op": "default"}
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return keys
    try:
        intra = int(tf.config.threading.get_intra_op_parallelism_threads())
        inter = int(tf.config.threading.get_inter_op_parallelism_threads())
    except Exception:  # a partly imported or stand-in module: treat as the default
        return keys
    if intra:
        keys["tf.threading.intra_op"] = str(intra)
    if inter:
        keys["tf.threading.inter_op"] = str(inter)
    return keys


def _gpu_keys(soft: dict[str, str]) -> dict[str, str]:
    gpus = nvml.gpu_inventory()
    problem = nvml.gpu_inventory_problem()
    if problem is not None:
        unknown = f"unknown ({problem})"
        return {"gpu.count": unknown, "gpu.models": unknown, "gpu.driver": unknown}
    if not gpus:
        return {"gpu.count": "0", "gpu.models": "none", "gpu.driver": "none"}
    soft["gpu.uuids"] = ", ".join(g.uuid for g in gpus)
    soft["gpu.memory_total_bytes"] = ", ".join(str(g.memory_total_bytes) for g in gpus)
    return {
        "gpu.count": str(len(gpus)),
        "gpu.models": ", ".join(g.name for g in gpus),
        "gpu.driver": ", ".join(sorted({g.driver_version for g in gpus})),
    }


def _cpu_model() -> str:
    if sys.platform.startswith("linux"):
        try:
            fields = _first_cpuinfo_block()
        except OSError:
            fields = {}
        for key in ("model name", "Model", "Processor", "cpu"):
            if fields.get(key):
                return fields[key]
        if "CPU implementer" in fields and "CPU part" in fields:
            return f"implementer {fields['CPU implementer']} part {fields['CPU part']}"
    return platform.processor() or platform.machine() or "unknown"


def _first_cpuinfo_block() -> dict[str, str]:
    # Only the first processor's block: /proc/cpuinfo is slow to produce in full on large machines.
    fields: dict[str, str] = {}
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                if fields:
                    break
                continue
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields


def _cores_available() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _cpu_quota() -> str:
    """The cgroup CPU quota, in cores, of the cgroup at /sys/fs/cgroup (a container's own); 'none' without one."""
    v2 = _read_text("/sys/fs/cgroup/cpu.max")  # "max 100000" or "150000 100000"
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return "none" if quota == "max" else _cores(quota, period or "100000")
    v1 = _read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")  # "-1" without a quota
    if v1 is not None:
        return "none" if v1.startswith("-") else _cores(v1, _read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or "")
    return "none"


def _cores(quota: str, period: str) -> str:
    try:
        return f"{int(quota) / int(period):.2f} cores"
    except (ValueError, ZeroDivisionError):
        return "unknown"


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _version_or(distribution: str, missing: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return missing


def _tf_distributions() -> str:
    found = _installed(_TF_DISTRIBUTIONS)
    return "; ".join(f"{name} {version}" for name, version in found) if found else "not installed"


def _installed(names: Iterable[str]) -> list[tuple[str, str]]:
    found = []
    for name in names:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def tensorflow_problem() -> str | None:
    """Why ``import tensorflow`` cannot work in this process, or None when a ``tensorflow`` module is there.

    Looks without importing (``importlib.util.find_spec``): cheap, and safe to
    call from the plugin before any test has imported TensorFlow. A module can
    be missing although a distribution's metadata is installed (a broken
    install, or an import hook that hides it); the answer then names the
    distributions found.
    """
    if sys.modules.get("tensorflow") is not None:
        return None  # imported already (or a stand-in a test put there)
    if "tensorflow" in sys.modules:  # None there makes every import of it fail
        spec, refused = None, " (sys.modules['tensorflow'] is None)"
    else:
        spec, refused = _find_tensorflow()
    if spec is not None:
        return None
    found = _installed(_TF_DISTRIBUTIONS)
    if found:
        why = (f"{', '.join(f'{name} {version}' for name, version in found)} is installed, yet no 'tensorflow' "
               f"module can be imported{refused}")
    else:
        why = f"no distribution of it (tensorflow, tensorflow-cpu, ...) is installed for {sys.executable}"
    return (
        f"TensorFlow cannot be imported: {why}. Plain Python workloads are measured without it, but TensorFlow "
        "workloads, the TF allocator peaks and trace counts need it. Install it beside pytest-tfperf: "
        "pip install 'pytest-tfperf[tensorflow]', or the build for your platform instead (tensorflow-cpu on "
        "CPU-only CI, a much smaller download; tensorflow-macos, tensorflow-rocm, intel-tensorflow), "
        "never two of them: they share one tensorflow/ directory."
    )


def _find_tensorflow() -> tuple[object | None, str]:
    try:
        return importlib.util.find_spec("tensorflow"), ""
    except ImportError as exc:  # an import hook that refuses it
        return None, f" ({type(exc).__name__}: {exc})"


def _tf_build() -> str:
    """CUDA/cuDNN/ROCm versions TensorFlow was built with, read from its build_info.py without importing it."""
    # PathFinder looks at the installed files only, never at sys.modules (where a test may have put a stand-in).
    spec = importlib.machinery.PathFinder.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "python", "platform", "build_info.py")
        try:
            with open(path, encoding="utf-8") as fh:
                info = parse_build_info(fh.read())
        except (OSError, ValueError, SyntaxError):
            continue
        return describe_build(info)
    return "unknown"


def parse_build_info(source: str) -> dict[str, object]:
    """The ``build_info`` mapping of TensorFlow's generated ``build_info.py``, parsed as data."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "build_info" for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # collections.OrderedDict([(k, v), ...])
                return dict(ast.literal_eval(value.args[0]))
            return dict(ast.literal_eval(value))
    raise ValueError("build_info.py has no build_info assignment")


def describe_build(info: dict[str, object]) -> str:
    if info.get("is_cuda_build"):
        return f"cuda {info.get('cuda_version', '?')}, cudnn {info.get('cudnn_version', '?')}"
    if info.get("is_rocm_build"):
        return f"rocm {info.get('rocm_version', '?')}"
    return "cpu"


def _ram_total_gib() -> str:
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        import psutil

        total = psutil.virtual_memory().total
    return str(round(total / 2**30))
