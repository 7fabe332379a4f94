"""Why a workload is slow or failed: input-bound, memory growth, retracing, NaNs, stalls, out of memory."""
