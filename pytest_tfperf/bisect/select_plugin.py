"""A pytest plugin for ``tfperf-bisect``'s explained step: run only the tests that regressed.

Loaded with ``-p pytest_tfperf.bisect.select_plugin`` in the step's session,
it deselects every collected test whose id is not named in the environment
variable ``TFPERF_BISECT_ONLY`` (test ids, one a line). The user's pytest
arguments are passed on unchanged (paths, ``-k``, options): taking paths out of
them to put test ids in would need to know which arguments are option values,
while deselecting after collection selects exactly, whatever they hold.
Without the variable it does nothing.
"""

from __future__ import annotations

import os

import pytest

from pytest_tfperf.storage.baseline_store import stable_test_key

ONLY_ENV = "TFPERF_BISECT_ONLY"


def selected(node_id: str, test_ids: set[str]) -> bool:
    """Whether a collected item measures one of ``test_ids``: its own id, or one of its ``compare()`` variants
    (``test_x[variant]``, or ``test_x[param-variant]`` for a parametrized test)."""
    key = stable_test_key(node_id)
    return any(t == key or t.startswith(key + "[") or (key.endswith("]") and t.startswith(key[:-1] + "-"))
               for t in test_ids)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = {line.strip() for line in os.environ.get(ONLY_ENV, "").splitlines() if line.strip()}
    if not wanted:
        return
    keep = [item for item in items if selected(item.nodeid, wanted)]
    dropped = [item for item in items if not selected(item.nodeid, wanted)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
