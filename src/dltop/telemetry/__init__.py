"""Telemetry: NVML (GPU) and psutil (host) samplers."""

from __future__ import annotations

import os

from dltop.errors import UserError
from dltop.telemetry import nvml

FAKE_GPUS_ENV = "DLTOP_FAKE_GPUS"


def gpu_count(fake_gpus: int | None = None) -> int:
    """GPUs available to runs: simulated ones (``--fake-gpus``/``$DLTOP_FAKE_GPUS``) or NVML's.

    Raises:
        UserError: ``$DLTOP_FAKE_GPUS`` is not a non-negative integer.
    """
    if fake_gpus is None:
        raw = os.environ.get(FAKE_GPUS_ENV)
        if raw:
            try:
                fake_gpus = int(raw)
            except ValueError:
                fake_gpus = -1
            if fake_gpus < 0:
                raise UserError(f"${FAKE_GPUS_ENV}: expected a non-negative integer, "
                                f"got {raw!r}")
    if fake_gpus:
        return fake_gpus
    return nvml.device_count()
