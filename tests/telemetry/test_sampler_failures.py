"""A failing reading is skipped, logged once per cause and counted, never fatal."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from dltop.store import Store, memory_db
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.sampler import Sampler
from dltop.telemetry.values import GpuSample
from dltop.telemetry.windows import Batch


class FlakyGpus(FakeGpuBackend):
    """FAKE hardware: simulated GPUs whose GPU 1 raises on chosen ticks, like a lost GPU."""

    def __init__(self, n: int, failing: set[int]) -> None:
        super().__init__(n)
        self.failing = failing
        self.calls = 0
        self.reads = threading.Event()

    def sample(self, index: int, slow: bool) -> GpuSample:
        if index == 1:
            self.calls += 1
            if self.calls >= 8:
                self.reads.set()
            if self.calls in self.failing:
                raise RuntimeError("GPU is lost")
        return super().sample(index, slow)


def test_failing_reads_are_counted_per_run_and_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    sampler = Sampler(FlakyGpus(2, failing={2, 3, 5}), lambda b: None, gpu_hz=10, host_hz=10)
    sampler.begin_run(1, os.getpid(), (1,))  # holds the flaky GPU
    sampler.begin_run(2, os.getpid(), (0,))  # does not
    for run in (1, 2):  # the measured window opens (a warm-up iteration ends) ...
        sampler.iteration(run, time.monotonic_ns(), 0.0, warmup=True)
    with caplog.at_level(logging.WARNING, logger="dltop.telemetry.sampler"):
        for _ in range(6):
            sampler.tick()
    for run in (1, 2):  # ... and closes around the ticks
        sampler.iteration(run, time.monotonic_ns(), 0.0, warmup=False)
    flaky, clean = sampler.end_run(1), sampler.end_run(2)
    assert flaky is not None and clean is not None
    assert sampler.read_errors == 3
    assert (flaky.telemetry_read_errors, clean.telemetry_read_errors) == (3, 0)
    assert (flaky.gpu_samples, clean.gpu_samples) == (3, 6)  # the failed readings skipped
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and "GPU 1" in logged[0] and "GPU is lost" in logged[0]

    db = memory_db()
    db["campaigns"].insert({"id": 1, "name": "x", "status": "running", "created_at": "t"})
    db["jobs"].insert({"id": 1, "campaign_id": 1, "status": "x", "framework": "torch",
                       "model": "fcn-r", "batch_size": 1, "device": "gpu:1"})
    db["runs"].insert({"id": 1, "job_id": 1, "campaign_id": 1, "attempt": 1, "status": "ok"})
    Store(db).telemetry.write_run_telemetry(1, flaky)
    assert db["runs"].get(1)["telemetry_read_errors"] == 3


def test_the_sampler_thread_survives_a_raising_read() -> None:
    batches: list[Batch] = []
    backend = FlakyGpus(2, failing=set(range(2, 6)))
    sampler = Sampler(backend, batches.append, gpu_hz=50, host_hz=10, window_s=0.05,
                      flush_s=0.05)
    sampler.start()
    try:
        assert backend.reads.wait(timeout=10), "the sampler stopped reading"
    finally:
        sampler.stop()
    assert sampler.read_errors == 4 and backend.calls >= 8
    assert any(w.gpu_index == 1 for b in batches for w in b.gpu)  # GPU 1 read after failing
