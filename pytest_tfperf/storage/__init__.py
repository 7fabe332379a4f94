"""Files the plugin reads and writes: baselines, the run history, the results document, the model as JSON."""
