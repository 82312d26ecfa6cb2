"""Device frames for a live viewer: every GPU and the host, read in one call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dltop.telemetry.host import HostSampler
from dltop.telemetry.model import GpuBackend, GpuSample, GpuStatic, HostSample

SLOW_EVERY = 4
"""Temperature, clocks and processes are read on every 4th frame (they change slowly)."""


@dataclass(frozen=True)
class DeviceFrame:
    """One reading of every device."""

    statics: tuple[GpuStatic, ...]
    gpus: tuple[GpuSample, ...]
    host: HostSample | None
    gpu_unavailable: str | None
    """Why there are no GPUs (None when there are, or when there are none by choice)."""


class DevicePoller:
    """Reads every GPU of a backend and the host; call :meth:`poll` from a worker thread.

    Temperature and clocks are carried over from the last slow read, so every
    frame has them.
    """

    def __init__(self, backend: GpuBackend,
                 host: Callable[[], HostSample | None] | None = None) -> None:
        self._backend = backend
        self._host = host if host is not None else HostSampler().sample
        self._n = backend.device_count()
        self._statics = tuple(backend.static(i) for i in range(self._n))
        self._slow: dict[int, GpuSample] = {}
        self._frames = 0

    def poll(self) -> DeviceFrame:
        """Read all devices once."""
        slow = self._frames % SLOW_EVERY == 0
        self._frames += 1
        gpus = []
        for i in range(self._n):
            s = self._backend.sample(i, slow)
            if slow:
                self._slow[i] = s
            elif i in self._slow:
                last = self._slow[i]
                s = replace(s, temperature_c=last.temperature_c,
                            sm_clock_mhz=last.sm_clock_mhz, mem_clock_mhz=last.mem_clock_mhz,
                            throttle_reasons=last.throttle_reasons, processes=last.processes)
            gpus.append(s)
        reason = self._backend.unavailable_reason() if not self._n else None
        return DeviceFrame(self._statics, tuple(gpus), self._host(), reason)
