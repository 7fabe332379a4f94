"""The measurement loop: warm-up, calibration and timed rounds on a watched thread, with memory read between chunks."""
