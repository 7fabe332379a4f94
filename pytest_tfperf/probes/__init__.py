"""Probes of the machine: peak memory (host, TensorFlow, GPU through NVML), GPU busy, the environment fingerprint."""
