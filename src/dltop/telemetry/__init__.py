"""Telemetry: NVML (GPU) and psutil (host) samplers."""
