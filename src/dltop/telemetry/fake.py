"""A deterministic, scriptable fake GPU backend: for tests and the labelled demo mode.

Every sample it produces carries ``simulated=True``; every output that shows
one says so. Utilization and power follow a :class:`Trace` (a function of seconds since
the backend started); the energy counter is the trace's exact integral, so
energy tests have exact answers. ``latency_s`` simulates the cost of each NVML
call by blocking (like a driver call), not by spinning.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dltop.telemetry.values import GpuProcess, GpuSample, GpuStatic

FAST_CALLS = 3  # utilization, memory, field values (power + energy)
SLOW_CALLS = 5  # temperature, 2 clocks, throttle reasons, processes


class Trace(Protocol):
    """GPU ``index``'s utilization, power and energy counter ``t`` seconds in (the tests'
    own traces, with exact energy, follow it too)."""

    def util(self, t: float, index: int) -> float: ...
    def power_w(self, t: float, index: int) -> float: ...
    def energy_j(self, t: float, index: int) -> float: ...


@dataclass(frozen=True)
class WaveTrace:
    """The demo trace: utilization swings around 50 %, power follows it."""

    period_s: float = 20.0
    idle_w: float = 60.0
    busy_w: float = 300.0

    def util(self, t: float, index: int) -> float:
        return 50.0 + 45.0 * math.sin(2 * math.pi * t / self.period_s + index)

    def power_w(self, t: float, index: int) -> float:
        return self.idle_w + (self.busy_w - self.idle_w) * self.util(t, index) / 100.0

    def energy_j(self, t: float, index: int) -> float:
        # integral of a + b sin(w t + phi) dt from 0 to t
        a = self.idle_w + (self.busy_w - self.idle_w) * 0.5
        b = (self.busy_w - self.idle_w) * 0.45
        w = 2 * math.pi / self.period_s
        return a * t - (b / w) * (math.cos(w * t + index) - math.cos(index))


class FakeGpuBackend:
    """N simulated GPUs following ``trace``."""

    simulated = True

    def __init__(self, n: int, trace: Trace | None = None,
                 latency_s: float = 0.0, clock_ns: Callable[[], int] = time.monotonic_ns,
                 processes: Callable[[int], tuple[GpuProcess, ...]] | None = None,
                 throttle: Callable[[int], int] | None = None) -> None:
        self.n = n
        self.trace = trace or WaveTrace()
        self.latency_s = latency_s
        self._clock = clock_ns
        self._t0 = clock_ns()
        self._processes = processes or (lambda index: ())
        self._throttle = throttle or (lambda index: 0)  # NVML clock-event reason bits
        self.call_count = 0

    def unavailable_reason(self) -> str | None:
        """Never: the fake always has its GPUs."""
        return None

    def device_count(self) -> int:
        """The configured number of fake GPUs."""
        return self.n

    def static(self, index: int) -> GpuStatic:
        """Fixed facts of a simulated 80 GiB, 700 W GPU."""
        return GpuStatic(index, f"Simulated GPU {index}", f"GPU-fake-{index:04d}",
                         80 * 2**30, 700.0, "fake", "fake", simulated=True)

    def _calls(self, n: int) -> None:
        self.call_count += n
        if self.latency_s > 0:
            time.sleep(self.latency_s * n)

    def sample(self, index: int, slow: bool) -> GpuSample:
        """One simulated reading at the current clock."""
        self._calls(FAST_CALLS + (SLOW_CALLS if slow else 0))
        now = self._clock()
        t = (now - self._t0) / 1e9
        util = self.trace.util(t, index)
        extra: dict[str, Any] = {}
        if slow:
            extra = dict(temperature_c=40.0 + util * 0.4, sm_clock_mhz=1980.0 - util,
                         mem_clock_mhz=2619.0, throttle_reasons=self._throttle(index),
                         processes=self._processes(index))
        return GpuSample(
            t_mono_ns=now, index=index, gpu_util_pct=util, mem_util_pct=util * 0.6,
            mem_used_bytes=int((8 + util * 0.5) * 2**30), mem_total_bytes=80 * 2**30,
            power_w=self.trace.power_w(t, index), power_source="instant",
            energy_j=self.trace.energy_j(t, index), simulated=True, **extra)
