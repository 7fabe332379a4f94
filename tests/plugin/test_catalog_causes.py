"""The catalog's explanations name their causes: the issue's three examples, on real TensorFlow.

Each anti-pattern is explained against its fix as ``--tfperf-explain`` explains a failed
``compare(reference=fix)`` (``explain_comparison`` of ``benchmarks/validation/causes.py``): the allocation op in
``allocation_in_loop`` as the top cause, the sequential map in ``input_pipeline`` among the stages named.
``session_churn``'s cost, the Session's construction, is no op TensorFlow's profiler traces: the explanation
must say so by naming no op for it and leaving the change in its remainder, not by blaming the graph's
MatMul. ``benchmarks/catalog_causes.py`` runs every entry. It runs in a subprocess, so that neither
TensorFlow nor the profiler's state stays in the test process (an in-process pytest run of another test
would then measure the calibration workload).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("allocation_in_loop", "input_pipeline", "session_churn")

CHILD = """
import json, sys
from validation.causes import explain_comparison, named_anywhere, names_its_cause, top_cause
from pytest_tfperf.catalog.scenarios import load
from pytest_tfperf.catalog.sizes import CatalogSize

out = {}
for key in sys.argv[2:]:
    scenario = load(key).build(CatalogSize.SMALL)
    try:
        c = scenario.comparisons[0]  # the gated one: the raw mistake against the fix
        d = explain_comparison(key, scenario.variant(c.anti).run, scenario.variant(c.fix).run, sys.argv[1],
                               budget_s=1.0)
    finally:
        scenario.close()
    out[key] = {"profiled": "causes" in d, "top": names_its_cause(key, d), "anywhere": named_anywhere(key, d),
                "top_cause": top_cause(d), "lines": d["lines"]}
print(json.dumps(out))
"""


def test_the_explanation_names_the_entrys_cause(tmp_path: Path) -> None:
    path = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])  # validation.causes
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), *KEYS], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in KEYS:
        r = found[key]
        why = f"{key}: top cause {r['top_cause']!r}\n" + "\n".join(r["lines"])
        assert r["profiled"], why  # both sides were profiled
        if key == "input_pipeline":
            # At CI size its effect is 0.3-0.4 ms in 3.5 ms on this 2-core VM (the fix's parallel map finds no
            # idle core), as small as a layer's own noise, so the top cause is not always it (2 of 3 processes
            # in benchmarks/results/catalog_causes.md); the explanation names the sequential map in all of them.
            assert r["anywhere"], why
        else:
            assert r["top"], why
        if key == "session_churn":  # and it says where the time went instead: outside every traced op
            assert any("outside every op and stage" in line for line in r["lines"]), why
