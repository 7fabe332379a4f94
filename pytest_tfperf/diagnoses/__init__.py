"""Why a workload is slow or failed: the GPU waiting, memory growth, retracing, NaNs, stalls, out of memory (input-bound: ``input_bound``)."""
