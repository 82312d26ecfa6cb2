"""How long each NVML query the sampler makes takes (``scripts/gpu_check_steps.py nvml``).

It makes no NVML call of its own: it runs :meth:`NvmlBackend.sample`, the
sampler's own reads, through a subclass that times each guarded query, so the
numbers are of exactly the calls a tick makes (docs/telemetry.md, docs/gpu.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dltop.telemetry.nvml import NvmlBackend, device_count


@dataclass(frozen=True)
class QueryLatency:
    """Wall time of one NVML query the sampler makes, over repeated calls."""

    field: str
    """The sampler's name for the query (``utilization``, ``field_values``, ...), or
    ``tick fast`` / ``tick slow`` for a whole :meth:`NvmlBackend.sample` of one GPU."""
    calls: int
    median_us: float
    p99_us: float
    max_us: float
    failures: int
    """Calls that raised (answered N/A; ``handle`` and fallbacks explain gaps)."""


class _TimedBackend(NvmlBackend):
    """NvmlBackend timing each guarded query by its field name."""

    def __init__(self) -> None:
        super().__init__()
        self.times_ns: dict[str, list[int]] = {}
        self.failures: dict[str, int] = {}

    def _q(self, gpu: int | None, field: str, call: Callable[[], Any]) -> Any:
        t0 = time.perf_counter_ns()
        value = super()._q(gpu, field, call)
        self.times_ns.setdefault(field, []).append(time.perf_counter_ns() - t0)
        if value is None:
            self.failures[field] = self.failures.get(field, 0) + 1
        return value


def _latency(field: str, times_ns: list[int], failures: int) -> QueryLatency:
    ordered = sorted(times_ns)
    p99 = ordered[max(0, -(-99 * len(ordered) // 100) - 1)]
    return QueryLatency(field, len(ordered), statistics.median(ordered) / 1e3, p99 / 1e3,
                        ordered[-1] / 1e3, failures)


def query_latencies(index: int = 0, calls: int = 1000,
                    budget_s: float = 60.0) -> tuple[QueryLatency, ...]:
    """Per-call latency of every NVML query the sampler makes of GPU ``index``.

    Runs the sampler's own reads (:meth:`NvmlBackend.sample`) ``calls`` times with
    the fast fields only and ``calls`` times with the slow ones too, alternating,
    timing each guarded query and each whole tick; stops early when ``budget_s``
    has passed (each result says how many calls it covers). The one-time handle
    lookup is left out.

    Returns:
        One :class:`QueryLatency` per query, then ``tick fast`` and ``tick slow``;
        empty when NVML is unavailable or has no GPU ``index``.
    """
    if device_count() <= index:
        return ()
    backend = _TimedBackend()
    backend.sample(index, slow=True)  # handle cached, process-utilization stamp set
    backend.times_ns.clear()
    backend.failures.clear()
    ticks: dict[str, list[int]] = {"tick fast": [], "tick slow": []}
    deadline = time.monotonic() + budget_s
    for _ in range(calls):
        for name, slow in (("tick fast", False), ("tick slow", True)):
            t0 = time.perf_counter_ns()
            backend.sample(index, slow=slow)
            ticks[name].append(time.perf_counter_ns() - t0)
        if time.monotonic() > deadline:
            break
    queries = [_latency(f, ts, backend.failures.get(f, 0))
               for f, ts in backend.times_ns.items() if f != "handle"]
    return (*queries, *(_latency(name, ts, 0) for name, ts in ticks.items()))
