"""``--tfperf-explain``: a failed verdict explained from a profiled pass of each side. ``orchestrate`` decides what a
session profiles, ``explanation`` takes the passes and attributes the change; the profiles themselves are read and
compared in ``profiling/``, the layer below."""
