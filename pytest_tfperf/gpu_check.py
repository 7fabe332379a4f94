"""The GPU self-check's documented entry point, ``python -m pytest_tfperf.gpu_check``.

It lives in ``cli.gpu_selfcheck``.
"""

from __future__ import annotations

import sys

from pytest_tfperf.cli.gpu_selfcheck import main

if __name__ == "__main__":
    sys.exit(main())
