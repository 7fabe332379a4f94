"""Repository-wide pytest configuration.

``pytester`` lets the plugin's own tests run pytest sessions in a temporary
directory, the way a user would.
"""

import os

# TensorFlow's CPU allocator counters exist only with its BFC allocator: on CPUs without AVX-512
# (oneDNN off by default, such as the AMD EPYC CI runner) the plain allocator keeps none, and the
# tests that check TF-allocator figures need them. Set before any test imports TensorFlow; the
# subprocesses the tests start inherit it. tests/unit/test_memory_probes.py checks both allocators.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

pytest_plugins = ["pytester"]
