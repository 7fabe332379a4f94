"""How much one training step's TF-allocator peak moves from call to call at a fixed batch size.

Run:   .venv/bin/python benchmarks/peak_spread.py            (about 10 seconds on 2 cores)

The catalog's oversized-batch step (``scenarios/oversized_batch.py``) is
called ``--calls`` times per batch size, each call measured from a reset of the
allocator's peak (``measure_peak_bytes``). The spread is why a search for the
largest batch within a budget must probe the worst of several calls
(``measure_peak_bytes(step, device, calls=3)``): the executor runs independent
ops in whatever order its threads reach them, and the peak follows.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_tfperf.catalog.batch_budget import measure_peak_bytes  # noqa: E402
from pytest_tfperf.catalog.scenarios.oversized_batch import Trainer, sizes_for  # noqa: E402
from pytest_tfperf.catalog.sizes import CatalogSize  # noqa: E402

MIB = 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="calls per batch size (default 30)")
    parser.add_argument("--size", choices=[s.value for s in CatalogSize], default=CatalogSize.SMALL.value,
                        help="catalog size whose step is measured (default small, what CI runs)")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be at least 1")

    sizes = sizes_for(CatalogSize(args.size))
    trainer = Trainer(sizes)
    x, y = trainer.data(sizes.effective_batch)
    trainer.step_at(1, x, y)()  # trace once; the signature has a None batch dimension
    full = sizes.effective_batch
    print(f"TF-allocator peak on CPU:0 of one training step, {args.calls} calls per batch size ({args.size} catalog)")
    for batch in (full // 4, full // 2, full * 3 // 4, full):
        step = trainer.step_at(batch, x, y)
        peaks = sorted(measure_peak_bytes(step) for _ in range(args.calls))
        print(f"batch {batch:>6}: {peaks[0] / MIB:6.1f} to {peaks[-1] / MIB:6.1f} MiB "
              f"(median {peaks[len(peaks) // 2] / MIB:.1f}, max/min {peaks[-1] / peaks[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
