"""The GPU self-check's documented entry point, ``python -m pytest_tfperf.gpu_check`` (it lives in ``cli.gpu_check``)."""

from __future__ import annotations

import sys

from pytest_tfperf.cli.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
