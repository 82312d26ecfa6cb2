"""Telemetry: NVML (GPU) and psutil (host) samplers, and a labelled fake GPU backend.

API for the engine and the clients:

- :func:`open_gpu_backend` — real NVML, or simulated GPUs (``--fake-gpus N`` /
  ``$DLTOP_FAKE_GPUS``), both :class:`~dltop.telemetry.values.GpuBackend`.
- :class:`~dltop.telemetry.sampler.Sampler` — background thread; ``begin_run`` /
  ``end_run`` attribute readings to a run and return its
  :class:`~dltop.telemetry.values.RunTelemetry` over the measured window, which
  ``iteration`` (each iteration's end) moves; downsampled rows leave through
  its ``on_batch`` callback.
- :mod:`dltop.telemetry.clock` — monotonic to wall time (one anchor per process).
- :mod:`dltop.telemetry.contamination` — foreign use of a run's pinned CPUs.
- :mod:`dltop.telemetry.report` — ``dltop devices`` and ``dltop doctor`` data.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dltop.errors import UserError

if TYPE_CHECKING:
    from dltop.telemetry.values import GpuBackend

# The backends are imported where used: importing a submodule runs this file, and
# ``dltop export`` (which reads telemetry.contamination's threshold) starts faster
# without loading NVML's bindings (benchmarks/startup.py).

FAKE_GPUS_ENV = "DLTOP_FAKE_GPUS"
MAX_FAKE_GPUS = 64
"""Most simulated GPUs: more than any real host has (8-16), few enough that each one's
state, history and TUI row stay small (a billion grew memory without bound)."""


def fake_gpus_from_env() -> int:
    """``$DLTOP_FAKE_GPUS`` as a count (0 when unset).

    Raises:
        UserError: the variable is not a non-negative integer.
    """
    raw = os.environ.get(FAKE_GPUS_ENV, "").strip()
    if not raw:
        return 0
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise UserError(f"${FAKE_GPUS_ENV}: expected a non-negative integer, got {raw!r}")
    return n


def open_gpu_backend(fake_gpus: int | None = None, latency_s: float = 0.0) -> GpuBackend:
    """Simulated GPUs when asked for (argument, else the environment), else NVML.

    Raises:
        UserError: more than :data:`MAX_FAKE_GPUS` simulated GPUs asked for.
    """
    from dltop.telemetry import nvml
    from dltop.telemetry.fake import FakeGpuBackend

    n = fake_gpus if fake_gpus is not None else fake_gpus_from_env()
    if n > MAX_FAKE_GPUS:
        where = "--fake-gpus" if fake_gpus is not None else f"${FAKE_GPUS_ENV}"
        raise UserError(f"{where}: at most {MAX_FAKE_GPUS} simulated GPUs, got {n}")
    if n:
        return FakeGpuBackend(n, latency_s=latency_s)
    return nvml.NvmlBackend()


def gpu_count() -> int:
    """Real GPUs that runs can use (simulated GPUs run nothing)."""
    from dltop.telemetry import nvml

    return nvml.device_count()
