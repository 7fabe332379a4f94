"""The real-model suite at full size: ``pytest --tfperf benchmarks/test_real_models.py`` (a few minutes on 2 cores).

The tests live in ``pytest_tfperf.catalog.real_models_suite``; this module
runs them at full size, keras.applications models included.
"""

from pytest_tfperf.catalog.real_models_suite import (  # noqa: F401 - collected from here
    test_healthy_real_workload_draws_no_warning,
    test_true_positive_keras_recompile_retraces,
    test_true_positive_kept_outputs_leak_256_kib_per_iteration,
    test_true_positive_unprefetched_pipeline_waits_for_input,
)
