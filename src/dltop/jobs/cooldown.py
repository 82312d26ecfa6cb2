"""The pause before a run: a fixed time, or until the job's GPUs have cooled or settled.

Back-to-back runs on a hot GPU measure its thermal throttling, not the
framework; ``cooldown_s`` bounds the wait, ``cooldown_temp_c`` and
``cooldown_power_w`` end it early once every GPU of the job is at or below them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from dltop.profiles.jobspec import JobSpec

Readings = Callable[[], dict[int, float]]
"""GPU index -> latest reading (the sampler's temperatures or powers)."""
POLL_S = 0.25


async def cool_down(job: JobSpec, gpus: tuple[int, ...], temperatures: Readings | None,
                    powers: Readings | None, stop: asyncio.Event, *,
                    wait: bool) -> tuple[float, float | None, float | None]:
    """Wait before a run as the job asks.

    Args:
        job: the job, with its ``cooldown_*`` settings.
        gpus: the GPUs the run will use.
        temperatures: latest GPU temperatures in °C (None without a sampler).
        powers: latest GPU power in W (None without a sampler).
        stop: set when the campaign stops: the wait ends at once.
        wait: False for the campaign's first run, which starts without a pause.

    Returns:
        (seconds waited, hottest GPU temperature in °C, highest GPU power in W)
        of the job's GPUs when it starts (None without readings).
    """
    def highest(read: Readings | None) -> float | None:
        values = read() if read is not None else {}
        vals = [values[i] for i in gpus if i in values]
        return max(vals) if vals else None

    def settled() -> bool:
        # Without a threshold (or a reading) only the full cooldown_s counts.
        checks = [(job.cooldown_temp_c, temperatures), (job.cooldown_power_w, powers)]
        wanted = [(limit, highest(read)) for limit, read in checks if limit is not None]
        return bool(wanted) and all(v is not None and v <= limit for limit, v in wanted)

    t0 = time.monotonic()
    if job.cooldown_s > 0 and wait:
        while time.monotonic() - t0 < job.cooldown_s and not stop.is_set():
            if settled():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=POLL_S)
    return time.monotonic() - t0, highest(temperatures), highest(powers)
