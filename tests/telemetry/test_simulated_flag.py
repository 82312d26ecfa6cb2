"""Every run on a host of simulated GPUs is flagged, a CPU run too (exports read the flag)."""

from __future__ import annotations

import os
import time

from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler


def _cpu_run(n_gpus: int) -> bool:
    sampler = Sampler(FakeGpuBackend(n_gpus), lambda b: None, gpu_hz=10, host_hz=10)
    sampler.begin_run(1, os.getpid(), (), (0,))  # a CPU run: it holds no GPU
    for _ in range(3):
        sampler.tick()
    sampler.iteration(1, time.monotonic_ns(), 0.1, warmup=False)
    t = sampler.end_run(1, samples=1)
    assert t is not None
    return t.telemetry_simulated


def test_a_cpu_run_beside_simulated_gpus_is_flagged_simulated() -> None:
    assert _cpu_run(2) is True


def test_a_cpu_run_without_gpus_is_not() -> None:
    assert _cpu_run(0) is False
