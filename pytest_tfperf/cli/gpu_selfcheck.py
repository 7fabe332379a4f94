"""GPU self-check: ``python -m pytest_tfperf.gpu_check [--json PATH]``.

On a machine with an NVIDIA GPU it runs every GPU path of the plugin that the
installed libraries allow and prints a table of what ran and what it found:

* with TensorFlow's CUDA build: a known tensor on ``GPU:0`` read by TensorFlow's
  allocator probe within 1%; ``tf.test.experimental.sync_devices`` timing a
  known amount of GPU work (4x the matmuls must take about 4x the time); an
  out-of-memory error under a 256 MiB memory cap turned into a test failure;
  catalog scenario 11 (GPU memory growth and caps);
* with CuPy or PyTorch (TensorFlow or not): the NVML checks. A known 1 GiB
  allocation read by the NVML probe; then the plugin itself, run by pytest on a
  small generated test file: the same allocation in the results JSON, a device
  budget that must fail, a saturated step against an input-starved one (NVML
  busy fraction and the "GPU waits" diagnosis), a ``min_gpu_busy_fraction``
  budget that must fail; and the cost of the NVML sampler on a GPU step (time
  ratio with the sampler on and off).

Without a GPU it says "no GPU" and why, and exits 0: it runs, as part of the
test suite, on machines that have none. Exit status 1 means a check failed.
Nothing is imported at module level beyond the standard library and the
plugin's own light modules: TensorFlow, CuPy and PyTorch only when a GPU is
there. The checks themselves are ``gpu_nvml_checks``, ``gpu_plugin_checks``
and ``gpu_tf_checks``; this module runs them and prints the table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_tfperf.cli.gpu_nvml_checks import (
    FAIL,
    GIB,
    INFO,
    NOT_RUN,
    OPS_ENV,
    PASS,
    Check,
    available_libraries,
    check_known_allocation,
    check_sampler_cost,
    guarded,
    load_ops,
)
from pytest_tfperf.cli.gpu_plugin_checks import run_plugin_checks
from pytest_tfperf.cli.gpu_tf_checks import tensorflow_checks
from pytest_tfperf.probes import nvml

SCHEMA = "pytest-tfperf/gpu-check"


# -- the whole check ------------------------------------------------------------------------------

ALL_CHECKS = (
    ("GPU inventory (NVML)", "NVML"),
    ("NVML probe reads a known 1 GiB allocation", "CuPy or PyTorch"),
    ("plugin: 1 GiB allocation in the results JSON", "CuPy or PyTorch"),
    ("plugin: max_peak_device_bytes=256 MiB fails", "CuPy or PyTorch"),
    ("plugin: GPU busy, saturated vs input-starved step", "CuPy or PyTorch"),
    ("plugin: min_gpu_busy_fraction=0.5 fails a starved step", "CuPy or PyTorch"),
    ("NVML sampler cost on a GPU step (on/off)", "CuPy or PyTorch"),
    ("TF allocator reads a 256 MiB tensor on GPU:0", "TensorFlow (CUDA)"),
    ("sync_devices times known GPU work", "TensorFlow (CUDA)"),
    ("GPU out-of-memory under a 256 MiB cap fails the test", "TensorFlow (CUDA)"),
    ("catalog scenario 11 (GPU memory config)", "TensorFlow (CUDA)"),
)


def no_gpu_reason() -> str | None:
    """Why this machine has no GPU to check (None when NVML lists one)."""
    if not nvml.nvidia_driver_visible():
        return "no NVIDIA driver on this machine (no /proc/driver/nvidia/version, /dev/nvidiactl or /dev/dxg)"
    if nvml.gpu_inventory():
        return None
    problem = nvml.gpu_inventory_problem()
    if problem:
        return problem
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "NVML sees no GPU visible to this process" + (
        f" (CUDA_VISIBLE_DEVICES={setting!r})" if setting is not None else "")


def run_checks(*, ops_spec: str = "", workdir: Path | None = None, plugin_budget_s: float = 1.0,
               cost_pairs: int = 12, cost_calls: int = 60) -> tuple[list[Check], dict[str, Any]]:
    """Every check this machine allows, and facts about the machine."""
    facts: dict[str, Any] = {"python": sys.version.split()[0], "libraries": available_libraries()}
    reason = no_gpu_reason()
    if reason is not None:
        facts["gpu"] = None
        facts["no_gpu"] = reason
        return [Check("GPU inventory (NVML)", "NVML", NOT_RUN, f"no GPU: {reason}")] + [
            Check(n, needs, NOT_RUN, "no GPU") for n, needs in ALL_CHECKS[1:]], facts
    gpus = nvml.gpu_inventory()
    facts["gpu"] = [{"label": g.label, "name": g.name, "memory_total_bytes": g.memory_total_bytes,
                     "driver": g.driver_version, "uuid": g.uuid} for g in gpus]
    first = gpus[0]
    checks = [Check("GPU inventory (NVML)", "NVML", INFO,
                    f"{len(gpus)} GPU(s); GPU:0 {first.name}, {first.memory_total_bytes / GIB:,.0f} GiB, "
                    f"driver {first.driver_version}")]
    own_dir = workdir is None
    work = Path(tempfile.mkdtemp(prefix="tfperf-gpu-check-")) if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    libraries = facts["libraries"]
    ops: Any = None
    why_no_ops = ""
    if ops_spec or libraries["torch"] or libraries["cupy"]:
        try:
            ops = load_ops(ops_spec)
            facts["gpu_ops"] = getattr(ops, "name", ops_spec)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            why_no_ops = f"CuPy/PyTorch could not be used: {type(exc).__name__}: {exc}"
    else:
        why_no_ops = "needs CuPy or PyTorch (neither is installed)"
    nvml_names = [n for n, needs in ALL_CHECKS if needs == "CuPy or PyTorch"]
    if ops is None:
        checks += [Check(n, "CuPy or PyTorch", NOT_RUN, why_no_ops) for n in nvml_names]
    else:
        checks.append(guarded(nvml_names[0], "CuPy or PyTorch", lambda: check_known_allocation(ops)))
        plugin_checks, run = run_plugin_checks(work, ops_spec, budget_s=plugin_budget_s)
        facts["plugin_run"] = {"returncode": run.returncode, "seconds": round(run.seconds, 1),
                               "output_tail": run.output.strip().splitlines()[-60:]}
        checks += plugin_checks
        checks.append(guarded(nvml_names[-1], "CuPy or PyTorch",
                               lambda: check_sampler_cost(ops, pairs=cost_pairs, calls=cost_calls)))
    tf_names = [n for n, needs in ALL_CHECKS if needs == "TensorFlow (CUDA)"]
    if not libraries["tensorflow"]:
        checks += [Check(n, "TensorFlow (CUDA)", NOT_RUN, "TensorFlow is not installed") for n in tf_names]
    else:
        os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # leave the GPU to the subprocess checks
        try:
            tf = importlib.import_module("tensorflow")
        except Exception as exc:  # noqa: BLE001
            checks += [Check(n, "TensorFlow (CUDA)", NOT_RUN, f"import tensorflow failed: {type(exc).__name__}: {exc}")
                       for n in tf_names]
        else:
            facts["tensorflow"] = getattr(tf, "__version__", "?")
            checks += tensorflow_checks(tf, work)
    if own_dir:
        facts["workdir"] = str(work)
    return checks, facts


def format_table(checks: Sequence[Check]) -> list[str]:
    header = ("check", "needs", "result", "found")
    rows = [(c.name, c.needs, c.status, c.found) for c in checks]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells[:3], widths)) + "  " + cells[3]

    return [line(header), line(["-" * w for w in widths] + ["-----"])] + [line(r) for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_tfperf.gpu_check",
                                     description="Run the plugin's GPU paths on this machine's GPU and say what they found.")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--workdir", metavar="DIR", help="where the generated test files and their results go "
                                                         "(default: a new temporary directory)")
    parser.add_argument("--ops", default=os.environ.get(OPS_ENV, ""),
                        help="GPU library for the NVML checks: torch, cupy (default: whichever is installed)")
    parser.add_argument("--plugin-budget", type=float, default=1.0, metavar="SECONDS",
                        help="steady-state seconds per test in the plugin run (default 1)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    checks, facts = run_checks(ops_spec=args.ops, workdir=Path(args.workdir) if args.workdir else None,
                               plugin_budget_s=args.plugin_budget)
    print("pytest-tfperf GPU self-check")
    if facts.get("gpu") is None:
        print(f"no GPU: {facts.get('no_gpu')}")
    for text in format_table(checks):
        print(text)
    failed = [c for c in checks if c.status == FAIL]
    ran = [c for c in checks if c.status in (PASS, FAIL)]
    print(f"{len(ran)} check(s) ran, {len(failed)} failed, {len(checks) - len(ran) - 1} not run "
          f"({time.monotonic() - started:.0f} s)" if facts.get("gpu") else "nothing to check without a GPU")
    if args.json:
        from pytest_tfperf.storage.atomic_files import atomic_write_text
        from pytest_tfperf.storage.documents import utc_timestamp

        document = {"schema": SCHEMA, "schema_version": 1, "created_at": utc_timestamp(), "machine": facts,
                    "checks": [c.to_dict() for c in checks], "failed": len(failed)}
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
        print(f"results written to {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
