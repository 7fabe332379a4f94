"""The paired gate (``--tfperf-against``) on a GPU machine: A/A and planted +10% sessions, alternating.

Run from the repository root on a machine with an NVIDIA GPU and PyTorch (no TensorFlow needed: the plugin
measures any Python callable, and it loads from this source tree)::

    OUT=/some/folder python benchmarks/gpu_paired_gate.py --seconds 400

Two directories hold five GPU tests, as two checkouts would (``base/`` and ``change/``):

* ``test_matmul_bf16``: 20 bf16 4096x4096 matmuls a call (compute-bound);
* ``test_matmul_small``: 60 fp32 512x512 matmuls a call (launch-bound: many short kernels);
* ``test_mlp_train``: 10 steps of a 3-layer MLP (forward, backward, SGD) a call;
* ``test_conv``: 10 conv2d forwards (3x3, 64 to 128 channels) over a 64x64x64x64 batch a call;
* ``test_h2d``: 10 copies of a pinned 16 MiB host tensor to the GPU, each followed by one matmul.

A/A sessions: both trees identical; every "regressed" verdict is a false alarm. Planted sessions: ``change/``
does 10% more real work per call (22 matmuls instead of 20, 11 steps instead of 10; the items per call
stay), so its
throughput is about 9% lower (1/1.1). Each session is one CI job:
``pytest --tfperf --tfperf-against=../base --no-tfperf-explain`` in ``change/`` (the explanation needs
TensorFlow's profiler). First ``--cost`` times a plain ``pytest --tfperf`` and a paired A/A session in
turns (the cost ratio); then sessions alternate A/A and planted until ``--seconds`` have passed.

Without a GPU (or without PyTorch) the same tests run NumPy on the CPU, for a dry run of the script itself;
those figures say nothing about a GPU. Writes ``$OUT/gpu_paired_gate.json`` after every session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from importlib.metadata import entry_points
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from paired_pipelines import verdicts  # noqa: E402  (the throughput verdicts of a --tfperf-json file)

# Where the plugin is not installed (the GPU machine), PYTEST_PLUGINS loads it from the source tree, in each
# session and in the partner's sessions; where it is, naming it again would register it twice.
INSTALLED = any(ep.value.startswith("pytest_tfperf") for ep in entry_points(group="pytest11"))

SUITE = '''
import numpy as np

PLANT = {plant}  # 1.0 in base/, 1.1 in a planted change/: real extra work, items per call unchanged

try:
    import torch
    GPU = torch.cuda.is_available()
except ImportError:
    GPU = False


def _n(reps):  # every count is a multiple of 10, so that the plant is exactly 10% more work
    return int(round(reps * PLANT))


def _sync():
    if GPU:
        torch.cuda.synchronize()


def _rand(*shape, dtype=None):
    if GPU:
        return torch.randn(*shape, device="cuda", dtype=dtype or torch.float32)
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _mm(a, b):
    return a @ b


def test_matmul_bf16(tfperf):
    n = 4096 if GPU else 256
    a = _rand(n, n, dtype=torch.bfloat16 if GPU else None)
    b = _rand(n, n, dtype=torch.bfloat16 if GPU else None)
    reps = _n(20)

    def step():
        for _ in range(reps):
            c = _mm(a, b)
        _sync()
        return c

    tfperf(step, items=20)


def test_matmul_small(tfperf):
    a, b = _rand(512, 512), _rand(512, 512)
    reps = _n(60 if GPU else 20)

    def step():
        c = a
        for _ in range(reps):
            c = _mm(b, a)
        _sync()
        return c

    tfperf(step, items=60)


def test_mlp_train(tfperf):
    steps = _n(10)
    if GPU:
        model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                    torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = _rand(512, 1024), torch.randint(0, 10, (512,), device="cuda")

        def step():
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
            _sync()
    else:
        w, x = _rand(256, 256), _rand(128, 256)

        def step():
            for _ in range(steps):
                np.tanh(x @ w) @ w.T

    tfperf(step, items=10 * 512)


def test_conv(tfperf):
    reps = _n(10)
    if GPU:
        x, w = _rand(64, 64, 64, 64), _rand(128, 64, 3, 3)

        def step():
            for _ in range(reps):
                y = torch.nn.functional.conv2d(x, w, padding=1)
            _sync()
            return y
    else:
        x = _rand(64, 64, 64)

        def step():
            for _ in range(reps):
                y = np.fft.rfft2(x)
            return y

    tfperf(step, items=10 * 64)


def test_h2d(tfperf):
    reps = _n(10)
    if GPU:
        host = torch.randn(2048, 2048).pin_memory()
        w = _rand(2048, 2048)

        def step():
            for _ in range(reps):
                y = host.to("cuda", non_blocking=True) @ w
            _sync()
            return y
    else:
        host, w = _rand(512, 512), _rand(512, 512)

        def step():
            for _ in range(reps):
                y = host.copy() @ w
            return y

    tfperf(step, items=10)
'''


def make_trees(root: Path, plant: float) -> None:
    for tree, factor in (("base", 1.0), ("change", 1.0 + plant)):
        (root / tree).mkdir(parents=True, exist_ok=True)
        (root / tree / "test_gpu_suite.py").write_text(SUITE.replace("{plant}", repr(factor)))
        (root / tree / "pytest.ini").write_text("[pytest]\nfilterwarnings = ignore\n")


def pytest_run(cwd: Path, *args: str) -> tuple[float, int, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    if not INSTALLED:
        env["PYTEST_PLUGINS"] = "pytest_tfperf.plugin"
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tfperf", *args],
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = 124, str(exc.stdout or "")
    return time.monotonic() - start, code, out[-6000:]


def session(root: Path, label: str, i: int, out_dir: Path) -> dict[str, Any]:
    out = out_dir / f"{label}-{i}.json"
    wall, code, tail = pytest_run(root / "change", "--tfperf-against=../base", "--no-tfperf-explain",
                                  f"--tfperf-json={out}")
    rows = verdicts(out) if out.exists() else []
    said = [line[:400] for line in tail.splitlines() if "confirmed" in line or "regressed" in line]
    return {"label": label, "i": i, "wall_s": wall, "exit": code, "rows": rows, "said": said,
            "tail": tail if code not in (0, 1) or not rows else ""}


def summary(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [r for s in sessions for r in s["rows"]]
    mdes = [r["mde"] for r in rows if r["mde"] is not None and r["mde"] != float("inf")]
    return {"sessions": len(sessions), "verdicts": len(rows),
            "regressed": sum(r["status"] == "regressed" for r in rows),
            "improved": sum(r["status"] == "improved" for r in rows),
            "noisy": sum(r["status"] == "noisy" for r in rows),
            "stated_limit_median": statistics.median(mdes) if mdes else None,
            "stated_limit_max": max(mdes) if mdes else None,
            "changes": sorted(round(r["change"], 4) for r in rows if r["change"] is not None),
            "median_wall_s": statistics.median(s["wall_s"] for s in sessions) if sessions else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=400, help="stop starting sessions after this long")
    parser.add_argument("--cost", type=int, default=2, help="plain/paired pairs on unchanged code, first")
    parser.add_argument("--aa-only", action="store_true", help="no planted sessions")
    parser.add_argument("--planted-only", action="store_true", help="no A/A sessions after the cost pairs (more "
                        "planted verdicts in a short lease)")
    parser.add_argument("--plant", type=float, default=0.10, help="extra work per call in planted sessions")
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "gpu-paired-out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        import torch  # noqa: F401  (only to say which backend the tests ran on)
        backend = "torch-cuda" if torch.cuda.is_available() else "numpy-cpu (torch without CUDA)"
    except ImportError:
        backend = "numpy-cpu (no torch)"
    result: dict[str, Any] = {"backend": backend, "plant": args.plant,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "aa_sessions": [], "planted_sessions": []}
    deadline = time.monotonic() + args.seconds
    with tempfile.TemporaryDirectory(prefix="tfperf-gpu-paired-") as tmp:
        aa_root, planted_root = Path(tmp) / "aa", Path(tmp) / "planted"
        make_trees(aa_root, 0.0)
        make_trees(planted_root, args.plant)
        cost = []
        for i in range(args.cost):  # plain and paired in turns, on unchanged code: the cost ratio
            plain, _, _ = pytest_run(aa_root / "change")
            s = session(aa_root, "aa", 100 + i, out_dir)
            result["aa_sessions"].append(s)
            cost.append({"plain_s": plain, "paired_s": s["wall_s"], "ratio": s["wall_s"] / plain})
            print(f"cost {i}: plain {plain:.1f} s, paired {s['wall_s']:.1f} s", flush=True)
        result["cost"] = {"pairs": cost, "median_ratio": statistics.median(c["ratio"] for c in cost) if cost else None}
        designs: tuple[tuple[str, Path], ...] = (("aa", aa_root), ("planted", planted_root))
        if args.aa_only or args.planted_only:
            designs = (("aa", aa_root),) if args.aa_only else (("planted", planted_root),)
        i = crashed = 0
        while time.monotonic() < deadline and crashed < 2:
            for label, root in designs:
                s = session(root, label, i, out_dir)
                result[f"{label}_sessions"].append(s)
                print(f"{label} {i}: {[(r['test'][5:], r['status'], round(r['change'], 3)) for r in s['rows']]} "
                      f"{s['wall_s']:.0f} s exit {s['exit']}", flush=True)
                if not s["rows"]:
                    print(s["tail"][-3000:], flush=True)
                    crashed += 1
                result["aa"], result["planted"] = (summary(result["aa_sessions"]),
                                                   summary(result["planted_sessions"]))
                (out_dir / "gpu_paired_gate.json").write_text(json.dumps(result, indent=1) + "\n")
            i += 1
    result["aa"], result["planted"] = summary(result["aa_sessions"]), summary(result["planted_sessions"])
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (out_dir / "gpu_paired_gate.json").write_text(json.dumps(result, indent=1) + "\n")
    for key in ("aa", "planted"):
        print(key, json.dumps({k: v for k, v in result[key].items() if k != "changes"}))
    print(f"cost: paired / plain, median of {len(cost)}: {result['cost']['median_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
