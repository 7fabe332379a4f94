"""The command-line tools: tfperf-compare, tfperf-report and the GPU self-check."""
