"""A TensorFlow process configured before TensorFlow starts, driven one iteration at a time.

Some settings only take effect before TensorFlow initialises: the inter- and
intra-op thread pools, GPU memory growth, a GPU memory cap. A variant that
needs them runs in its own process, started with those settings. The parent
keeps a ``ConfiguredProcess`` whose ``run()`` asks the worker for one
iteration and waits for it, so the variant is still a plain callable that a
timing harness can measure and interleave with others. The round trip over a
pipe costs tens of microseconds, noise against iterations of milliseconds.

Protocol, one line each way: ``run`` -> ``ok <result>``; ``memory`` ->
``ok <json>``; ``usage`` -> ``ok <json>`` (the cores the worker's ``run``
calls got, ``machine_load.CoreUse``); ``quit``. The worker announces itself with ``ready <json>``
(the settings in effect) and answers ``error <message>`` when something
fails, ``oom <message>`` when TensorFlow ran out of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from pytest_tfperf.catalog.machine_load import CallAccount, CoreUse

WORKLOADS = ("cpu_matmul", "gpu_matmul", "gpu_train_step")


class WorkerError(RuntimeError):
    """The worker process failed to start or to answer."""


class OutOfDeviceMemory(WorkerError):
    """TensorFlow in the worker raised ``ResourceExhaustedError``."""


class ConfiguredProcess:
    """The parent's handle on one worker process."""

    def __init__(self, name: str, *, workload: str, size: int, inter_op_threads: int = 0,
                 intra_op_threads: int = 0, gpu_memory_growth: bool | None = None,
                 gpu_memory_limit_mb: int | None = None) -> None:
        if workload not in WORKLOADS:
            raise ValueError(f"unknown worker workload {workload!r}; known: {', '.join(WORKLOADS)}")
        self.name = name
        args = ["--workload", workload, "--size", str(size), "--inter-op-threads", str(inter_op_threads),
                "--intra-op-threads", str(intra_op_threads)]
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # Memory growth is the worker's explicit choice, never inherited from the parent's environment.
        env.pop("TF_FORCE_GPU_ALLOW_GROWTH", None)
        if workload.startswith("cpu_"):
            # A CPU workload must not map GPU memory at start-up, which TensorFlow does by default.
            env["CUDA_VISIBLE_DEVICES"] = "-1"
        if gpu_memory_growth is not None:
            args += ["--gpu-memory-growth", "on" if gpu_memory_growth else "off"]
        if gpu_memory_limit_mb is not None:
            args += ["--gpu-memory-limit-mb", str(gpu_memory_limit_mb)]
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "pytest_tfperf.catalog.worker", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1, env=env,
        )
        self.settings: dict[str, Any] = {}

    def wait_ready(self, timeout_s: float = 180.0) -> dict[str, Any]:
        line = self._read_line(timeout_s, "start")
        if line.startswith("oom "):
            raise OutOfDeviceMemory(line[len("oom "):])
        if not line.startswith("ready "):
            raise WorkerError(f"worker '{self.name}' did not start: {line!r}{self._stderr_tail()}")
        self.settings = json.loads(line[len("ready "):])
        return self.settings

    def run(self) -> float:
        return float(self._request("run"))

    def memory(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._request("memory"))
        return result

    def usage(self) -> CoreUse:
        """The wall, CPU and machine-idle time of the worker's ``run`` calls so far, counted in the worker."""
        fields = json.loads(self._request("usage"))
        return CoreUse(int(fields["calls"]), float(fields["wall_s"]), float(fields["cpu_s"]), float(fields["idle_s"]))

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                assert self._process.stdin is not None
                self._process.stdin.write("quit\n")
                self._process.stdin.flush()
                self._process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        for stream in (self._process.stdin, self._process.stdout, self._stderr):
            if stream is not None:
                stream.close()

    def _request(self, command: str) -> str:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(command + "\n")
            self._process.stdin.flush()
        except OSError as exc:
            raise WorkerError(f"worker '{self.name}' is gone ({exc}){self._stderr_tail()}") from exc
        line = self._read_line(None, command)
        if line.startswith("ok "):
            return line[3:]
        if line.startswith("oom "):
            raise OutOfDeviceMemory(line[len("oom "):])
        raise WorkerError(f"worker '{self.name}' failed on {command!r}: {line}{self._stderr_tail()}")

    def _read_line(self, timeout_s: float | None, what: str) -> str:
        assert self._process.stdout is not None
        if timeout_s is not None:
            import selectors

            with selectors.DefaultSelector() as sel:
                sel.register(self._process.stdout, selectors.EVENT_READ)
                if not sel.select(timeout_s):
                    self._process.kill()
                    raise WorkerError(f"worker '{self.name}' gave no answer to {what!r} within {timeout_s:.0f} s"
                                      f"{self._stderr_tail()}")
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait()
            raise WorkerError(f"worker '{self.name}' exited (code {code}) during {what!r}{self._stderr_tail()}")
        return line.rstrip("\n")

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0)
            tail = self._stderr.read()[-2000:].strip()
        except (OSError, ValueError):
            return ""
        return f"\n--- worker stderr (end) ---\n{tail}" if tail else ""


def start_all(processes: Sequence[ConfiguredProcess], timeout_s: float = 180.0) -> None:
    """Wait for workers that were started together (their TensorFlow imports overlap)."""
    try:
        for process in processes:
            process.wait_ready(timeout_s)
    except BaseException:
        for process in processes:
            process.close()
        raise


# -- the worker side ----------------------------------------------------------


def _configure(args: argparse.Namespace) -> dict[str, Any]:
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    gpus = tf.config.list_physical_devices("GPU")
    if gpus and args.gpu_memory_growth is not None:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, args.gpu_memory_growth == "on")
    if gpus and args.gpu_memory_limit_mb is not None:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=args.gpu_memory_limit_mb)])
    return {
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "gpus": len(gpus),
        "gpu_memory_growth": args.gpu_memory_growth,
        "gpu_memory_limit_mb": args.gpu_memory_limit_mb,
        "pid": os.getpid(),
    }


def _workload(name: str, size: int) -> Callable[[], float]:
    import tensorflow as tf

    if name == "gpu_train_step":  # one training step of the oversized-batch scenario, batch = size
        from pytest_tfperf.catalog.trainer import Sizes, Trainer

        with tf.device("/GPU:0"):
            trainer = Trainer(Sizes(effective_batch=size, micro_batches=1, hidden=4096))
            x, y = trainer.data(size)
        return trainer.one_big_step(x, y)

    device = "/GPU:0" if name == "gpu_matmul" else "/CPU:0"
    with tf.device(device):
        a = tf.random.stateless_normal([size, size], seed=[7, 0]) / size

    def matmul() -> float:
        with tf.device(device):
            return float(tf.reduce_sum(tf.matmul(tf.matmul(a, a), a)))

    return matmul


def _memory(gpus: int) -> dict[str, Any]:
    import tensorflow as tf

    device = "GPU:0" if gpus else "CPU:0"
    info = tf.config.experimental.get_memory_info(device)
    out: dict[str, Any] = {"device": device, "tf_current_bytes": info["current"], "tf_peak_bytes": info["peak"]}
    if gpus:
        out.update(_nvml_process_bytes())
    return out


def _nvml_process_bytes() -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            device_used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
            mine = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    if p.pid == os.getpid() and p.usedGpuMemory is not None]
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - NVML absent or refused: say so, do not fail the worker
        return {"nvml_unavailable": f"{type(exc).__name__}: {exc}"}
    return {"nvml_device_used_bytes": device_used, "nvml_process_used_bytes": int(mine[0]) if mine else None}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--inter-op-threads", type=int, default=0)
    parser.add_argument("--intra-op-threads", type=int, default=0)
    parser.add_argument("--gpu-memory-growth", choices=("on", "off"))
    parser.add_argument("--gpu-memory-limit-mb", type=int)
    args = parser.parse_args(argv)
    # The protocol owns stdout; anything TensorFlow or Keras prints goes to stderr.
    protocol: IO[str] = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr
    try:
        settings = _configure(args)
        step = _workload(args.workload, args.size)
        step()  # trace and warm up before announcing readiness
        # Counted in the worker, around the work only: the cores this process got, whatever the parent does.
        accounted = CallAccount(step)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test with it
        protocol.write(_failure_line(exc))
        return 1
    protocol.write("ready " + json.dumps(settings) + "\n")
    for line in sys.stdin:
        command = line.strip()
        try:
            if command == "run":
                protocol.write(f"ok {accounted()!r}\n")
            elif command == "memory":
                protocol.write("ok " + json.dumps(_memory(settings["gpus"])) + "\n")
            elif command == "usage":
                use = accounted.use()
                protocol.write("ok " + json.dumps({"calls": use.calls, "wall_s": use.wall_s, "cpu_s": use.cpu_s,
                                                   "idle_s": use.idle_s}) + "\n")
            elif command == "quit":
                return 0
            else:
                protocol.write(f"error unknown command {command!r}\n")
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            protocol.write(_failure_line(exc))
    return 0


def _failure_line(exc: Exception) -> str:
    import tensorflow as tf

    first = (str(exc).strip().splitlines() or [""])[0][:500]
    kind = "oom" if isinstance(exc, tf.errors.ResourceExhaustedError) else "error"
    return f"{kind} {type(exc).__name__}: {first}\n"


if __name__ == "__main__":
    sys.exit(main())
