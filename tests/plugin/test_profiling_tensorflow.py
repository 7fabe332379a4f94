"""The profiled pass against real TensorFlow: a tiny tf.function's op is found, and a second profiler session
is a one-line reason. Runs in a subprocess so the profiler's global state stays out of the test process."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")

SCRIPT = r"""
import json, sys
import tensorflow as tf
from pytest_tfperf.profiling.capture import profile_step

x = tf.random.uniform((96, 96))

@tf.function
def tiny(x):
    with tf.name_scope("tiny_layer"):
        return tf.reduce_sum(tf.matmul(tf.matmul(x, x), x))

logdir = sys.argv[1]
out = profile_step(lambda: tiny(x), logdir + "/a", windows=2, iterations=3)
p = out.profile
layer = p.group("layer:tiny_layer") if p else None

tf.profiler.experimental.start(logdir + "/held")
busy = profile_step(lambda: tiny(x), logdir + "/c", windows=1, iterations=1)
tf.profiler.experimental.stop()
print(json.dumps({
    "line": out.line, "run_dir": out.run_dir, "keys": [g.key for g in p.groups] if p else None,
    "layer_ms": layer.mean * 1e3 if layer else None, "families": list(layer.families) if layer else None,
    "wall_ms": p.wall_mean * 1e3 if p else None, "windows": p.windows if p else None,
    "busy": busy.line,
}))
"""


def test_a_tiny_tf_function_is_profiled_and_its_scoped_op_found(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["line"].startswith("profiled 2 x 3 iterations"), result
    assert "layer:tiny_layer" in result["keys"]
    assert result["families"][0] == "MatMul"
    assert 0 < result["layer_ms"] < result["wall_ms"] and result["windows"] == 2
    # the raw profile stays where tensorboard --logdir opens it
    assert list(Path(result["run_dir"]).glob("*.xplane.pb"))
    assert Path(result["run_dir"]).parent.parent.parent == tmp_path / "a"
    assert result["busy"].startswith("no profile: another profiler session is running")
